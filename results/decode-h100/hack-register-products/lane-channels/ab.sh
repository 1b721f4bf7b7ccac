#!/usr/bin/env bash
# Value metadata in 16-byte loads (a lane's output channels made contiguous) against the
# committed register-product kernel (d3d80de): kernel tests, pipelined steps alternated three
# times, SDPA fp16 in the same call, Nsight kernel time and instructions at 32K.
H=.gpu/w; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/hack_bench.xz $H/hack_bench_base.xz $H/kernels_gpu.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 240 $T/kernels_gpu --test-threads 1 --nocapture > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2 3; do for bin in hack_bench_base hack_bench; do
  timeout 120 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
python3 examples/bench/sdpa_anchor.py --contexts 16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed --csv"
for bin in hack_bench_base hack_bench; do
  timeout 90 ncu $M -k regex:"mma_decode" $T/$bin --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8 --runs 2 --prefill-contexts 64 > $R/ncu-$bin.csv 2> $R/ncu-$bin.err
done
(cd $R && tar cf "$OUT/all.tar" .)
echo "== tests"; grep -E "^case|test result|panicked" $R/tests.txt | cut -c1-150 | head -20
for i in 1 2 3; do for bin in hack_bench_base hack_bench; do echo "== $bin $i"; grep -E '^\| [18] \|' $R/wall-$bin-$i.log | cut -d'|' -f2,3,7 | tr '\n' ';'; echo; grep -i "panick\|error" $R/wall-$bin-$i.log | head -3; done; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | cut -d'|' -f2,3,6
for bin in hack_bench_base hack_bench; do echo "== ncu $bin"; python3 examples/bench/ncu_summary.py $R/ncu-$bin.csv --name-width 14 | grep -E "kernel \||, 64, 1\)"; done
