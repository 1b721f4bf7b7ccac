#!/usr/bin/env bash
# Call 3: which of the two instruction changes pays, at 12 warps: KVC_PQ_OLDSTORE (HEAD's tile
# store indices), KVC_PQ_PLUSZERO (HEAD's +0 initial sums). Nsight counts, then alternated steps.
H=.gpu/m3; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
CUBECL_DEBUG_LOG=$R/cubecl.log timeout 60 $T/pq_bench --backend cuda --contexts 4096 --batches 1 --runs 1 --prefill-contexts 64 > /dev/null 2>&1
grep -n "mma_decode" $R/cubecl.log | head -2; grep -E "= -0|\(-0|-0\.0" $R/cubecl.log | sort | uniq -c | head -8; rm -f $R/cubecl.log
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size"
run() { env $1 timeout 100 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -c 8 $T/pq_bench $B > $R/ncu.txt 2>/dev/null
  echo "ncu $1: $(grep -E "duration|inst_executed|registers" $R/ncu.txt | tail -3 | awk '{printf "%s=%s ", $1, $NF}')"; }
run X=1; run KVC_PQ_OLDSTORE=1; run KVC_PQ_PLUSZERO=1; run "KVC_PQ_OLDSTORE=1 KVC_PQ_PLUSZERO=1"
A="--backend cuda --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in X=1 KVC_PQ_OLDSTORE=1 "KVC_PQ_OLDSTORE=1 KVC_PQ_PLUSZERO=1"; do
  echo "$v $i: $(env $v timeout 60 $T/pq_bench $A 2>&1 | grep -E '^\| [18] \|' | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 32768 --batches 8 --runs 200 --prefill-contexts 64 2>&1 | grep -E "^\| [18] \|" | awk -F'|' '{printf "sdpa %s/%s=%s\n", $2+0, $3+0, $6+0}'
