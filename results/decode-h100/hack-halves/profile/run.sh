#!/usr/bin/env bash
# Session 23, call 3: a full Nsight profile of the two-stage decode kernel (6729d0d) at 32K batch 8:
# stall reasons and opcode mix per source line.
H=.gpu/h3; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
timeout 300 ncu --set full --import-source no -k regex:mma_decode --launch-skip 20 --launch-count 1 -o $R/prof $T/hack_bench_staged $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu.log 2>&1; tail -2 $R/ncu.log
ncu -i $R/prof.ncu-rep --page source --print-source sass --csv > $R/sass.csv 2>/dev/null
ncu -i $R/prof.ncu-rep --page details --csv > $R/details.csv 2>/dev/null
python3 $H/sass_mix.py $R/sass.csv --per 32768 --top 30 > $R/mix.txt; tail -40 $R/mix.txt
grep -E '"(Duration|Registers Per Thread|Issue Slots Busy|Executed Ipc Active|Memory Throughput|DRAM Throughput|Achieved Occupancy|Compute \(SM\) Throughput|L1/TEX Hit Rate|Theoretical Occupancy|Block Limit Registers|Block Limit Shared Mem)"' $R/details.csv | cut -d, -f13- | head -20
cd $R && tar cJf prof.tar.xz prof.ncu-rep sass.csv details.csv && rm prof.ncu-rep sass.csv details.csv
