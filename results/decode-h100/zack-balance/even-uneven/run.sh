#!/usr/bin/env bash
# Uneven ranks [32..96] against even ranks (all 64, the same bytes), alternated, pipelined steps.
R="$OUT"; T=/tmp/kvt; mkdir -p $T
xz -dc .gpu/copy/zack_bench.xz > $T/zack_bench; chmod +x $T/zack_bench
A="--backend cuda --storage f16 --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do
  timeout 100 $T/zack_bench $A --rank-fractions 0.5 > $R/uneven-$i.log 2>&1
  timeout 100 $T/zack_bench $A --rank-fractions 0.5 --even > $R/even-$i.log 2>&1
done
timeout 100 $T/zack_bench $A --rank-fractions 0.75,0.25 --even > $R/even-75-25.log 2>&1
for f in $R/*.log; do echo "== $(basename $f)"; grep -E '^\| 0\.' $f | awk -F'|' '{print $3, $4, $5, $9}'; done
