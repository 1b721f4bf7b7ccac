#!/usr/bin/env bash
# Session 23, call 2: two blocks in flight a warp (two stage regions, one barrier each, a warp
# synchronization before refilling a region) on top of the fp16 (min, scale) words: the HACK
# kernel tests, then steps of HEAD f30eaf2 (base), fp16 words (half) and both (staged) alternated
# beside SDPA fp16, then Nsight counts.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/h2/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 $T/hack_kernels_gpu --test-threads 1 > $R/tests.log 2>&1; echo "tests exit $?"
grep -E "^test |test result" $R/tests.log
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in base half staged; do
  timeout 100 $T/hack_bench_$v $CFG --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/$v-$i.log 2>&1; echo "$v-$i exit $?"
done; done
timeout 150 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
timeout 60 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread --csv -k regex:mma_decode --launch-skip 20 --launch-count 3 $T/hack_bench_staged $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-staged.csv 2>&1
python3 examples/bench/ncu_summary.py $R/ncu-staged.csv 2>/dev/null | tail -3
head -12 $R/staged-1.log | grep check
for f in base-1 half-1 staged-1 base-2 half-2 staged-2 sdpa; do echo "== $f"; grep -E "^\| [18] \| [0-9]" $R/$f.log; done
