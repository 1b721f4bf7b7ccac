#!/usr/bin/env bash
# Which part costs: base (HEAD), values one round late with the dealt plan, and the same build
# with every head's blocks on its own warp (KVC_EXPERIMENT_OWN_BLOCKS), alternated.
H=.gpu/bal; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for n in zack_bench_base zack_bench_dealt; do xz -dc $H/$n.xz > $T/$n; chmod +x $T/$n; done
A="--backend cuda --storage f16 --contexts 32768,65536 --batches 8 --runs 200 --prefill-contexts 64"
for i in 1 2; do
  for f in 0.5 0.75; do
    timeout 40 $T/zack_bench_base $A --rank-fractions $f > $R/base-$f-$i.log 2>&1
    timeout 40 $T/zack_bench_dealt $A --rank-fractions $f > $R/dealt-$f-$i.log 2>&1
    KVC_EXPERIMENT_OWN_BLOCKS=1 timeout 40 $T/zack_bench_dealt $A --rank-fractions $f > $R/own-$f-$i.log 2>&1
  done
done
for f in $R/*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done
