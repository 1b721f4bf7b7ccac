#!/usr/bin/env bash
# Staged HACK decode (asynchronous copies of each warp's block into shared memory, cube lock step):
# every burn-hack-attn kernel test, then pipelined steps of HEAD (register kernel) and the staged
# build alternated twice over 4K-64K and batch 1 and 8, SDPA fp16 in the same call, Nsight at 32K.
H=.gpu/s; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/hack_bench.xz $H/hack_bench_base.xz $H/kernels_gpu.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $R/gpu.txt
timeout 200 $T/kernels_gpu --test-threads 1 --nocapture > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2; do for bin in hack_bench_base hack_bench; do
  timeout 100 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active --csv"
for bin in hack_bench_base hack_bench; do
  timeout 60 ncu $M -k regex:"decode|merge|query" $T/$bin --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 1,8 --runs 2 --prefill-contexts 64 > $R/ncu-$bin.csv 2> $R/ncu-$bin.err
done
(cd $R && tar cf "$OUT/all.tar" .)
cat $R/gpu.txt
echo "== tests"; grep -E "^case|test result|panicked|^test " $R/tests.txt | cut -c1-200 | head -40
for i in 1 2; do for bin in hack_bench_base hack_bench; do echo "== $bin $i"; grep -E '^\| [18] \|' $R/wall-$bin-$i.log | cut -d'|' -f2,3,7,8,9 | tr '\n' ';'; echo; grep -i "^check\|panick\|error" $R/wall-$bin-$i.log | head -3; done; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -8
for bin in hack_bench_base hack_bench; do echo "== ncu $bin"; python3 examples/bench/ncu_summary.py $R/ncu-$bin.csv --name-width 14 | head -12; done
