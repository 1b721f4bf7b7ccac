#!/usr/bin/env bash
# ZACK decode on rows landed by TMA: kernel tests (ZACK, MILLION's shared warp code), pipelined
# steps alternated with c0a6c8c (the cp.async + wmma kernel), SDPA fp16, bounds validation.
H=.gpu/t1; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz .gpu/c6/merge_gpu.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 120 $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/zack_kernels_gpu.txt 2>&1
echo "zack decode tests: $(grep -E 'test result' $R/zack_kernels_gpu.txt | cut -c1-70) panics $(grep -c panicked $R/zack_kernels_gpu.txt)"
grep -E "panicked|assert|case (5|10|11|12), f16|rising" $R/zack_kernels_gpu.txt | head -12 | cut -c1-220
Z="--backend cuda --storage f16 --rank-fractions 0.5"
A="--contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in _base ""; do timeout 45 $T/zack_bench$v $Z $A > $R/zack$v-$i.log 2>&1; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context=pipelined us)"
for f in $R/zack*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done | tee $R/steps.txt
grep -h "check vs\|error\|panick" $R/zack-1.log | head -4 | cut -c1-200
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
timeout 100 $T/pq_kernels_gpu --test-threads 1 > $R/pq_kernels_gpu.txt 2>&1
echo "pq tests: $(grep -E 'test result' $R/pq_kernels_gpu.txt | cut -c1-70)"
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((570 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_the_reference_on_uneven_heads > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80
cd $R && tar czf all.tgz *.txt *.log && rm -f *.log
