#!/usr/bin/env bash
# Per-kernel Nsight times of one decode step's kernels (rotation / query quantization, decode,
# merge) for ZACK, HACK, MILLION at 32K batch 1 and 8, with occupancy and stall reasons, next to
# the pipelined step times of the same binaries.
H=.gpu/fix; # binaries (not in git): HEAD cd31318
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
M="gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_(long_scoreboard|barrier|wait|short_scoreboard|math_pipe_throttle|no_instruction|lg_throttle|mio_throttle)_per_issue_active.ratio"
A="--contexts 32768 --batches 8,1 --prefill-contexts 64"
run() { name=$1; shift; b=$1; shift
  timeout 150 ncu --clock-control none --csv --metrics "$M" -k regex:"rotate|mma_decode|merge|query|table|lut|encode_q|quantize_q" -c 24 $T/$b "$@" --runs 3 $A > $R/$name.csv 2> $R/$name.err
  echo "== $name"; python3 examples/bench/ncu_summary.py $R/$name.csv --name-width 22 | cut -c1-400
}
run zack zack_bench --backend cuda --rank-fractions 0.5 --storage f16
run hack hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0
run pq pq_bench --backend cuda
B="--contexts 4096,32768 --batches 1,8 --runs 200 --prefill-contexts 64"
timeout 60 $T/zack_bench --backend cuda --rank-fractions 0.5 --storage f16 $B > $R/zack-steps.log 2>&1
timeout 60 $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 $B > $R/hack-steps.log 2>&1
timeout 60 $T/pq_bench --backend cuda $B > $R/pq-steps.log 2>&1
echo "== steps"; grep -hE '^\| [^|]*\| [^|]*\| [18] \||^\| [18] \|' $R/*-steps.log | cut -c1-120
