#!/usr/bin/env bash
# Session 24, call 1: lifted codes (a multiply and a mask per operand register) and the
# numerators' floor (no comparison per score): the HACK kernel tests of the fold build, then
# steps of HEAD e7d72c2, lift, and lift + floor, alternated, beside SDPA fp16.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/lift/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
timeout 260 $T/hack_kernels_gpu --test-threads 1 --nocapture > $R/tests.log 2>&1; echo "tests exit $?"
grep -E "^case 1[2-3]|^test |test result" $R/tests.log | cut -c1-200
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in base lift fold; do
  timeout 60 $T/hack_bench_$v $CFG --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/$v-$i.log 2>&1; echo "$v-$i exit $?"
done; done
timeout 100 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
grep check $R/fold-1.log | tail -3
for f in base-1 lift-1 fold-1 base-2 lift-2 fold-2 sdpa; do echo "== $f"; grep -E "^\| [18] \| [0-9]" $R/$f.log; done
