#!/usr/bin/env bash
# Is the TMA kernel's round limited by its widest warp? Even against uneven ranks, same bytes.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/t1/zack_bench.xz .gpu/t1/zack_bench_base.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
Z="--backend cuda --storage f16 --contexts 32768,65536 --batches 8 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in "" _base; do for e in "" "--even"; do
  timeout 45 $T/zack_bench$v $Z --rank-fractions 0.5 $e > $R/z$v$e-$i.log 2>&1
done; done; done
for f in $R/z*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done
