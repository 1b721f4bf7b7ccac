#!/usr/bin/env bash
# Call 4: fast exponentials in the HACK, MILLION and ZACK tensor-core decode kernels; HACK's output
# corrections shared out over the lanes of padding columns (value fold). Decode tests of all three
# (case lines), A/B/C HACK steps (0835a50, 6de3f4c, new), MILLION and ZACK A/B, SDPA, bounds
# validation of the HACK and MILLION decode tests, HACK kernel instructions.
H=.gpu/p4; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader
W=$(mktemp -d); cd $W
timeout 90 $T/hack_kernels_gpu --test-threads 1 --nocapture decode > $R/hack-decode.txt 2>&1; echo "hack decode: $(grep -E 'test result' $R/hack-decode.txt | cut -c1-50)"; grep -E "^case 6|FAILED|panicked" $R/hack-decode.txt | cut -c1-220 | head -5
timeout 60 $T/pq_kernels_gpu --test-threads 1 --nocapture decode > $R/pq-decode.txt 2>&1; echo "pq decode: $(grep -E 'test result' $R/pq-decode.txt | cut -c1-50)"; grep -E "FAILED|panicked" $R/pq-decode.txt | head -3
timeout 90 $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/zack-decode.txt 2>&1; echo "zack decode: $(grep -E 'test result' $R/zack-decode.txt | cut -c1-50)"; grep -E "TMA case|FAILED|panicked" $R/zack-decode.txt | cut -c1-120 | head -5
cd - > /dev/null
C="--contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64"
row() { grep -E '^\| 8 \| (16384|32768|65536)' $1 | awk -F'|' '{printf "%s:%s ", $3, $7}'; }
for i in 1 2; do for b in hack_bench hack_bench_6de3f4c hack_bench_0835a50; do timeout 60 $T/$b --backend cuda $C > $R/$b-$i.log 2>&1; echo "$b $i: $(row $R/$b-$i.log)"; done; done
python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1; grep -E "^\| 8" $R/sdpa.log
for i in 1 2; do for b in pq_bench pq_bench_0835a50; do timeout 60 $T/$b --backend cuda --contexts 32768 --batches 8 --runs 200 --prefill-contexts 64 > $R/$b-$i.log 2>&1; echo "$b $i: $(row $R/$b-$i.log)"; done; done
for i in 1 2; do for b in zack_bench zack_bench_0835a50; do timeout 60 $T/$b --backend cuda --contexts 32768 --batches 8 --runs 200 --prefill-contexts 64 > $R/$b-$i.log 2>&1; echo "$b $i: $(row $R/$b-$i.log)"; done; done
M="--clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread --csv"
timeout 60 ncu $M -k regex:mma_decode --launch-skip 20 --launch-count 1 $T/hack_bench --backend cuda --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-hack.csv 2>&1; echo "hack kernel: $(grep -E 'duration|inst_executed|registers' $R/ncu-hack.csv | awk -F'","' '{printf "%s=%s ", $(NF-2), $NF}')"
V=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $V/cubecl.toml; cd $V
timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/val/control.log 2>&1; echo "control reports: $(grep -c VALIDATION $R/val/control.log)"
timeout 150 $T/hack_kernels_gpu --test-threads 1 decode > $R/val/hack.log 2>&1; echo "hack validate: exit $? $(grep -c VALIDATION $R/val/hack.log) reports; $(grep -E 'test result' $R/val/hack.log | cut -c1-40)"
timeout 60 $T/pq_kernels_gpu --test-threads 1 decode > $R/val/pq.log 2>&1; echo "pq validate: exit $? $(grep -c VALIDATION $R/val/pq.log) reports; $(grep -E 'test result' $R/val/pq.log | cut -c1-40)"
