#!/usr/bin/env bash
# The staged HACK decode kernel: Nsight stall reasons and opcode mix at 32K batch 8, then CubeCL's
# bounds validation (control, then the decode kernel test: its cases that finish in the call).
H=.gpu/s; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/hack_bench.xz $H/kernels_gpu.xz $H/merge_gpu.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
A="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8 --runs 1 --prefill-contexts 64"
timeout 120 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis -k regex:"mma_decode_kernel" --launch-skip 9 -c 1 $T/hack_bench $A > $R/stall.txt 2> $R/stall.err
timeout 100 ncu --clock-control none --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details -k regex:"mma_decode_kernel" --launch-skip 9 -c 1 $T/hack_bench $A > $R/mix.txt 2> $R/mix.err
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
(cd $W && timeout 250 $T/kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_reference > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
(cd $R && tar cf "$OUT/all.tar" .)
grep -E "Stall|Warp Cycles|Issued|Eligible|Active Warps|Registers|Theoretical|Achieved|Block Limit|Shared Memory|Duration|Throughput" $R/stall.txt | head -50; tail -2 $R/stall.err
grep -E "sass__inst_executed_per_opcode" $R/mix.txt | tail -c 2500; echo; tail -2 $R/mix.err
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"; echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "^case|test result|^exit|panicked" $R/validate-decode.log | cut -c1-160
