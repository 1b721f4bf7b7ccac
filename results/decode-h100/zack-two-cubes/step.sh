#!/usr/bin/env bash
# Why the pipelined step moved less than the kernel: alternate runs of both builds at 32K, and
# kernel times in the pipelined loop itself (nsys where present, else ncu without cache flushes).
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in zack_bench zack_bench_base; do xz -dc $Z/$f.xz > $T/$f; chmod +x $T/$f; done
export KVC_SHARED=$PWD/$Z/shared
A="--backend cuda --rank-fractions 0.5 --storage f16 --contexts 32768 --batches 8,1 --prefill-contexts 64"
for i in 1 2 3; do for bin in zack_bench_base zack_bench; do
  echo "$bin $i $(timeout 100 $T/$bin $A --runs 200 | grep -E '^\| 0\.' | cut -d'|' -f4,9 | tr '\n' ' ')"
done; done
which nsys && for bin in zack_bench_base zack_bench; do
  timeout 120 nsys profile -o $R/$bin --force-overwrite true $T/$bin $A --runs 200 > /dev/null 2>&1
  nsys stats -r cuda_gpu_kern_sum $R/$bin.nsys-rep 2>/dev/null | grep -E "decode|merge|rotate|Time" | cut -c1-160
done
for bin in zack_bench_base zack_bench; do
  timeout 100 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv -k regex:"mma_decode" $T/$bin $A --runs 5 2>/dev/null | grep -o '"(.*' | awk -F'","' '{print $1, $NF}' | sort | uniq -c | sort -k2 | head -20 | sed "s/^/$bin /"
done
