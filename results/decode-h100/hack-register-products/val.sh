#!/usr/bin/env bash
# Bounds validation of the u8 register-fragment build's kernel tests (all of kernels_gpu).
H=.gpu/u; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/kernels_gpu.xz $H/merge_gpu.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 560 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu > $R/validate.txt 2>&1
(cd $R && tar cf "$OUT/all.tar" .)
cat $R/validate.txt; grep -E "^test |^case" $R/validate/kernels_gpu.log | grep -v "atom" | cut -c1-200 | head -30
