#!/usr/bin/env bash
# Session 23, call 8: the refactored round (the next block copied at the round's start into the
# region read last round; one copy call site fewer, the same schedule): the HACK kernel tests,
# then steps against 6729d0d, alternated, beside SDPA fp16.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/h7/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
timeout 260 $T/hack_kernels_gpu --test-threads 1 --nocapture > $R/tests.log 2>&1; echo "tests exit $?"
grep -E "^case 1[2-3]|^test |test result" $R/tests.log | cut -c1-200
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in head one; do
  timeout 60 $T/hack_bench_$v $CFG --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/$v-$i.log 2>&1; echo "$v-$i exit $?"
done; done
timeout 100 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
grep check $R/one-1.log | tail -3
for f in head-1 one-1 head-2 one-2 sdpa; do echo "== $f"; grep -E "^\| [18] \| [0-9]" $R/$f.log; done
