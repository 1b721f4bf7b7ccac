#!/usr/bin/env bash
# A/B of builds of the u8 register-fragment kernel: kernel tests of the newest (hack_bench ->
# kernels_gpu), pipelined steps alternated: scalar base, v2 (previous), new, at 16 warps per cube;
# the new one also at other cube sizes (arg 1); SDPA fp16; Nsight of the new one.
H=.gpu/u; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"; WARPS=${1:-"8 12"}
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
KVC_MMA_WARPS=16 timeout 200 $T/kernels_gpu --test-threads 1 --nocapture decode_kernel_equals_reference > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,32768 --batches 1,8 --runs 300 --prefill-contexts 64"
for i in 1 2; do for bin in hack_bench_base hack_bench_v2 hack_bench; do
  KVC_MMA_WARPS=16 timeout 100 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
for w in $WARPS; do KVC_MMA_WARPS=$w timeout 100 $T/hack_bench $C > $R/wall-w$w.log 2>&1; done
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 300 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,smsp__inst_executed.avg.per_cycle_active,l1tex__t_bytes.sum --csv"
for w in 16 $WARPS; do
  KVC_MMA_WARPS=$w timeout 90 ncu $M -k regex:"mma_decode_kernel" $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 1,8 --runs 2 --prefill-contexts 64 > $R/ncu-w$w.csv 2> $R/ncu-w$w.err
done
(cd $R && tar cf "$OUT/all.tar" .)
echo "== tests"; grep -E "^case|test result|panicked|rror" $R/tests.txt | head -20
for i in 1 2; do for bin in hack_bench_base hack_bench_v2 hack_bench; do echo "== $bin $i $(grep -E '^\| [18] \|' $R/wall-$bin-$i.log | cut -d'|' -f2,3,7 | tr '\n' ' ')"; grep -i "panick\|error" $R/wall-$bin-$i.log | head -3; done; done
for w in $WARPS; do echo "== w$w $(grep -E '^\| [18] \|' $R/wall-w$w.log | cut -d'|' -f2,3,7 | tr '\n' ' ')"; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -6
for w in 16 $WARPS; do echo "== ncu w$w"; python3 examples/bench/ncu_summary.py $R/ncu-w$w.csv --name-width 12 | grep -E ", 64, 1\)|kernel \|" | head -3; tail -1 $R/ncu-w$w.err; done
