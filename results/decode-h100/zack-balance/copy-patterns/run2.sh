#!/usr/bin/env bash
# Copy patterns again with libcu++'s barrier waits (what CubeCL emits), and the CUDA source CubeCL
# generates for the ZACK and HACK decode kernels.
R="$OUT"; T=/tmp/kvt; mkdir -p $T
nvcc -O3 -arch=sm_90a -std=c++17 -o $T/cp .gpu/copy/copy_patterns.cu > $R/nvcc.log 2>&1 || { echo NVCC FAILED; head -30 $R/nvcc.log; }
timeout 150 $T/cp 262144 100 > $R/copy.txt 2>&1
cat $R/copy.txt
for b in zack_bench hack_bench; do xz -dc .gpu/copy/$b.xz > $T/$b; chmod +x $T/$b; done
W=$(mktemp -d); printf '[compilation.logger]\nlevel = "full"\nfile = "%s/kernels.log"\nappend = true\n' "$R" > $W/cubecl.toml
(cd $W && timeout 60 $T/zack_bench --backend cuda --rank-fractions 0.5 --storage f16 --contexts 4096 --batches 1 --runs 3 --prefill-contexts 64 > $R/zack-src-run.log 2>&1)
(cd $W && timeout 60 $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096 --batches 1 --runs 3 --prefill-contexts 64 > $R/hack-src-run.log 2>&1)
ls -la $R; grep -c "" $R/kernels.log; grep -n "wait\|barrier" $R/kernels.log | head -20
