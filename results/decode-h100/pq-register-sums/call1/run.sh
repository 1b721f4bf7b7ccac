#!/usr/bin/env bash
# Call 1: register-held value sums (manual mma.sync m16n8k16 + ldmatrix) against HEAD's wmma
# kernel, code words loaded a round ahead or late; kernel tests under bounds validation (both
# load modes), Nsight counts at 32K batch 8 by warps, steps over the issue's grid, SDPA fp16.
H=.gpu/pqreg; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
timeout 120 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tail -3 | tee $R/val-summary.txt
KVC_PQ_LATE=1 timeout 100 bash examples/bench/validate_bounds.sh $R/val-late $T/pq_kernels_gpu | tail -1 | sed 's/^/late: /' | tee -a $R/val-summary.txt
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size,smsp__warps_active.avg.per_cycle_active"
run_ncu() { timeout 60 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -c 3 "$@" $B > $R/ncu-$TAG.txt 2>/dev/null
  echo "ncu $TAG: $(grep -E "duration|inst_executed|registers|block_size|warps_active" $R/ncu-$TAG.txt | tail -5 | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $R/ncu-summary.txt; }
TAG=head run_ncu $T/pq_bench_head
for w in 16 14 12; do TAG=w$w KVC_PQ_WARPS=$w run_ncu $T/pq_bench; done
for w in 16 14; do TAG=late-w$w KVC_PQ_LATE=1 KVC_PQ_WARPS=$w run_ncu $T/pq_bench; done
A="--backend cuda --contexts 4096,16384,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do
  timeout 40 $T/pq_bench_head $A > $R/pq-head-$i.log 2>&1
  KVC_PQ_WARPS=16 timeout 40 $T/pq_bench $A > $R/pq-w16-$i.log 2>&1
  KVC_PQ_LATE=1 timeout 40 $T/pq_bench $A > $R/pq-late16-$i.log 2>&1
done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context = pipelined us)"
for f in $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}' | tee $R/sdpa-steps.txt; echo
grep -iE "copy bandwidth|TB/s" $R/sdpa.log | head -3
grep -hE "check decode|rror|panic" $R/pq-w16-1.log $R/pq-late16-1.log | head -8
cd $R && tar czf raw.tgz *.log ncu*.txt val val-late && rm -rf val val-late *.log ncu-*.txt
