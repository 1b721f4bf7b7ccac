#!/usr/bin/env bash
# Nsight Compute of the ZACK tensor-core decode kernel, base (HEAD 558a015) and query operands in
# registers, uneven and even ranks, 32K batch 8: time, instructions, registers, local loads,
# shared-memory bank conflicts and stall reasons per issued instruction.
H=.gpu/bal; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for n in zack_bench zack_bench_base; do xz -dc $H/$n.xz > $T/$n; chmod +x $T/$n; done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__sass_inst_executed_op_local_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
A="--backend cuda --storage f16 --contexts 32768 --batches 8 --runs 2 --prefill-contexts 64 --rank-fractions 0.5"
for b in zack_bench_base zack_bench; do for e in "" "--even"; do
  name=$b$( [ -n "$e" ] && echo -even || echo -uneven )
  timeout 120 ncu --clock-control none --csv --metrics "$M" -k regex:"mma_decode" -c 12 $T/$b $A $e > $R/$name.csv 2> $R/$name.err
  echo "== $name"; python3 examples/bench/ncu_summary.py $R/$name.csv --name-width 18 | tail -4
done; done
