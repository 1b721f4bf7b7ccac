#!/usr/bin/env bash
# Experiment 3: phase per cube (id, hashed) and the pipelined cost of the rotation and merge
# kernels (skipped at 16K and longer, after the bench's check: wrong results, timing only).
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/x3/zack_bench.xz > $T/zack_bench; chmod +x $T/*
nvidia-smi --query-gpu=name --format=csv,noheader
Z="--backend cuda --storage f16 --rank-fractions 0.5 --batches 8 --prefill-contexts 64 --runs 200"
step() { grep -E '^\| 0\.' $1 | awk -F'|' '{printf "%s=%s ", $5+0, $9+0}'; }
i=0
for rep in 1 2 3; do
for env in X=0 KVC_X_PHASE=1 KVC_X_PHASE=65535 KVC_X_SKIP=rot KVC_X_SKIP=merge KVC_X_SKIP=rot,merge; do
  i=$((i+1)); P=""; case $env in *SKIP*) P="KVC_X_PHASE=1";; esac
  env $env $P timeout 40 $T/zack_bench $Z --contexts 32768 > $R/v$i.log 2>&1
  echo "$rep $env $P: $(step $R/v$i.log)"
done; done
for rep in 1 2; do for env in X=0 KVC_X_PHASE=1 KVC_X_PHASE=65535; do
  env $env timeout 90 $T/zack_bench $Z --contexts 4096,24576,40960,49152,65536 > $R/line-$env-$rep.log 2>&1
  echo "line $env: $(step $R/line-$env-$rep.log)"
done; done
timeout 120 python3 examples/bench/sdpa_anchor.py --contexts 4096,24576,32768,40960,49152,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E '^\| 8 \|' $R/sdpa.log | awk -F'|' '{printf "%s=%s ", $3+0, $6+0}')"
cd $R && tar czf all.tgz *.log && rm -f *.log
