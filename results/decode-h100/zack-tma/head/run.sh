#!/usr/bin/env bash
# HEAD (785a851): the ZACK kernel tests and the decode tests under bounds validation.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/t9/zack_kernels_gpu.xz > $T/zack_kernels_gpu; xz -dc .gpu/c6/merge_gpu.xz > $T/merge_gpu; chmod +x $T/*
timeout 200 $T/zack_kernels_gpu --test-threads 1 --nocapture > $R/zack_kernels_gpu.txt 2>&1; echo "kernels: $(grep -E 'test result' $R/zack_kernels_gpu.txt | cut -c1-60) $(grep -c panicked $R/zack_kernels_gpu.txt) panics"
grep -E "TMA case|rising" $R/zack_kernels_gpu.txt | cut -c1-120
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
(cd $W && timeout 300 $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -cE "^case|TMA case|rising" $R/validate-decode.log
