#!/usr/bin/env bash
# Issue 8: `disagg sweep` with a random Llama-3-8B-shaped model in f16 weights (`--weights f16`)
# on a host of two GPUs (H200s in the calls that ran): the prefill server on GPU 1, the decode
# worker on GPU 0; prompts of ${PROMPTS:-2048,8192} random tokens, 256 new tokens each, links
# emulated at ${LINKS:-1,10,25,100} Gbit/s; dense f16 storage (the baseline) and HACK 2-bit. One
# warm-up round per scheme. Decode steps multiply by the weights with the row-product kernel
# unless PLAIN_MATMUL=1 (Burn's matrix product: call 1). First, where the carry holds them, the
# row-product kernel's tests built for CUDA, and a check on the tiny random model: the
# disaggregated run's KV hashes and tokens against a single-process run, with f16 weights.
H=.gpu/e2e16; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/disagg.xz > $T/disagg; chmod +x $T/disagg
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
PLAIN=${PLAIN_MATMUL:+--plain-matmul}
for t in $H/*-test.xz; do
  [ -e "$t" ] || continue
  xz -dc $t > $T/test; chmod +x $T/test
  $T/test > $T/test.log 2>&1; echo "$(basename $t .xz) exit $?"; grep -E "^test |^test result|panicked" $T/test.log
done
if [ -z "$SKIP_CHECK" ]; then
  timeout 120 $T/disagg demo --backend cuda --random-model tiny --weights f16 $PLAIN --prompt-tokens 300,1000 \
    --max-new-tokens 16 --kv dense:storage=f16 --kv hack:bits=2,pi=64 --check > $T/check.log 2> $T/check.err
  echo "tiny f16 check exit $?"; grep -E "^scheme|^ +[0-9] " $T/check.log; grep -vE "^\[" $T/check.err | tail -3
fi
nvidia-smi --query-gpu=timestamp,index,memory.used,utilization.gpu --format=csv -lms 1000 > $R/gpu.csv &
SMI=$!
start=$(date +%s)
timeout ${LIMIT:-480} $T/disagg sweep --backend cuda --random-model llama3-8b --weights f16 $PLAIN --server-gpu 1 \
  --prompt-tokens ${PROMPTS:-2048,8192} --max-new-tokens 256 --warmup 1 --data-streams 4 \
  --kv dense:storage=f16 --kv hack:bits=2,pi=64 --link-gbps ${LINKS:-1,10,25,100} \
  --out $R/sweep > $R/sweep.log 2> $R/sweep.err
echo "sweep exit $? after $(( $(date +%s) - start )) s"
kill $SMI
grep -E "loaded|up after|^\[" $R/sweep.err | grep -v "tokens in" | head -12; grep "tokens in" $R/sweep.err | cut -c1-150
grep -vE "^ +[0-9]+: |^ +at " $R/sweep.err | grep -vE "^\[" | tail -5
grep -E "^scheme|^ +[01] " $R/sweep.log
cat $R/sweep/e2e.md 2>/dev/null
for i in 0 1; do awk -F', ' -v g=$i '$2==g {m=($3+0>m)?$3+0:m; u+=$4+0; n++} END {print "gpu", g, "peak MiB", m, "mean util %", u/n}' $R/gpu.csv; done
xz -T4 $R/gpu.csv
