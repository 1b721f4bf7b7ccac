#!/usr/bin/env bash
# Session 24, call 6: the HACK decode kernel test of fa7e9bd (64-bit indices) under CubeCL's
# bounds validation, after the merge's planted out-of-bounds read as the control.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/val/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml; cd $W
$T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1
echo "control reports: $(grep -c VALIDATION $R/control.log)"
timeout 300 $T/hack_kernels_gpu decode_kernel_equals_reference --exact --test-threads 1 --nocapture > $R/validate-decode.log 2>&1; echo "exit $?"
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -c "^case" $R/validate-decode.log; grep -E "test result|panicked" $R/validate-decode.log | cut -c1-120
