#!/usr/bin/env bash
# Session 23, call 4: 18 warps a cube (their two stage regions fit now; 112 registers a lane under
# the launch bound) against 16 (6729d0d), alternated, beside SDPA fp16.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/h4/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in staged w18; do
  timeout 100 $T/hack_bench_$v $CFG --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/$v-$i.log 2>&1; echo "$v-$i exit $?"
done; done
timeout 150 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
timeout 60 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread --csv -k regex:mma_decode --launch-skip 20 --launch-count 3 $T/hack_bench_w18 $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-w18.csv 2>&1
python3 examples/bench/ncu_summary.py $R/ncu-w18.csv 2>/dev/null | tail -3
grep check $R/w18-1.log | tail -3
for f in staged-1 w18-1 staged-2 w18-2 sdpa; do echo "== $f"; grep -E "^\| [18] \| [0-9]" $R/$f.log; done
