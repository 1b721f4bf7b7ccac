#!/usr/bin/env bash
# One device call: PQ tensor-core decode kernel. Tests (plain, then bounds-validated with ZACK's
# and the merge's), PQ decode before (base = HEAD) / after alternated, ZACK before/after the shared
# warp helpers, SDPA anchor, Nsight kernel times. Outputs tarred into $OUT/all.tar.
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $Z/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/smi.txt 2>&1
timeout 120 $T/pq_kernels_gpu --test-threads 1 > $R/pq_tests.txt 2>&1
P="--backend cuda --contexts 4096,32768 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2 3; do for bin in pq_bench_base pq_bench; do
  timeout 100 $T/$bin $P > $R/wall-$bin-$i.log 2>&1
done; done
A="--backend cuda --rank-fractions 0.5 --storage f16 --contexts 32768 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2; do for bin in zack_bench_base zack_bench; do
  timeout 100 $T/$bin $A > $R/wall-$bin-$i.log 2>&1
done; done
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size --csv"
for bin in pq_bench_base pq_bench; do
  timeout 90 ncu $M -k regex:"decode|merge|table|books" $T/$bin --backend cuda --contexts 32768 --batches 1,8 --runs 3 --prefill-contexts 64 > $R/ncu-$bin.csv 2> $R/ncu-$bin.err
done
timeout 200 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/pq_kernels_gpu $T/kernels_gpu > $R/validate.txt 2>&1
(cd $R && tar cf "$OUT/all.tar" .)
echo "== pq tests"; grep -E "test result|panicked|FAILED|failed" $R/pq_tests.txt | head -8
for i in 1 2 3; do for bin in pq_bench_base pq_bench; do echo "== $bin $i"; grep -E "^check|^\| [18] \|" $R/wall-$bin-$i.log | cut -c1-120 | head -8; grep -i "panick\|error" $R/wall-$bin-$i.log | head -3; done; done
for i in 1 2; do for bin in zack_bench_base zack_bench; do echo "== $bin $i"; grep -E "^\| 0\.5|^\| [18] \|" $R/wall-$bin-$i.log | cut -c1-120 | head -4; done; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -6
for bin in pq_bench_base pq_bench; do echo "== ncu $bin"; python3 examples/bench/ncu_summary.py $R/ncu-$bin.csv 2>/dev/null || grep -c "" $R/ncu-$bin.csv; done
echo "== validate"; cat $R/validate.txt | tail -8
