#!/usr/bin/env bash
# Issue 8: `disagg sweep` with a random Llama-3-8B-shaped model (f32 weights) on a host of two
# GPUs (H200s in the calls that ran): the prefill server on GPU 1, the decode worker on GPU 0; prompts of 2048 and 8192
# random tokens, 256 new tokens each, links emulated at 10, 25 and 100 Gbit/s; dense f16 storage
# (the baseline) and HACK 2-bit. One warm-up round per scheme.
H=.gpu/e2e; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/disagg.xz > $T/disagg; chmod +x $T/disagg
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
nvidia-smi --query-gpu=timestamp,index,memory.used,utilization.gpu --format=csv -lms 1000 > $R/gpu.csv &
SMI=$!
start=$(date +%s)
timeout ${LIMIT:-560} $T/disagg sweep --backend cuda --random-model llama3-8b --server-gpu 1 \
  --prompt-tokens 2048,8192 --max-new-tokens 256 --warmup 1 --data-streams 4 \
  --kv dense:storage=f16 --kv hack:bits=2,pi=64 --link-gbps ${LINKS:-10,25,100} \
  --out $R/sweep > $R/sweep.log 2> $R/sweep.err
echo "sweep exit $? after $(( $(date +%s) - start )) s"
kill $SMI
grep -E "loaded in|up after|^\[" $R/sweep.err | grep -v "tokens in" | head -12; grep "tokens in" $R/sweep.err | cut -c1-150
grep -vE "^ +[0-9]+: |^ +at " $R/sweep.err | grep -vE "^\[" | tail -5
grep -E "^scheme|^ +[01] " $R/sweep.log
cat $R/sweep/e2e.md 2>/dev/null
for i in 0 1; do awk -F', ' -v g=$i '$2==g {m=($3+0>m)?$3+0:m; u+=$4+0; n++} END {print "gpu", g, "peak MiB", m, "mean util %", u/n}' $R/gpu.csv; done
xz -T4 $R/gpu.csv
