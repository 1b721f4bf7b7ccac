#!/usr/bin/env bash
# Call 2 (two GPUs): issue 8's one-request-at-a-time sweep, random Llama-3-8B-shaped model in f16
# weights, prefill server on GPU 1, decode worker on GPU 0, ${REQUESTS:-3} prompts of 8192 random
# tokens, 256 new tokens, 10 Gbit/s, dense f16 storage and HACK 2-bit, one warm-up request per
# scheme: HEAD b2a2875's binary (row-product kernel, Burn's norms and RoPE) then this build's
# (the three one-launch kernels). BINS picks the binaries.
H=.gpu/rate; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for b in ${BINS:-head-disagg disagg}; do xz -dc $H/$b.xz > $T/$b; chmod +x $T/$b; done
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
P=$(printf '8192,%.0s' $(seq ${REQUESTS:-3})); P=${P%,}
for b in ${BINS:-head-disagg disagg}; do
  start=$(date +%s)
  timeout ${LIMIT:-270} $T/$b sweep --backend cuda --random-model llama3-8b --weights f16 --server-gpu 1 \
    --prompt-tokens $P --max-new-tokens 256 --warmup 1 --data-streams 4 \
    --kv dense:storage=f16 --kv hack:bits=2,pi=64 --link-gbps 10 ${EXTRA} \
    --out $R/$b > $R/$b.log 2> $R/$b.err
  echo "$b sweep exit $? after $(( $(date +%s) - start )) s"
  grep -vE "^ +[0-9]+: |^ +at " $R/$b.err | grep -vE "^\[" | tail -3
done
for b in ${BINS:-head-disagg disagg}; do echo "== $b"; cat $R/$b/e2e.md 2>/dev/null | head -12; done
