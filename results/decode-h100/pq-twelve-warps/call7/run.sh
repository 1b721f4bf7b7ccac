#!/usr/bin/env bash
# Call 7: code-word loads, three ways: f238ed7 (pq_bench_landed: both one round ahead), "late"
# (KVC_PQ_LOADS=late: values at the round's start, next keys after the scores), and the default
# "hybrid" (values one round ahead, next keys after the scores, no second key buffer).
H=.gpu/m7; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
timeout 120 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tail -2 | tee $R/val-summary.txt
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread"
for b in pq_bench_landed pq_bench; do timeout 45 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -c 8 $T/$b $B > $R/ncu-$b.txt 2>/dev/null
  echo "ncu $b: $(grep -E "duration|inst_executed|registers" $R/ncu-$b.txt | tail -3 | awk '{printf "%s=%s ", $1, $NF}')" | tee -a $R/ncu-summary.txt; done
A="--backend cuda --contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in landed:X=1 hybrid:X=1 late:KVC_PQ_LOADS=late; do n=${v%%:*}; e=${v##*:}; b=pq_bench; [ $n = landed ] && b=pq_bench_landed
  echo "$n $i: $(env $e timeout 30 $T/$b $A 2>&1 | tee $R/pq-$n-$i.log | grep -E '^\| [18] \|' | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}') checks:$(grep -ciE 'mismatch|fail' $R/pq-$n-$i.log)" | tee -a $R/steps.txt; done; done
timeout 30 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}')" | tee $R/sdpa-steps.txt
cd $R && tar czf raw.tgz *.log ncu-*.txt val && rm -rf val *.log ncu-*.txt
