#!/usr/bin/env bash
R="$OUT"; T=/tmp/kvt; mkdir -p $T
nvcc -O3 -arch=sm_90a -std=c++17 -o $T/cp .gpu/copy/copy_patterns.cu > $R/nvcc.log 2>&1 || { echo NVCC FAILED; grep -i error $R/nvcc.log | head -30; }
timeout 300 $T/cp 262144 50 > $R/copy-delay.txt 2>&1
cat $R/copy-delay.txt
