#!/usr/bin/env bash
# SASS opcode histogram of the tensor-core kernel (from the logged CUDA source), and Nsight
# instruction counts of the scalar kernel (base build) at 32K batch 8.
H=.gpu/h; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R/src "$OUT"
xz -dc $H/hack_bench_base.xz > $T/hack_bench_base; chmod +x $T/hack_bench_base
python3 $H/sass.py $H/kernels.log $R/src > $R/sass.txt 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_global_ld.sum --csv"
timeout 90 ncu $M -k regex:"decode_kernel" $T/hack_bench_base --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8 --runs 2 --prefill-contexts 64 > $R/ncu-base.csv 2> $R/ncu-base.err
(cd $R && tar cf "$OUT/all.tar" .)
cat $R/sass.txt | cut -c1-1500
python3 examples/bench/ncu_summary.py $R/ncu-base.csv --name-width 12
