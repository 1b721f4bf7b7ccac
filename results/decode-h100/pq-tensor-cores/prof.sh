#!/usr/bin/env bash
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $Z/pq_bench.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 300 ncu --set full -k regex:mma_decode --launch-skip 12 --launch-count 1 $T/pq_bench --backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64 > $R/full.txt 2> $R/full.err
(cd $R && tar cf "$OUT/all.tar" .)
grep -E "Duration|Registers|Theoretical Occ|Achieved Occ|Bank|Stall|stall|Issue Slot|Executed Ipc|L1/TEX Hit|Shared|Warp Cycles|No Eligible|Active Warps|Eligible Warps|Local" $R/full.txt | head -60
tail -5 $R/full.err
