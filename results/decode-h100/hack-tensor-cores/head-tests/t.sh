#!/usr/bin/env bash
# HEAD's HACK kernel tests on CUDA (scalar decode kernel), every case's differences printed,
# under bounds validation.
H=.gpu/t; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 250 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu > $R/validate.txt 2>&1
timeout 200 $T/kernels_gpu --test-threads 1 --nocapture decode_kernel_equals_reference > $R/tests.txt 2>&1
(cd $R && tar cf "$OUT/all.tar" .)
grep -E "^case|test result" $R/tests.txt; cat $R/validate.txt
