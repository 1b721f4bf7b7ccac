#!/usr/bin/env bash
# CubeCL bounds validation of the decode kernel test alone (each case's geometry compiles a
# checked kernel; the full binary does not finish in one call).
H=.gpu/v; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/kernels_gpu.xz $H/merge_gpu.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
(cd $W && timeout 540 $T/kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_reference > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
(cd $R && tar cf "$OUT/all.tar" .)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"; echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "^case|test result|^exit|panicked" $R/validate-decode.log | cut -c1-160
