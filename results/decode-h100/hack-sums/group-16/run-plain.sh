#!/usr/bin/env bash
# Session 22, call 10: the decode tests without validation (did case 12, 16 heads at Π = 128, hang or run slowly?).
T=/tmp/kvt; R="$OUT"; mkdir -p $T/v9
xz -dc .gpu/v9/hack_kernels_gpu.xz > $T/v9/k; chmod +x $T/v9/k
timeout 200 $T/v9/k --test-threads 1 --nocapture decode_kernel_equals_reference > $R/decode.log 2>&1; echo "decode exit $?"
grep -E "^case 1[0-3]|test result" $R/decode.log | cut -c1-150; tail -c 600 $R/decode.log
