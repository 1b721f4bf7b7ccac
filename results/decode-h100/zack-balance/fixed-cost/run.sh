#!/usr/bin/env bash
# Copy patterns (CUDA C) and the decode steps of the three schemes over contexts (fixed cost per
# step = intercept of step time against context), SDPA fp16 in the same call.
R="$OUT"; T=/tmp/kvt; mkdir -p $T
nvcc -O3 -arch=sm_90a -std=c++17 -o $T/cp .gpu/copy/copy_patterns.cu > $R/nvcc.log 2>&1 || { echo NVCC FAILED; head -30 $R/nvcc.log; }
timeout 150 $T/cp 262144 100 > $R/copy.txt 2>&1
cat $R/copy.txt
for b in zack_bench hack_bench pq_bench; do xz -dc .gpu/copy/$b.xz > $T/$b; chmod +x $T/$b; done
A="--contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
timeout 120 $T/zack_bench --backend cuda --rank-fractions 0.5 --storage f16 $A > $R/zack.log 2>&1
timeout 80 $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 $A > $R/hack.log 2>&1
timeout 80 $T/pq_bench --backend cuda $A > $R/pq.log 2>&1
timeout 60 python3 examples/bench/sdpa_anchor.py $A > $R/sdpa.log 2>&1
for f in zack hack pq; do echo "== $f"; grep -E '^\| [^|]*\| [^|]*\| [18] \||^\| [18] \|' $R/$f.log | head -20 | cut -c1-150; grep -i "panick\|error" $R/$f.log | head -3; done
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
