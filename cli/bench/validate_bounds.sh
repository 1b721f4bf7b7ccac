#!/usr/bin/env bash
# Runs the kernel tests built for CUDA under CubeCL's bounds validation, on a GPU machine.
#
#   validate_bounds.sh LOG_DIR TEST_BINARY...
#
# Every kernel of the workspace launches unchecked (see `burn_kvcompress::kernels`). With
# `check_mode = "validate"`, CubeCL compiles those launches with bounds checks that print
# `[VALIDATION <kernel>]: Encountered OOB ...` from the device. The script first runs the negative
# control (a merge told to read past its buffers) and requires such a line, then runs each test
# binary's GPU tests (the modules named `*_gpu`) and fails if a test fails or any out-of-bounds
# access is printed. Build the binaries (each crate's integration tests) with
# `cargo test --release -p <crate> --features cuda --test integration --no-run`.
set -uo pipefail
logs=$1
shift
mkdir -p "$logs"
work=$(mktemp -d)
printf '[compilation]\ncheck_mode = "validate"\n' > "$work/cubecl.toml"
cd "$work" || exit 1
status=0
control=merge_gpu::bounds_validation_reports_a_merge_reading_past_its_buffers
index=0
for binary in "$@"; do
    index=$((index + 1))
    name="$index-$(basename "$binary")"
    if "$binary" --list --ignored 2>/dev/null | grep -q "^$control:"; then
        "$binary" --ignored --exact "$control" --nocapture \
            > "$logs/control.log" 2>&1
        if grep -q "VALIDATION" "$logs/control.log"; then
            echo "control: validation reports the planted out-of-bounds read"
        else
            echo "control: FAILED, no out-of-bounds report from the planted read (validation is off?)"
            status=1
        fi
    fi
    "$binary" _gpu:: --test-threads=1 --nocapture > "$logs/$name.log" 2>&1
    result=$?
    # Burn's `select` (burn-cubecl 0.21, `kernel/index/select.rs`) evaluates the index read of
    # every dimension and keeps the selected one, reading past its index buffer where another
    # dimension's coordinate exceeds it (the value is discarded); the tests that compare our
    # kernels with Burn's ops run it. Every other kernel's report counts.
    reports=$(grep "VALIDATION" "$logs/$name.log" | grep -vc "VALIDATION select_kernel_")
    summary=$(grep "^test result" "$logs/$name.log" | tail -1)
    echo "$name: exit $result, $reports out-of-bounds reports; $summary"
    if [[ $result -ne 0 || $reports -ne 0 ]]; then status=1; fi
done
exit $status
