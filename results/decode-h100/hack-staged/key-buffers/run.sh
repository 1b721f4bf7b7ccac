#!/usr/bin/env bash
# Experiment: two key stages per warp (the next block's keys land a whole block ahead, one cube
# synchronization per block instead of two) against HEAD's staged kernel, alternated three times
# at 16K-64K batch 8 and 32K batch 1; the decode test of the variant first.
H=.gpu/x; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 150 $T/kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_reference > $R/tests.txt 2>&1
grep -E "^case|test result|panicked" $R/tests.txt | cut -c1-110
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2 3; do for bin in hack_bench hack_bench_keys2; do
  timeout 45 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
  echo "== $bin $i: $(grep -E '^\| [18] \|' $R/wall-$bin-$i.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"
done; done
