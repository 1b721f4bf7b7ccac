#!/usr/bin/env bash
# After the review (the tensor-core path now also requires asynchronous copies): the decode kernel
# test and HEAD against this build at 16K-64K batch 8, to confirm CUDA still takes the staged kernel.
H=.gpu/w; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 150 $T/kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_reference > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 16384,32768,65536 --batches 8 --runs 200 --prefill-contexts 64"
for bin in hack_bench_base hack_bench; do timeout 60 $T/$bin $C > $R/wall-$bin.log 2>&1; done
grep -E "^case|test result|panicked" $R/tests.txt | cut -c1-110
for bin in hack_bench_base hack_bench; do echo "== $bin"; grep -E '^\| [18] \|' $R/wall-$bin.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}'; echo; done
