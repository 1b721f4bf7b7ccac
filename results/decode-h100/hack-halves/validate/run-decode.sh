#!/usr/bin/env bash
# Session 23, call 6: HEAD's HACK kernel tests (6729d0d's kernels, the 16-head decode case) under
# CubeCL's bounds validation, with the negative control.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/h6/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
V=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $V/cubecl.toml; cd $V
timeout 60 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1; echo "control reports: $(grep -c VALIDATION $R/control.log)"
timeout 480 $T/hack_kernels_gpu --test-threads 1 --nocapture > $R/hack-validate.log 2>&1; echo "hack tests exit $? reports $(grep -c VALIDATION $R/hack-validate.log)"
grep -E "^case|^test |test result" $R/hack-validate.log | cut -c1-240
