#!/usr/bin/env bash
# SASS opcode histogram of HEAD's scalar HACK decode kernel (from its logged CUDA source).
H=.gpu/h; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R/src "$OUT"
xz -dc $H/hack_bench_base.xz > $T/hack_bench_base; chmod +x $T/hack_bench_base
(cd $R/src && printf '[compilation.logger]\nlevel = "full"\nfile = "%s/src/kernels.log"\n' $R > cubecl.toml && timeout 60 $T/hack_bench_base --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096 --batches 1 --runs 2 --prefill-contexts 64 > run.log 2>&1)
python3 $H/sass.py $R/src/kernels.log $R/src "decode::kernel::decode_kernel" > $R/sass.txt 2>&1
rm -f $R/src/kernels.log $R/src/*.cubin
(cd $R && tar cf "$OUT/all.tar" sass.txt src/k*.sass)
cut -c1-1200 $R/sass.txt
