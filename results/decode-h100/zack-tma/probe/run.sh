#!/usr/bin/env bash
# TMA probe: nvcc on the device, then one run.
T=/tmp/tma; mkdir -p $T
nvcc -O3 -arch=sm_90a -std=c++17 -o $T/p results/decode-h100/zack-tma/probe/tma_probe.cu -lcuda > $OUT/nvcc.log 2>&1 || { echo NVCC FAILED; cat $OUT/nvcc.log | head -40; exit 1; }
timeout 240 $T/p 262144 50 2>&1 | tee $OUT/tma.txt
