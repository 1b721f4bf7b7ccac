#!/usr/bin/env bash
# Call 6: code words loaded where they are needed (values at the round's start, the next round's
# keys after the scores; no second buffers) against the one-round-ahead loads of f238ed7
# (KVC_PQ_OLDLOADS=1, the same binary): tests under bounds validation, Nsight, alternated steps.
H=.gpu/m6; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
timeout 150 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tail -3 | tee $R/val-summary.txt
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__warps_active.avg.per_cycle_active"
for v in X=1 KVC_PQ_OLDLOADS=1; do env $v timeout 60 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -c 8 $T/pq_bench $B > $R/ncu-$v.txt 2>/dev/null
  echo "ncu $v: $(grep -E "duration|inst_executed|registers|warps_active" $R/ncu-$v.txt | tail -4 | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $R/ncu-summary.txt; done
A="--backend cuda --contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in KVC_PQ_OLDLOADS=1 X=1; do
  echo "$v $i: $(env $v timeout 40 $T/pq_bench $A 2>&1 | tee $R/pq-$v-$i.log | grep -E '^\| [18] \|' | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}') checks:$(grep -ciE 'mismatch|fail' $R/pq-$v-$i.log)" | tee -a $R/steps.txt; done; done
timeout 40 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}')" | tee $R/sdpa-steps.txt
cd $R && tar czf raw.tgz *.log ncu-*.txt val && rm -rf val *.log ncu-*.txt
