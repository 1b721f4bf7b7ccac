#!/usr/bin/env bash
# Issue 8, a first look: `disagg demo` with a random Llama-3-8B-shaped model (f32 weights) on one
# H100 (prefill server and decode worker, two processes, one GPU), two requests of 2048 random
# tokens, 256 new tokens each, the link emulated at 10 Gbit/s; dense against HACK 2-bit.
H=.gpu/e2e; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/disagg.xz > $T/disagg; chmod +x $T/disagg
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -lms 1000 > $R/gpu.csv &
SMI=$!
for kv in dense hack:bits=2,pi=64,round=stochastic; do
  name=${kv%%:*}; start=$(date +%s)
  timeout 270 $T/disagg demo --backend cuda --random-model llama3-8b --prompt-tokens 2048,2048 --max-new-tokens 256 --kv $kv --link-gbps 10 > $R/$name.log 2>&1
  echo "$name exit $? after $(( $(date +%s) - start )) s"; grep -vE "^ +[0-9]+: |^ +at " $R/$name.log | tail -6
done
kill $SMI; sort -t, -k2 -n $R/gpu.csv | tail -1
