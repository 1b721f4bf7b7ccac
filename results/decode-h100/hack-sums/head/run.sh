#!/usr/bin/env bash
# Session 22, call 1: HEAD (9d3b380) HACK decode tests under bounds validation (+ control), timings at
# 32K batch 8 beside SDPA fp16, and a full Nsight profile of the decode kernel (stalls, pipes).
H=.gpu/v1; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/hack_kernels_gpu > $R/validate.txt 2>&1; echo "validate exit $?"; tail -4 $R/validate.txt
grep -E "^case|test result" $R/validate/hack_kernels_gpu*.log | tail -14 > $R/cases.txt; tail -3 $R/cases.txt
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do timeout 120 $T/hack_bench $CFG --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/hack-$i.log 2>&1; done
timeout 200 python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
timeout 200 ncu --set full --import-source no -k regex:mma_decode --launch-skip 20 --launch-count 1 -o $R/prof $T/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu.log 2>&1; tail -2 $R/ncu.log
ncu -i $R/prof.ncu-rep --page source --print-source sass --csv > $R/sass.csv 2>/dev/null
ncu -i $R/prof.ncu-rep --page details --csv > $R/details.csv 2>/dev/null
python3 $H/sass_mix.py $R/sass.csv --per 32768 --top 24 > $R/mix.txt; cat $R/mix.txt | tail -16
grep -E '"(Duration|Registers Per Thread|Issue Slots Busy|Executed Ipc Active|Memory Throughput|DRAM Throughput|Achieved Occupancy|Compute \(SM\) Throughput)"' $R/details.csv | cut -d, -f13- | head -12
cd $R && tar cJf prof.tar.xz prof.ncu-rep sass.csv details.csv && rm prof.ncu-rep sass.csv details.csv
grep -hE "^\| 8 \| (16384|32768|65536)" $R/hack-1.log $R/hack-2.log $R/sdpa.log
