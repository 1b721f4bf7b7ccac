#!/usr/bin/env bash
# Issue 8 at a request rate with HEAD 3db8e05's build (the model's norms and RoPE in one launch
# each, the row product's split sum in one kernel): 5 requests of 8192 random tokens arriving at
# 0.15 requests/s, 256 new tokens, 10 Gbit/s, dense f16 and HACK 2-bit, random Llama-3-8B in f16
# on two GPUs (run2.sh: prefill server on GPU 1, decode worker on GPU 0).
nvidia-smi --query-gpu=index,name --format=csv,noheader > $OUT/device.txt
( while true; do nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader >> $OUT/gpu-use.csv; sleep 1; done ) &
BINS=disagg REQUESTS=5 EXTRA="--request-rate 0.15" LIMIT=${LIMIT:-420} bash .gpu/rate/run2.sh
kill %1 2>/dev/null
