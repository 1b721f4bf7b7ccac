#!/usr/bin/env bash
# Session 22, call 9: the tensor-core kernel's warps counted beside its queries' shared memory; the
# decode tests (a new case: 16 heads per KV head at Π = 128, 15 warps) under bounds validation.
T=/tmp/kvt; R="$OUT"; mkdir -p $T/v1 $T/v9
for v in v1 v9; do for f in .gpu/$v/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$v/$n; chmod +x $T/$v/$n; done; done
V=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $V/cubecl.toml; cd $V
timeout 60 $T/v1/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1; echo "control reports: $(grep -c VALIDATION $R/control.log)"
timeout 400 $T/v9/hack_kernels_gpu --test-threads 1 --nocapture decode > $R/decode-validate.log 2>&1; echo "decode exit $? reports $(grep -c VALIDATION $R/decode-validate.log)"
grep -E "^case|test result" $R/decode-validate.log | cut -c1-110
