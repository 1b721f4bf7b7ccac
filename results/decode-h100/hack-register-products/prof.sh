#!/usr/bin/env bash
# Nsight of the u8 register-fragment kernel at 32K batch 8 (warps per cube from arg 1): dynamic
# opcode mix, warp stall reasons, source-level counters.
H=.gpu/u; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"; W=${1:-16}
xz -dc $H/hack_bench.xz > $T/hack_bench; chmod +x $T/hack_bench
A="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8 --runs 1 --prefill-contexts 64"
KVC_MMA_WARPS=$W timeout 150 ncu --clock-control none --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details -k regex:"mma_decode_kernel" --launch-skip 9 -c 1 $T/hack_bench $A > $R/mix.txt 2> $R/mix.err
KVC_MMA_WARPS=$W timeout 150 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats -k regex:"mma_decode_kernel" --launch-skip 9 -c 1 $T/hack_bench $A > $R/stall.txt 2> $R/stall.err
cp $R/*.txt "$OUT/"
grep -E "sass__inst_executed_per_opcode" $R/mix.txt | tail -c 3000; echo; tail -2 $R/mix.err
grep -E "Stall|Warp Cycles|Issued|Eligible|Active Warps|Registers|Theoretical|Achieved|Block Limit|Shared Memory" $R/stall.txt | head -40; tail -2 $R/stall.err
