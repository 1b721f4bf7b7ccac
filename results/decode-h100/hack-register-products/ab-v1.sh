#!/usr/bin/env bash
# HACK decode A/B, u8 register-fragment warp products: kernel tests of the new build (every
# case's line; then bounds-validated), pipelined steps of base and new alternated, SDPA fp16,
# Nsight. Arg 1: rounds of the alternation (default 3).
H=.gpu/u; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"; ROUNDS=${1:-3}
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
mkdir -p $R/log; printf '[compilation.logger]\nlevel = "full"\nfile = "%s/log/cubecl.log"\n' $R > cubecl.toml
timeout 200 $T/kernels_gpu --test-threads 1 --nocapture decode_kernel_equals_reference > $R/tests.txt 2>&1
rm -f cubecl.toml
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,32768 --batches 1,8 --runs 500 --prefill-contexts 64"
for i in $(seq $ROUNDS); do for bin in hack_bench_base hack_bench; do
  timeout 100 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 500 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,launch__occupancy_limit_registers --csv"
for bin in hack_bench_base hack_bench; do
  timeout 90 ncu $M -k regex:"decode_kernel" $T/$bin --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 1,8 --runs 2 --prefill-contexts 64 > $R/ncu-$bin.csv 2> $R/ncu-$bin.err
done
if grep -q "test result: ok" $R/tests.txt; then
  timeout 200 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu > $R/validate.txt 2>&1
fi
(cd $R && tar cf "$OUT/all.tar" .)
echo "== tests"; grep -E "^case|test result|panicked|rror" $R/tests.txt | head -20
for i in $(seq $ROUNDS); do for bin in hack_bench_base hack_bench; do echo "== $bin $i $(grep -E '^\| [18] \|' $R/wall-$bin-$i.log | cut -d'|' -f2,3,7 | tr '\n' ' ')"; grep -i "^check\|panick\|error" $R/wall-$bin-$i.log | head -4; done; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -6
for bin in hack_bench_base hack_bench; do echo "== ncu $bin"; python3 examples/bench/ncu_summary.py $R/ncu-$bin.csv --name-width 12 | grep -E "\(128, 64|\(128, 8|kernel \|" | head; tail -2 $R/ncu-$bin.err; done
echo "== validate"; tail -3 $R/validate.txt 2>/dev/null
