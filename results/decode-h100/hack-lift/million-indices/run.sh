#!/usr/bin/env bash
# Session 24, call 5: MILLION's tensor-core decode kernel with 64-bit indices (u64) against HEAD
# fa7e9bd (head): the PQ kernel tests under bounds validation, alternated steps beside SDPA fp16,
# Nsight instruction counts at 32K batch 8.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/final/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
timeout 150 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tee $R/val-summary.txt
A="--backend cuda --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in head u64; do timeout 55 $T/pq_bench_$v $A > $R/pq-$v-$i.log 2>&1; echo "$v-$i exit $?"; done; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
B="--backend cuda --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64"
for v in head u64; do
  timeout 60 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread -k regex:mma_decode --launch-skip 20 --launch-count 1 $T/pq_bench_$v $B > $R/ncu-$v.log 2>&1
  echo "== ncu $v"; grep -E "inst_executed|duration|registers" $R/ncu-$v.log
done
grep -i check $R/pq-u64-1.log | tail -3
for f in pq-head-1 pq-u64-1 pq-head-2 pq-u64-2 sdpa; do echo "== $f"; grep -E "^\| [18] \| [0-9]" $R/$f.log; done
