#!/usr/bin/env bash
# HACK decode, u8 register-fragment warp products: kernel tests (warps per cube from arg 2),
# then pipelined steps of the scalar base and of the new kernel at several warps per cube
# (the launch bound caps registers: 65536 / units), SDPA fp16, Nsight per warps setting.
H=.gpu/u; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"; WARPS=${1:-"4 16 24 32"}; TW=${2:-16}
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
KVC_MMA_WARPS=$TW timeout 200 $T/kernels_gpu --test-threads 1 --nocapture decode_kernel_equals_reference > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,32768 --batches 1,8 --runs 300 --prefill-contexts 64"
timeout 100 $T/hack_bench_base $C > $R/wall-base-a.log 2>&1
for w in $WARPS; do KVC_MMA_WARPS=$w timeout 100 $T/hack_bench $C > $R/wall-w$w.log 2>&1; done
timeout 100 $T/hack_bench_base $C > $R/wall-base-b.log 2>&1
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 300 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,smsp__inst_executed.avg.per_cycle_active,lts__t_bytes.sum,l1tex__t_bytes.sum --csv"
for w in $WARPS; do
  KVC_MMA_WARPS=$w timeout 90 ncu $M -k regex:"mma_decode_kernel" $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 1,8 --runs 2 --prefill-contexts 64 > $R/ncu-w$w.csv 2> $R/ncu-w$w.err
done
if grep -q "test result: ok" $R/tests.txt; then
  KVC_MMA_WARPS=$TW timeout 200 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu > $R/validate.txt 2>&1
fi
(cd $R && tar cf "$OUT/all.tar" .)
echo "== tests (warps $TW)"; grep -E "^case|test result|panicked|rror" $R/tests.txt | head -20
for f in base-a $(for w in $WARPS; do echo w$w; done) base-b; do echo "== $f $(grep -E '^\| [18] \|' $R/wall-$f.log | cut -d'|' -f2,3,7 | tr '\n' ' ')"; grep -i "panick\|error" $R/wall-$f.log | head -3; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -6
for w in $WARPS; do echo "== ncu w$w"; python3 examples/bench/ncu_summary.py $R/ncu-w$w.csv --name-width 12 | grep -E ", 64, 1\)|, 8, 1\)|kernel \|" | head -4; tail -1 $R/ncu-w$w.err; done
echo "== validate"; tail -3 $R/validate.txt 2>/dev/null
