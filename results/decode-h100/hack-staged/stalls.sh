#!/usr/bin/env bash
# The staged HACK decode kernel as committed: every burn-hack-attn kernel test, pipelined steps of
# HEAD (register kernel) and this build alternated twice, SDPA fp16 in the same call, and Nsight's
# stall reasons per issued instruction at 32K batch 8.
H=.gpu/t; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/hack_bench.xz $H/hack_bench_base.xz $H/kernels_gpu.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 150 $T/kernels_gpu --test-threads 1 --nocapture > $R/tests.txt 2>&1
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2; do for bin in hack_bench_base hack_bench; do
  timeout 100 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
A="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8 --runs 1 --prefill-contexts 64"
timeout 100 ncu --clock-control none --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,gpu__time_duration.sum,smsp__inst_executed.sum" -k regex:"mma_decode_kernel" --launch-skip 9 -c 1 $T/hack_bench $A > $R/stalls.txt 2> $R/stalls.err
(cd $R && tar cf "$OUT/all.tar" .)
echo "== tests"; grep -E "^case|test result|panicked|^test " $R/tests.txt | cut -c1-150 | head -40
for i in 1 2; do for bin in hack_bench_base hack_bench; do echo "== $bin $i"; grep -E '^\| [18] \|' $R/wall-$bin-$i.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}'; echo; grep -i "panick\|error" $R/wall-$bin-$i.log | head -3; done; done
echo "== sdpa"; grep -E "copy bandwidth" $R/sdpa.log; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
echo "== stalls"; grep -E "stalled|duration|inst_executed" $R/stalls.txt | awk '{print $1, $NF}' | sort -k2 -g -r | head -30; tail -2 $R/stalls.err
