#!/usr/bin/env bash
# A/B of PQ decode builds given as arguments (pq_bench<suffix>): tests of the last suffix (plain,
# then bounds-validated), pipelined steps alternated 3 times, SDPA anchor, Nsight of each build.
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $Z/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
LAST=${@: -1}
timeout 120 $T/pq_kernels_gpu$LAST --test-threads 1 > $R/pq_tests.txt 2>&1
P="--backend cuda --contexts 4096,32768 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2 3; do for s in "$@"; do
  timeout 100 $T/pq_bench$s $P > $R/wall-pq_bench$s-$i.log 2>&1
done; done
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,launch__grid_size,launch__block_size,smsp__warps_active.avg.per_cycle_active --csv"
for s in "$@"; do
  timeout 60 ncu $M -k regex:"mma_decode|half_table" $T/pq_bench$s --backend cuda --contexts 32768 --batches 1,8 --runs 2 --prefill-contexts 64 > $R/ncu$s.csv 2> $R/ncu$s.err
done
timeout 150 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/pq_kernels_gpu$LAST > $R/validate.txt 2>&1
(cd $R && tar cf "$OUT/all.tar" .)
echo "== pq tests $LAST"; grep -E "test result|panicked|FAILED|failed" $R/pq_tests.txt | head -8
for i in 1 2 3; do for s in "$@"; do echo "== pq_bench$s $i"; grep -E "^\| [18] \|" $R/wall-pq_bench$s-$i.log | cut -c1-80; grep -i "panick\|error" $R/wall-pq_bench$s-$i.log | head -3; done; done
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -6
for s in "$@"; do echo "== ncu $s"; python3 examples/bench/ncu_summary.py $R/ncu$s.csv | grep -E "grid|\(2, 64|\(16, 8|\(128, 64|\(128, 8|\(512"; done
echo "== validate"; tail -4 $R/validate.txt
