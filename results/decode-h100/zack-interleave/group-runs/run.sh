#!/usr/bin/env bash
# A narrower group of KV heads lands only its own blocks: ZACK kernel tests (a new two-group TMA
# case), ranks 0.75 and 0.5 against bebb819 (.gpu/l1), SDPA fp16, then the decode tests under
# bounds validation in the time left.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/l1/zack_bench.xz > $T/zack_bench_base; xz -dc .gpu/c6/merge_gpu.xz > $T/merge_gpu
for f in .gpu/l3/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; done; chmod +x $T/*
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 $T/zack_kernels_gpu --test-threads 1 --nocapture > $R/zack_kernels_gpu.txt 2>&1; echo "kernels: $(grep -E 'test result' $R/zack_kernels_gpu.txt | cut -c1-60) $(grep -c panicked $R/zack_kernels_gpu.txt) panics"
grep -E "TMA case|rising" $R/zack_kernels_gpu.txt | cut -c1-120
for v in _base "" _base ""; do
  timeout 60 $T/zack_bench$v --backend cuda --storage f16 --rank-fractions 0.75,0.5 --contexts 32768,65536 --batches 8 --runs 100 --prefill-contexts 64 > $R/b$v.log 2>&1
  echo "bench$v: $(grep -E '^\| 0\.' $R/b$v.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $5+0, $9+0}')"
done
grep -h "check vs" $R/b.log
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 8 --runs 100 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E '^\| 8 \|' $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}')"
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((370 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -E "^case|TMA case" $R/validate-decode.log | tail -3 | cut -c1-100
cd $R && tar czf all.tgz *.txt *.log && rm -f *.log
