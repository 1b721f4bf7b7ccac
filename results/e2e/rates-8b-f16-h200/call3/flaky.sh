#!/usr/bin/env bash
# The tiny random model's disaggregated check, repeated: requests a millisecond apart (caches
# imported on one thread while another decodes) against one request at a time.
T=/tmp/kvt; mkdir -p $T; xz -dc .gpu/rates/disagg.xz > $T/disagg; chmod +x $T/disagg
for round in $(seq ${ROUNDS:-4}); do
  for mode in ${MODES:-"--request-rate 1000" ""}; do
    for w in f16 f32; do
      timeout 60 $T/disagg demo --backend cuda --random-model tiny --weights $w --prompt-tokens 300,1000,300 \
        --max-new-tokens 16 --kv dense:storage=f16 --kv hack:bits=2,pi=64 $mode --check > $T/c.log 2> $T/c.err
      echo "round $round weights $w mode '${mode:-one at a time}' exit $? mismatches $(grep -cE ' NO' $T/c.log) $(grep -E ' NO' $T/c.log | awk '{print "req"$1"/"$2}' | tr '\n' ' ')"
    done
  done
done
