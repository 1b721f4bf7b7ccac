#!/usr/bin/env bash
# Call 3: HACK mma decode kernel with fast exp, one-FMA P codes, lane slices, scale folded into Q rows,
# mask only at edge blocks. Tests (validated), A/B steps vs HEAD, SDPA, ncu instruction counts.
H=.gpu/p3; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader
(cd $(mktemp -d) && timeout 150 $T/hack_kernels_gpu --test-threads 1 > $R/tests.txt 2>&1); echo "tests: $(grep -E 'test result' $R/tests.txt | cut -c1-70)"; grep -E "^case|panicked|FAILED" $R/tests.txt | cut -c1-200 | head -20
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for b in hack_bench hack_bench_base; do timeout 100 $T/$b $CFG --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/$b-$i.log 2>&1; echo "$b $i: $(grep -E '^\| 8 \| (16384|32768|65536)' $R/$b-$i.log | awk -F'|' '{printf "%s:%s ", $3, $7}')"; done; done
grep -E "^check" $R/hack_bench-1.log | cut -c1-160
python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1; grep -E "^\| 8" $R/sdpa.log
M="--clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread --csv"
for b in hack_bench hack_bench_base; do timeout 100 ncu $M -k regex:mma_decode --launch-skip 20 --launch-count 1 $T/$b $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-$b.csv 2>&1; echo "$b: $(grep -E 'duration|inst_executed|registers' $R/ncu-$b.csv | awk -F'","' '{printf "%s=%s ", $(NF-2), $NF}')"; done
timeout 200 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/hack_kernels_gpu 2>&1 | tail -4
