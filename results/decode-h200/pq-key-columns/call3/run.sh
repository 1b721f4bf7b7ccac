#!/usr/bin/env bash
# Call 3: the key words loaded behind the values into the registers of the round's own, the value words at the round's start (32 registers of code words rather than 64), against e202e4d (key columns):
# kernel tests under bounds validation, Nsight SASS mix of a 32K batch 8 launch, steps alternated twice, SDPA fp16.
H=.gpu/c3; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/raw/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $R/device.txt
timeout 150 bash examples/bench/validate_bounds.sh $R/raw/val $T/merge_gpu $T/pq_kernels_gpu | tail -4 | tee $R/val-summary.txt
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
A="--backend cuda --contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for s in _cols ""; do timeout 40 $T/pq_bench$s $A > $R/raw/pq$s-$i.log 2>&1; done; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/raw/sdpa.log 2>&1
timeout 150 ncu --clock-control none --section SourceCounters --section WarpStateStats --section LaunchStats -k regex:"mma_decode" -s 10 -c 1 -o $T/prof $T/pq_bench $B > $R/raw/ncu-run.txt 2>&1
ncu -i $T/prof.ncu-rep --page source --print-source sass --csv > $T/sass.csv 2>/dev/null
ncu -i $T/prof.ncu-rep --page details > $R/raw/ncu-details.txt 2>/dev/null
python3 examples/bench/sass_mix.py $T/sass.csv --per 65536 --top 24 > $R/sass-mix.txt 2>&1
CUBECL_DEBUG_LOG=$T/cubecl.log timeout 60 $T/pq_bench $B > $R/raw/pq-src.log 2>&1; xz -T4 -c $T/cubecl.log > $R/raw/cubecl.log.xz
echo "== steps (batch/context = pipelined us)"
for f in $R/raw/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/raw/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}' | tee $R/sdpa-steps.txt; echo
grep -hiE "check|mismatch|rror|panic" $R/raw/pq-1.log | head -5
head -14 $R/sass-mix.txt
grep -E "Duration|Registers Per|Warp Cycles Per Issued" $R/raw/ncu-details.txt | head
cd $R && tar czf raw.tgz raw && rm -rf raw
