#!/usr/bin/env bash
# Call 2: the register-sums kernel against HEAD at 32K batch 8 by warps (12, 13, 16), Nsight on
# the timed launches (the check's launches skipped), local-memory traffic (spills), steps.
H=.gpu/pqreg; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/pq_bench*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size,smsp__warps_active.avg.per_cycle_active"
L="l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"
run_ncu() { timeout 50 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -s 3 -c 2 "$@" $B > $R/ncu-$TAG.txt 2>/dev/null
  echo "ncu $TAG: $(grep -E "duration|inst_executed|registers|block_size|warps_active" $R/ncu-$TAG.txt | tail -5 | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $R/ncu-summary.txt
  timeout 40 ncu --clock-control none --metrics "$L" -k regex:"mma_decode" -s 3 -c 1 "$@" $B > $R/ncu-local-$TAG.txt 2>&1
  echo "local $TAG: $(grep -E "local_op" $R/ncu-local-$TAG.txt | tail -2 | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $R/ncu-summary.txt; }
TAG=head run_ncu $T/pq_bench_head
for w in 12 13 16; do TAG=w$w KVC_PQ_WARPS=$w run_ncu $T/pq_bench; done
A="--backend cuda --contexts 32768,65536 --batches 8 --runs 200 --prefill-contexts 64"
for i in 1 2; do
  timeout 30 $T/pq_bench_head $A > $R/pq-head-$i.log 2>&1
  for w in 12 13; do KVC_PQ_WARPS=$w timeout 30 $T/pq_bench $A > $R/pq-w$w-$i.log 2>&1; done
done
echo "== steps (batch/context = pipelined us)"
for f in $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee $R/steps.txt
cd $R && tar czf raw.tgz *.log ncu*.txt && rm -rf *.log ncu-*.txt
