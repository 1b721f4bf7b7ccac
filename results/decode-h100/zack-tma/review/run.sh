#!/usr/bin/env bash
# Review build (one round loop, shared split slots): tests of both tensor-core kernels, the decode
# tests under bounds validation, steps alternated with a4bfcf5, SDPA fp16.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/t6/zack_bench.xz > $T/zack_bench_tma; xz -dc .gpu/c6/merge_gpu.xz > $T/merge_gpu
for f in .gpu/t8/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; done; chmod +x $T/*
export KVC_SHARED=$PWD/.gpu/t8/shared
nvidia-smi --query-gpu=name --format=csv,noheader
for t in zack_kernels_gpu zack_storage_gpu; do
  timeout 200 $T/$t --test-threads 1 --nocapture > $R/$t.txt 2>&1; echo "$t: $(grep -E 'test result' $R/$t.txt | cut -c1-60) $(grep -c panicked $R/$t.txt) panics"
done
grep -E "case (5|10|11|12|15), f16|TMA case|rising" $R/zack_kernels_gpu.txt | cut -c1-120
Z="--backend cuda --storage f16 --rank-fractions 0.5"
A="--contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in _tma ""; do timeout 60 $T/zack_bench$v $Z $A > $R/zack$v-$i.log 2>&1; done; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context=pipelined us)"
for f in $R/zack*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done | tee $R/steps.txt
grep -h "check vs" $R/zack-1.log | head -2
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((575 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -cE "^case|TMA case|rising" $R/validate-decode.log
cd $R && tar czf all.tgz *.txt *.log && rm -f *.log
