#!/usr/bin/env bash
# Experiment 5: HACK's and MILLION's tensor-core decode kernels with each stream's blocks/rounds
# dealt out to its warps in turn (KVC_X_INTERLEAVE=1) against contiguous chunks per warp (0).
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/x5/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; done; chmod +x $T/*
nvidia-smi --query-gpu=name --format=csv,noheader
P="--backend cuda --contexts 16384,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for bin in hack_bench pq_bench; do for rep in 1 2; do for x in 0 1; do
  KVC_X_INTERLEAVE=$x timeout 120 $T/$bin $P > $R/$bin-$x-$rep.log 2>&1
  echo "== $bin interleave=$x rep $rep: $(grep -iE 'check|max' $R/$bin-$x-$rep.log | head -2 | cut -c1-150)"
  grep -E '^\| [18] \|' $R/$bin-$x-$rep.log | head -6
  grep -iE "panicked|^Error" $R/$bin-$x-$rep.log | head -2
done; done; done
timeout 100 python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E '^\| [18] \|' $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}')"
cd $R && tar czf all.tgz *.log && rm -f *.log
