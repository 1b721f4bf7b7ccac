#!/usr/bin/env bash
# Issue 8: where a decode step's time goes with f16 weights. The row-product kernel's tests built
# for CUDA; `row_bench` (the kernel against Burn's matrix product on Llama-3-8B's weight shapes,
# then decode steps of the 8B shape cut to 4 layers with either product); the PyTorch fp16 anchor
# for the same products (`examples/bench/gemv_anchor.py`), in the same call.
H=.gpu/rowb; T=/tmp/kvt; mkdir -p $T
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
for b in row_product-test row_bench; do xz -dc $H/$b.xz > $T/$b; chmod +x $T/$b; done
$T/row_product-test 2>&1 | grep -E "^test |^test result|panicked"
$T/row_bench --backend cuda --weights f16 --layers 4 --context 2048 2>&1 | tee $OUT/row_bench-f16.md
$T/row_bench --backend cuda --weights f32 --layers 0 2>&1 | tee $OUT/row_bench-f32.md
python3 examples/bench/gemv_anchor.py 2>&1 | tee $OUT/gemv_anchor.md
