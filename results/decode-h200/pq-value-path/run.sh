#!/usr/bin/env bash
# Calls 4-5: the value-path micro-benchmark (vpath.cu) on one H200. The cubins were compiled off
# the GPU machine with the compilers of examples/bench/local_sass.py (NVRTC + ptxas 12.9, sm_90a):
#   for w in 8 12 16; do for s in 0 1; do
#     (echo "#define WARPS $w"; echo "#define SPREAD $s"; cat vpath.cu) > v${s}_w$w.cu
#     local_sass.py compile v${s}_w$w.cu --cuda-dir CUDA_DIR; done; done
#   (12 warps as v0.cubin / v1.cubin). Call 4 ran an earlier bench.py at 12 warps only.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cd .gpu/c4 && python3 bench.py 2>&1 | tee $OUT/vpath.txt
