#!/usr/bin/env bash
# Call 3: the landed build (register-held value sums, 12 warps by the register bound) against HEAD
# 3db8e05: kernel tests under bounds validation, Nsight on a 32K batch 8 launch, steps over the
# issue's grid alternated twice, SDPA fp16 in the same call.
H=.gpu/pqreg; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
timeout 120 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tail -3 | tee $R/val-summary.txt
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size,launch__grid_size,smsp__warps_active.avg.per_cycle_active,l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"
for s in _head ""; do timeout 60 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -s 10 -c 1 $T/pq_bench$s $B > $R/ncu$s.txt 2>/dev/null
  echo "ncu pq_bench$s: $(grep -E "duration|inst_executed|registers|block_size|grid_size|warps_active|local_op" $R/ncu$s.txt | tail -7 | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $R/ncu-summary.txt; done
A="--backend cuda --contexts 4096,16384,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for s in _head ""; do timeout 40 $T/pq_bench$s $A > $R/pq$s-$i.log 2>&1; done; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context = pipelined us)"
for f in $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}' | tee $R/sdpa-steps.txt; echo
grep -iE "copy bandwidth" $R/sdpa.log | head -2
grep -hE "check|rror|panic" $R/pq-1.log | head -8
cd $R && tar czf raw.tgz *.log ncu*.txt val && rm -rf val *.log ncu_head.txt ncu.txt
