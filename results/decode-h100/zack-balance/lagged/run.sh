#!/usr/bin/env bash
# ZACK value plan with values one round late: ZACK decode and storage tests, PQ kernel tests
# (shared warp module changed), pipelined steps alternated with the base build (HEAD 558a015) at
# uneven and even ranks, PQ steps, SDPA fp16 in the same call. Outputs go straight to $OUT.
H=.gpu/bal; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
export KVC_SHARED=$PWD/$H/shared
timeout 120 $T/zack_kernels_gpu --test-threads 1 --nocapture > $R/zack-tests.txt 2>&1
timeout 60 $T/zack_storage_gpu --test-threads 1 > $R/zack-storage.txt 2>&1
timeout 100 $T/pq_kernels_gpu --test-threads 1 --nocapture > $R/pq-tests.txt 2>&1
A="--backend cuda --storage f16 --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for b in zack_bench_base zack_bench; do
  timeout 50 $T/$b $A --rank-fractions 0.5 > $R/$b-uneven-$i.log 2>&1
  timeout 50 $T/$b $A --rank-fractions 0.5 --even > $R/$b-even-$i.log 2>&1
done; done
for b in zack_bench_base zack_bench; do
  timeout 60 $T/$b $A --rank-fractions 0.75,0.25 > $R/$b-uneven-75-25.log 2>&1
done
timeout 50 $T/pq_bench --backend cuda --contexts 32768 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/pq.log 2>&1
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
nvcc -O3 -arch=sm_90a -std=c++17 -o $T/cp results/decode-h100/zack-balance/copy-patterns/copy_patterns.cu > $R/nvcc.log 2>&1 && echo "copy_patterns.cu compiles"
echo "== tests"; for f in zack-tests zack-storage pq-tests; do grep -E "test result|panicked|FAILED" $R/$f.txt | head -5; done
grep -E "rising|case [35]" $R/zack-tests.txt | head -6
echo "== steps (batch/context=pipelined us)"
for f in $R/zack_bench*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s:%s/%s=%s ", $2+0, $4+0, $5+0, $9+0}')"; done
grep -h "check vs" $R/zack_bench-uneven-1.log
echo "== pq"; grep -E '^\| [18] \|' $R/pq.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}'; echo
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
