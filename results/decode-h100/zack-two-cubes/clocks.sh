#!/usr/bin/env bash
# Pipelined steps of both builds (32K and 64K, batch 8, 2000 steps) with the SM clock and power
# sampled every 10 ms during each run.
Z=.gpu/z; T=/tmp/kvt; mkdir -p $T "$OUT"
for f in zack_bench zack_bench_base; do xz -dc $Z/$f.xz > $T/$f; chmod +x $T/$f; done
export KVC_SHARED=$PWD/$Z/shared
for ctx in 65536; do for i in 1 2; do for bin in zack_bench_base zack_bench; do
  nvidia-smi --query-gpu=clocks.sm,power.draw,clocks.mem --format=csv,noheader,nounits -lms 10 > /tmp/smi-$bin.txt &
  S=$!
  r=$(timeout 100 $T/$bin --backend cuda --rank-fractions 0.5 --storage f16 --contexts $ctx --batches 8 --prefill-contexts 64 --runs 4000 | grep -E '^\| 0\.' | cut -d'|' -f5,9)
  kill $S
  echo "$bin ctx $ctx run $i: $r | sm MHz, W under load: $(python3 -c "
import sys,statistics as st
r=[l.split(', ') for l in open('/tmp/smi-$bin.txt') if l.count(',')==2]
r=[(float(a),float(b)) for a,b,c in r if float(b)>150]
print(st.median(x for x,_ in r) if r else '-', st.median(y for _,y in r) if r else '-', len(r), min((x for x,_ in r), default='-'))")"
done; done; done
