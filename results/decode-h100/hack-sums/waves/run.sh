#!/usr/bin/env bash
# Session 22, call 3: HEAD 9d3b380 (v1), code sums from the products' padding (v2: the plan then took 2
# cubes per SM, 2 waves), and v2 with cubes per SM limited by registers (v3: 1 wave), alternated.
T=/tmp/kvt; R="$OUT"; mkdir -p $T/v1 $T/v2 $T/v3
for v in v1 v2 v3; do for f in .gpu/$v/hack_bench.xz; do xz -dc $f > $T/$v/hack_bench; chmod +x $T/$v/hack_bench; done; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in v1 v2 v3; do timeout 120 $T/$v/hack_bench $CFG --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/hack-$v-$i.log 2>&1; echo "$v run $i exit $?"; done; done
timeout 200 python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
for v in v3; do timeout 150 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread --csv -k regex:mma_decode --launch-skip 20 --launch-count 3 $T/$v/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-$v.csv 2>&1; echo "ncu $v"; python3 examples/bench/ncu_summary.py $R/ncu-$v.csv | tail -2; done
for v in v1 v2 v3; do echo "== $v"; grep -hE "^\| 8 \| (16384|32768|65536)" $R/hack-$v-1.log $R/hack-$v-2.log; done; echo "== sdpa"; grep -hE "^\| 8 \| (16384|32768|65536)" $R/sdpa.log
