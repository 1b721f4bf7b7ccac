#!/usr/bin/env bash
# Experiment: is 32K batch 8 off the line of 16K/64K? Splits, heads per cube, staggered round order.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/x1/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; done; chmod +x $T/*
nvidia-smi --query-gpu=name --format=csv,noheader
export KVC_SHARED=$PWD/.gpu/x1/shared
# correctness of the staggered order and 4-head cubes on the decode tests
for env in "KVC_X_PHASE=1" "KVC_X_HEADS=4"; do
  env $env timeout 100 $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/test-${env}.txt 2>&1
  echo "$env tests: $(grep -E 'test result' $R/test-${env}.txt | cut -c1-60) $(grep -c panicked $R/test-${env}.txt) panics"
done
Z="--backend cuda --storage f16 --rank-fractions 0.5 --batches 8 --prefill-contexts 64 --runs 200"
step() { grep -E '^\| 0\.' $1 | awk -F'|' '{printf "%s=%s ", $5+0, $9+0}'; }
timeout 90 $T/zack_bench $Z --contexts 16384,24576,32768,40960,49152,65536 > $R/line.log 2>&1
echo "line: $(step $R/line.log)"
timeout 120 python3 examples/bench/sdpa_anchor.py --contexts 16384,24576,32768,40960,49152,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E '^\| 8 \|' $R/sdpa.log | awk -F'|' '{printf "%s=%s ", $3+0, $6+0}')"
for rep in 1 2; do
for env in "X=0" "KVC_X_PHASE=1" "KVC_X_PHASE=7" "KVC_X_SPLITS=15" "KVC_X_SPLITS=32" "KVC_X_HEADS=4" "KVC_X_HEADS=4 KVC_X_PHASE=1"; do
  env $env timeout 40 $T/zack_bench $Z --contexts 32768 > "$R/v-$env-$rep.log" 2>&1
  echo "$rep $env: $(step "$R/v-$env-$rep.log")"
done; done
echo "line again: $(timeout 90 $T/zack_bench $Z --contexts 16384,32768,65536 | grep -E '^\| 0\.' | awk -F'|' '{printf "%s=%s ", $5+0, $9+0}')"
cd $R && tar czf all.tgz *.txt *.log && rm -f *.log
