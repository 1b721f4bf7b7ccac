#!/usr/bin/env bash
# Session 24, call 4: a full Nsight profile of the decode kernel with 64-bit indices (abc) at
# 32K batch 8: opcode mix, stalls and pipe utilization.
H=.gpu/prof2; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
timeout 300 ncu --set full --import-source no -k regex:mma_decode --launch-skip 20 --launch-count 1 -o $R/prof $T/hack_bench_abc $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu.log 2>&1; tail -2 $R/ncu.log
ncu -i $R/prof.ncu-rep --page source --print-source sass --csv > $R/sass.csv 2>/dev/null
ncu -i $R/prof.ncu-rep --page details --csv > $R/details.csv 2>/dev/null
ncu -i $R/prof.ncu-rep --page raw --csv > $R/raw.csv 2>/dev/null
python3 $H/sass_mix.py $R/sass.csv --per 32768 --top 40 > $R/mix.txt; tail -60 $R/mix.txt
grep -E '"(Duration|Registers Per Thread|Issue Slots Busy|Executed Ipc Active|Memory Throughput|DRAM Throughput|Achieved Occupancy|Compute \(SM\) Throughput|SM Frequency)"' $R/details.csv | cut -d, -f13- | head -20
python3 - $R/raw.csv <<'PY' > $R/pipes.txt
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, units, vals = rows[0], rows[1], rows[2]
for h, u, v in zip(head, units, vals):
    if "pipe" in h and ("pct_of_peak" in h or "inst_executed_pipe" in h) and "sum" in h:
        print(h, v, u)
PY
grep -E "alu|fma|xu|tensor|lsu|adu|cbu|uniform" $R/pipes.txt | grep pct | head -40
cd $R && tar cJf prof.tar.xz prof.ncu-rep sass.csv details.csv raw.csv && rm prof.ncu-rep sass.csv details.csv raw.csv
