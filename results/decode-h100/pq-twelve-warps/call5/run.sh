#!/usr/bin/env bash
# Call 5: the recent window's scores four channels an iteration (pq_bench), against f238ed7
# (pq_bench_q: queries from global memory, 12 warps) and HEAD bf7c6f2 (pq_bench_old).
H=.gpu/m5; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
timeout 200 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tail -3 | tee $R/val-summary.txt
A="--backend cuda --contexts 4096,16384,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for s in _old _q ""; do timeout 60 $T/pq_bench$s $A > $R/pq$s-$i.log 2>&1; done; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context = pipelined us)"
for f in $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}') checks:$(grep -ciE 'mismatch|fail' $f)"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}' | tee $R/sdpa-steps.txt; echo
grep -iE "copy bandwidth" $R/sdpa.log | head -1
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread"
timeout 100 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -c 8 $T/pq_bench $B > $R/ncu.txt 2>/dev/null
echo "ncu: $(grep -E "duration|inst_executed|registers" $R/ncu.txt | tail -3 | awk '{printf "%s=%s ", $1, $NF}')" | tee $R/ncu-summary.txt
cd $R && tar czf raw.tgz *.log ncu.txt val && rm -rf val *.log ncu.txt
