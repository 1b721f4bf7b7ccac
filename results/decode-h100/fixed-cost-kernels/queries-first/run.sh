#!/usr/bin/env bash
# The ZACK decode kernel's own time against context (Nsight), HEAD and a build that loads the
# reduced queries while the first round's rows land; alternated pipelined steps; HACK's kernels
# against context.
H=.gpu/fix; # binaries (not in git): HEAD cd31318, and zack_bench_pro with only the queries-first change
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
M="gpu__time_duration.sum,dram__bytes_read.sum"
C="--contexts 4096,16384,32768,65536 --batches 8,1 --runs 2 --prefill-contexts 64"
for b in zack_bench zack_bench_pro; do
  timeout 150 ncu --clock-control none --csv --metrics "$M" -k regex:"mma_decode|rotate|merge" -c 90 $T/$b --backend cuda --rank-fractions 0.5 --storage f16 $C > $R/ncu-$b.csv 2> $R/ncu-$b.err
  echo "== $b"; python3 examples/bench/ncu_summary.py $R/ncu-$b.csv --name-width 22 | grep -v "(18, 2\|(3, 2\|(3, 80" | cut -c1-200
done
timeout 150 ncu --clock-control none --csv --metrics "$M" -k regex:"mma_decode|query|merge" -c 90 $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 $C > $R/ncu-hack.csv 2> $R/ncu-hack.err
echo "== hack"; python3 examples/bench/ncu_summary.py $R/ncu-hack.csv --name-width 22 | cut -c1-200
A="--backend cuda --storage f16 --contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64 --rank-fractions 0.5"
for i in 1 2; do for b in zack_bench zack_bench_pro; do timeout 60 $T/$b $A > $R/$b-$i.log 2>&1; done; done
echo "== steps (fraction:batch/context=pipelined us)"
for f in $R/zack_bench*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done
grep -h "check vs" $R/zack_bench_pro-1.log | head -4
