#!/usr/bin/env bash
# Call 1: HEAD's MILLION decode kernel: the CUDA source CubeCL generates (compilation log), Nsight's
# SASS source page of a 32K batch 8 launch (per-opcode counts and stalls), steps and SDPA fp16.
H=.gpu/c1; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $R/device.txt
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
CUBECL_DEBUG_LOG=$T/cubecl.log timeout 60 $T/pq_bench $B > $R/pq-src.log 2>&1
grep -n "mma_decode" $T/cubecl.log | head -3; xz -T4 -c $T/cubecl.log > $R/cubecl.log.xz; ls -la $R/cubecl.log.xz
timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy -k regex:"mma_decode" -s 10 -c 1 -o $T/prof $T/pq_bench $B > $R/ncu-run.txt 2>&1
ncu -i $T/prof.ncu-rep --page source --print-source sass --csv > $T/sass.csv 2>/dev/null
ncu -i $T/prof.ncu-rep --page details > $R/ncu-details.txt 2>/dev/null
python3 examples/bench/sass_mix.py $T/sass.csv --per 65536 --top 30 > $R/sass-mix.txt 2>&1; head -45 $R/sass-mix.txt
xz -T4 -c $T/sass.csv > $R/sass.csv.xz
A="--backend cuda --contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do timeout 40 $T/pq_bench $A > $R/pq-$i.log 2>&1; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context = pipelined us)"
for f in $R/pq-?.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}' | tee $R/sdpa-steps.txt; echo
grep -E "Duration|Registers Per|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued" $R/ncu-details.txt | head
