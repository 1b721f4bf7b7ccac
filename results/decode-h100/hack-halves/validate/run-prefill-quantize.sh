#!/usr/bin/env bash
# Session 23, call 7: HEAD's HACK prefill and quantize kernel tests under CubeCL's bounds
# validation (call 6 ran out of time after the decode tests), with the negative control.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/h6/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
V=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $V/cubecl.toml; cd $V
timeout 60 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1; echo "control reports: $(grep -c VALIDATION $R/control.log)"
timeout 100 $T/hack_kernels_gpu --test-threads 1 --nocapture quantize > $R/quantize-validate.log 2>&1; echo "quantize exit $? reports $(grep -c VALIDATION $R/quantize-validate.log)"
timeout 400 $T/hack_kernels_gpu --test-threads 1 --nocapture prefill_kernel_equals > $R/prefill-validate.log 2>&1; echo "prefill exit $? reports $(grep -c VALIDATION $R/prefill-validate.log)"
grep -hE "^test |test result" $R/quantize-validate.log $R/prefill-validate.log | cut -c1-200
