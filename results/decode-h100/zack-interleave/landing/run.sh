#!/usr/bin/env bash
# Interleaved splits (the TMA kernel's rounds dealt out in turn): the issue's grid and the 24K-48K
# line against HEAD's kernel (x4's binary without its knobs = 1f885c3), SDPA fp16 in the same
# call; then the ZACK kernel and storage tests, the decode tests under bounds validation.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/x4/zack_bench.xz > $T/zack_bench_base; xz -dc .gpu/c6/merge_gpu.xz > $T/merge_gpu
for f in .gpu/l1/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; done; chmod +x $T/*
export KVC_SHARED=$PWD/.gpu/l1/shared
nvidia-smi --query-gpu=name --format=csv,noheader
Z="--backend cuda --storage f16 --rank-fractions 0.5 --prefill-contexts 64"
step() { grep -E '^\| 0\.' $1 | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}'; }
for i in 1 2; do for v in _base ""; do
  timeout 60 $T/zack_bench$v $Z --contexts 4096,16384,32768,65536 --batches 8,1 --runs 200 > $R/grid$v-$i.log 2>&1
  echo "grid$v-$i: $(step $R/grid$v-$i.log)"
done; done
for v in _base ""; do
  timeout 60 $T/zack_bench$v $Z --contexts 24576,32768,40960,49152 --batches 8 --runs 200 > $R/line$v.log 2>&1
  echo "line$v: $(step $R/line$v.log)"
done
grep -h "check vs" $R/grid-1.log | head -1
timeout 100 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,24576,32768,40960,49152,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E '^\| [18] \|' $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}')"
for t in zack_kernels_gpu zack_storage_gpu; do
  timeout 200 $T/$t --test-threads 1 --nocapture > $R/$t.txt 2>&1; echo "$t: $(grep -E 'test result' $R/$t.txt | cut -c1-60) $(grep -c panicked $R/$t.txt) panics"
done
grep -E "TMA case|rising" $R/zack_kernels_gpu.txt | cut -c1-120
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((585 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -cE "^case|TMA case|rising" $R/validate-decode.log
cd $R && tar czf all.tgz *.txt *.log && rm -f *.log
