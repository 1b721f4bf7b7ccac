#!/usr/bin/env bash
# Session 22, call 4: v4 = v3 + key metadata kept dense on append (CUDA padded rows of two f32 to 16 bytes)
# + the bench's byte count without the sums the kernel no longer reads. HACK GPU tests under bounds
# validation (+ control), v1/v3/v4 alternated, SDPA fp16, Nsight counts of v4.
T=/tmp/kvt; R="$OUT"; mkdir -p $T/v1 $T/v3 $T/v4
for v in v1 v3 v4; do for f in .gpu/$v/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$v/$n; chmod +x $T/$v/$n; done; done
bash examples/bench/validate_bounds.sh $R/validate $T/v1/merge_gpu $T/v4/hack_kernels_gpu > $R/validate.txt 2>&1; echo "validate exit $?"; tail -3 $R/validate.txt
grep -hE "^case|test result" $R/validate/hack_kernels_gpu*.log | cut -c1-140 > $R/cases.txt; tail -4 $R/cases.txt
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in v1 v3 v4; do timeout 100 $T/$v/hack_bench $CFG --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/hack-$v-$i.log 2>&1; echo "$v run $i exit $?"; done; done
timeout 150 python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
timeout 100 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread --csv -k regex:mma_decode --launch-skip 20 --launch-count 3 $T/v4/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-v4.csv 2>&1; python3 examples/bench/ncu_summary.py $R/ncu-v4.csv | tail -1
for v in v1 v3 v4; do echo "== $v"; grep -hE "^\| 8 \| (16384|32768|65536)" $R/hack-$v-1.log $R/hack-$v-2.log; done; echo "== sdpa"; grep -hE "^\| 8 \| (16384|32768|65536)" $R/sdpa.log
