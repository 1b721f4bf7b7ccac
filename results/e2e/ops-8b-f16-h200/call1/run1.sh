#!/usr/bin/env bash
# Call 1 (two GPUs): (a) the landed arrival path on CUDA: the tiny random model's --check with
# requests a millisecond apart (states received on the pulling thread, imported and decoded on
# the main thread), ROUNDS rounds in f16 and f32 weights, plus one request at a time; (b) decode
# steps of the 8B-shaped model (32 layers, dense f16 cache of 8K tokens): HEAD b2a2875's
# row_bench (Burn norms and RoPE, row-product kernel) against this build's (all three kernels).
H=.gpu/ops; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for b in disagg row_bench head-disagg head-row_bench; do xz -dc $H/$b.xz > $T/$b; chmod +x $T/$b; done
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
fails=0; runs=0
for round in $(seq ${ROUNDS:-6}); do
  for mode in "--request-rate 1000" ""; do
    for w in f16 f32; do
      timeout 90 $T/disagg demo --backend cuda --random-model tiny --weights $w --prompt-tokens 300,1000,300 \
        --max-new-tokens 16 --kv dense:storage=f16 --kv hack:bits=2,pi=64 $mode --check > $T/c.log 2> $T/c.err
      rc=$?; runs=$((runs+1)); [ $rc -ne 0 ] && fails=$((fails+1))
      echo "round $round weights $w mode '${mode:-one at a time}' exit $rc mismatches $(grep -cE ' NO' $T/c.log)" >> $R/check.txt
      [ $rc -ne 0 ] && { cp $T/c.log $R/fail-$round-$w.log; grep -vE "^\[" $T/c.err | tail -5 >> $R/fail-$round-$w.log; }
    done
  done
done
echo "tiny --check: $fails of $runs runs failed"; tail -4 $R/check.txt
for b in head-row_bench row_bench; do
  CUDA_VISIBLE_DEVICES=0 timeout 200 $T/$b --backend cuda --weights f16 --layers 32 --context 8192 --runs 30 > $R/$b.md 2> $R/$b.err
  echo "$b exit $?"
done
for b in head-row_bench row_bench; do echo "== $b"; grep -A4 "Decode steps" $R/$b.md; done
