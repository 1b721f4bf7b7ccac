#!/usr/bin/env bash
# The rate-mode check of call 3 again, with B::sync after each import on the pulling thread
# (a build of the work tree between calls 3 and the landed code; not kept).
T=/tmp/kvt; mkdir -p $T; xz -dc .gpu/rates/disagg.xz > $T/disagg; chmod +x $T/disagg
for round in 1 2 3 4 5 6 7; do for w in f16 f32; do
  timeout 60 $T/disagg demo --backend cuda --random-model tiny --weights $w --prompt-tokens 300,1000,300 \
    --max-new-tokens 16 --kv dense:storage=f16 --kv hack:bits=2,pi=64 --request-rate 1000 --check > $T/c.log 2> $T/c.err
  echo "round $round weights $w rate 1000 exit $? mismatches $(grep -cE ' NO' $T/c.log)"
done; done
