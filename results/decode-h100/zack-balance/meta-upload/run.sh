#!/usr/bin/env bash
# Does the per-step metadata upload cost anything? The same build with and without reusing the
# last upload (KVC_EXPERIMENT_CACHE_META), alternated, pipelined steps and host time per step.
H=.gpu/bal; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/zack_bench_meta.xz > $T/zb; chmod +x $T/zb
A="--backend cuda --storage f16 --contexts 4096,32768 --batches 1,8 --runs 400 --prefill-contexts 64 --rank-fractions 0.5"
for i in 1 2 3; do
  timeout 40 $T/zb $A > $R/upload-$i.log 2>&1
  KVC_EXPERIMENT_CACHE_META=1 timeout 40 $T/zb $A > $R/cached-$i.log 2>&1
done
for f in $R/*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s(host %s) ", $4+0, $5+0, $9+0, $8+0}')"; done
