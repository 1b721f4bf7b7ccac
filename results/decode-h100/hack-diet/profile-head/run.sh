#!/usr/bin/env bash
# HEAD's (0835a50) HACK mma decode kernel at 32K batch 8: per-instruction executed counts and stall samples
# (sass-counts.csv: ncu's source page; opcode-mix: executed warp instructions per opcode, per block and warp).
H=.gpu/p2; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
timeout 200 ncu --set full --import-source no -k regex:mma_decode --launch-skip 20 --launch-count 1 -o $R/prof $T/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu.log 2>&1; tail -3 $R/ncu.log
ncu -i $R/prof.ncu-rep --page source --print-source sass --csv > $R/sass-counts.csv 2>$R/sass-counts.err; wc -l $R/sass-counts.csv
ncu -i $R/prof.ncu-rep --page details --csv > $R/details.csv 2>/dev/null; grep -E "Grid Size|Duration|Registers" $R/details.csv | head
