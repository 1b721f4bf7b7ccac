#!/usr/bin/env bash
# PQ decode (tensor-core kernel, HEAD = pq_bench_d) over the grid beside SDPA fp16, twice;
# the f32 kernel (pq_bench_base, a1aa8b4) once in the same call.
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in pq_bench_d pq_bench_base; do xz -dc $Z/$f.xz > $T/$f; chmod +x $T/$f; done
G="--contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2; do
  timeout 150 $T/pq_bench_d --backend cuda $G > $R/pq-$i.log 2>&1
  python3 examples/bench/sdpa_anchor.py $G > $R/sdpa-$i.log 2>&1
done
timeout 150 $T/pq_bench_base --backend cuda $G > $R/pq-base.log 2>&1
(cd $R && tar cf "$OUT/all.tar" .)
for f in pq-1 sdpa-1 pq-2 sdpa-2 pq-base; do echo "== $f"; grep -E "^\| [18] \|" $R/$f.log | cut -c1-90; done
grep -h "bandwidth" $R/sdpa-1.log
