#!/usr/bin/env bash
# Dynamic SASS opcode mix of HEAD's scalar HACK decode kernel at 32K batch 8 (Nsight).
H=.gpu/h; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
xz -dc $H/hack_bench_base.xz > $T/hack_bench_base; chmod +x $T/hack_bench_base
timeout 120 ncu --clock-control none --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details -k regex:"decode_kernel" --launch-skip 9 -c 1 $T/hack_bench_base --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8 --runs 1 --prefill-contexts 64 > $R/mix.txt 2> $R/mix.err
cp $R/mix.txt "$OUT/"
grep -E "sass__inst|inst_executed" $R/mix.txt | tail -c 2500; tail -3 $R/mix.err
