#!/usr/bin/env bash
# Session 22, call 5: issue 3's whole grid on d800794 (v4): decode at 4K-64K, batch 1 and 8, prefill at
# 4K and 16K, HACK and SDPA fp16 in the same call, HACK twice.
T=/tmp/kvt; R="$OUT"; mkdir -p $T/v4
xz -dc .gpu/v4/hack_bench.xz > $T/v4/hack_bench; chmod +x $T/v4/hack_bench
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do timeout 200 $T/v4/hack_bench $CFG --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 4096,16384 > $R/hack-$i.log 2>&1; echo "hack run $i exit $?"; done
timeout 200 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 4096,16384 > $R/sdpa.log 2>&1; echo "sdpa exit $?"
for f in hack-1 hack-2 sdpa; do echo "== $f"; grep -E "^\| [0-9]" $R/$f.log; done
