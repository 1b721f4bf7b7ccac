#!/usr/bin/env bash
# Session 22, call 2: code sums from the products' padding (v2) against HEAD 9d3b380 (v1): decode
# tests of v2, alternated timings at 16K/32K/64K batch 8, SDPA fp16, Nsight counts at 32K.
T=/tmp/kvt; R="$OUT"; mkdir -p $T/v1 $T/v2
for v in v1 v2; do for f in .gpu/$v/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$v/$n; chmod +x $T/$v/$n; done; done
timeout 200 $T/v2/hack_kernels_gpu --test-threads 1 --nocapture decode > $R/tests-v2.log 2>&1; echo "tests v2 exit $?"; grep -E "^case|test result" $R/tests-v2.log | cut -c1-150
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in v1 v2; do timeout 120 $T/$v/hack_bench $CFG --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/hack-$v-$i.log 2>&1; echo "$v run $i exit $?"; done; done
timeout 200 python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
for v in v1 v2; do timeout 150 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread --csv -k regex:mma_decode --launch-skip 20 --launch-count 3 $T/$v/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-$v.csv 2>&1; echo "ncu $v"; python3 examples/bench/ncu_summary.py $R/ncu-$v.csv | tail -2; done
for v in v1 v2; do echo "== $v"; grep -hE "^\| 8 \| (16384|32768|65536)" $R/hack-$v-1.log $R/hack-$v-2.log; done; echo "== sdpa"; grep -hE "^\| 8 \| (16384|32768|65536)" $R/sdpa.log
