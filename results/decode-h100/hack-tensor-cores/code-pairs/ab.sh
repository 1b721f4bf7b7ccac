#!/usr/bin/env bash
# HACK decode A/B: kernel tests of the new build (plain with every case's line, then
# bounds-validated), pipelined steps of base and new alternated 3 times, SDPA fp16, Nsight.
H=.gpu/h; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 200 $T/kernels_gpu --test-threads 1 --nocapture decode_kernel_equals_reference > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,32768 --batches 1,8 --runs 500 --prefill-contexts 64"
for i in 1 2 3; do for bin in hack_bench_base hack_bench; do
  timeout 100 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 500 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,smsp__sass_inst_executed_op_shared_ld.sum --csv"
for bin in hack_bench_base hack_bench; do
  timeout 90 ncu $M -k regex:"decode_kernel" $T/$bin --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 1,8 --runs 2 --prefill-contexts 64 > $R/ncu-$bin.csv 2> $R/ncu-$bin.err
done
timeout 200 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu > $R/validate.txt 2>&1
(cd $R && tar cf "$OUT/all.tar" .)
echo "== tests"; grep -E "^case|test result|panicked" $R/tests.txt | head -14
for i in 1 2 3; do for bin in hack_bench_base hack_bench; do echo "== $bin $i $(grep -E '^\| [18] \|' $R/wall-$bin-$i.log | cut -d'|' -f2,3,7 | tr '\n' ' ')"; grep -i "panick\|error" $R/wall-$bin-$i.log | head -3; done; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -6
for bin in hack_bench_base hack_bench; do echo "== ncu $bin"; python3 examples/bench/ncu_summary.py $R/ncu-$bin.csv --name-width 12 | grep -E "\(128, 64|\(128, 8|kernel \|"; done
echo "== validate"; tail -3 $R/validate.txt
