#!/usr/bin/env bash
# Session 24, call 3: the query operand's padding rows as one select, each head slot's first
# score row assigned (bc), and the same with 64-bit kernel indices (abc), against 625193f (fold),
# alternated, beside SDPA fp16; Nsight instruction counts; then the HACK kernel tests of abc.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/next/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in fold bc abc; do
  timeout 60 $T/hack_bench_$v $CFG --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/$v-$i.log 2>&1; echo "$v-$i exit $?"
done; done
timeout 100 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
for v in fold bc abc; do
  timeout 60 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread -k regex:mma_decode --launch-skip 20 --launch-count 1 $T/hack_bench_$v $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-$v.log 2>&1
  echo "== ncu $v"; grep -E "inst_executed|duration|registers" $R/ncu-$v.log
done
for f in fold-1 bc-1 abc-1 fold-2 bc-2 abc-2 sdpa; do echo "== $f"; grep -E "^\| [18] \| [0-9]" $R/$f.log; done
grep check $R/abc-1.log | tail -3
timeout 250 $T/hack_kernels_gpu --test-threads 1 --nocapture > $R/tests.log 2>&1; echo "tests exit $?"
grep -E "^case 1[2-3]|^test |test result" $R/tests.log | cut -c1-200
