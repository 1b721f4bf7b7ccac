#!/usr/bin/env bash
# Issue 8: requests arriving at fixed rates (`disagg sweep --request-rate`), random Llama-3-8B-shaped
# model in f16 weights, on a host of two GPUs: the prefill server on GPU 1, the decode worker on
# GPU 0; ${REQUESTS:-5} prompts of 8192 random tokens, 256 new tokens each, a 10 Gbit/s link,
# arrival rates ${RATES:-0.05,0.1,0.125} requests/s; dense f16 storage (the baseline) and HACK
# 2-bit. The decode worker prefetches in arrival order and decodes one request at a time (no
# batching). One warm-up request per scheme. First a check on the tiny random model in f16: the
# disaggregated run's KV hashes and tokens against a single-process run, with requests arriving
# a millisecond apart (caches imported on one thread while another decodes).
H=.gpu/rates; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/disagg.xz > $T/disagg; chmod +x $T/disagg
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
timeout 120 $T/disagg demo --backend cuda --random-model tiny --weights f16 --prompt-tokens 300,1000,300 \
  --max-new-tokens 16 --kv dense:storage=f16 --kv hack:bits=2,pi=64 --request-rate 1000 --check > $T/check.log 2> $T/check.err
echo "tiny f16 check exit $?"; grep -E "^scheme|^ +[0-9] " $T/check.log; grep -vE "^\[" $T/check.err | tail -3
nvidia-smi --query-gpu=timestamp,index,memory.used,utilization.gpu --format=csv -lms 1000 > $R/gpu.csv &
SMI=$!
start=$(date +%s)
P=$(printf '8192,%.0s' $(seq ${REQUESTS:-5})); P=${P%,}
timeout ${LIMIT:-560} $T/disagg sweep --backend cuda --random-model llama3-8b --weights f16 --server-gpu 1 \
  --prompt-tokens $P --max-new-tokens 256 --warmup 1 --data-streams 4 \
  --kv dense:storage=f16 --kv hack:bits=2,pi=64 --link-gbps 10 --request-rate ${RATES:-0.05,0.1,0.125} \
  --out $R/sweep > $R/sweep.log 2> $R/sweep.err
echo "sweep exit $? after $(( $(date +%s) - start )) s"
kill $SMI
grep -E "loaded|up after" $R/sweep.err | head -4
grep -vE "^ +[0-9]+: |^ +at " $R/sweep.err | grep -vE "^\[" | tail -5
grep -E "^scheme|^mean" $R/sweep.log
cat $R/sweep/e2e.md 2>/dev/null
for i in 0 1; do awk -F', ' -v g=$i '$2==g {m=($3+0>m)?$3+0:m; u+=$4+0; n++} END {print "gpu", g, "peak MiB", m, "mean util %", u/n}' $R/gpu.csv; done
xz -T4 $R/gpu.csv
