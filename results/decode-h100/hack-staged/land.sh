#!/usr/bin/env bash
# The staged HACK decode kernel as committed: every burn-hack-attn kernel test, pipelined steps of
# HEAD (register kernel) and this build alternated twice, SDPA fp16 in the same call, then the
# decode kernel test under CubeCL's bounds validation (as far as it gets in the call). Outputs are
# written straight to $OUT.
H=.gpu/u; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 200 $T/kernels_gpu --test-threads 1 --nocapture > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2; do for bin in hack_bench_base hack_bench; do
  timeout 50 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== tests"; grep -E "^case|test result|panicked|^test " $R/tests.txt | cut -c1-120 | head -40
for i in 1 2; do for bin in hack_bench_base hack_bench; do echo "== $bin $i"; grep -E '^\| [18] \|' $R/wall-$bin-$i.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}'; echo; grep -i "panick\|error" $R/wall-$bin-$i.log | head -3; done; done
echo "== sdpa"; grep -E "copy bandwidth" $R/sdpa.log; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((560 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_reference > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "^case|test result|^exit|panicked" $R/validate-decode.log | cut -c1-60
