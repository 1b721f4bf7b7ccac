#!/usr/bin/env bash
# Experiment 6: ranks 1.0, 0.75, 0.5 with the TMA kernel at any heads per cube (bebb819), the
# wmma kernel only (KVC_X_NO_TMA), the TMA kernel only where one cube holds every KV head.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/x6/zack_bench.xz > $T/zack_bench; chmod +x $T/*
nvidia-smi --query-gpu=name --format=csv,noheader
for env in X=0 KVC_X_NO_TMA=1 KVC_X_TMA_ALL_HEADS=1; do
  env $env KVC_X_SHOW=1 timeout 150 $T/zack_bench --backend cuda --storage f16 --rank-fractions 1.0,0.75,0.5 --contexts 4096,16384,32768,65536 --batches 8,1 --runs 100 --prefill-contexts 64 > $R/$env.log 2>&1
  echo "== $env"; grep -E '^\| [01]\.' $R/$env.log | awk -F'|' '{printf "%s b%s %s=%s\n", $2+0, $4+0, $5+0, $9+0}' | grep -v "=0$" | paste -sd' ' | fold -w 200
  grep "kernel tma" $R/$env.log | sort | uniq -c | head -8
done
cd $R && tar czf all.tgz *.log && rm -f *.log
