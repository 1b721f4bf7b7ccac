#!/usr/bin/env bash
# Session 23, call 5: HEAD 6729d0d's HACK kernel tests with the 16-head case (max bound from the
# reference's own float-noise sensitivity); steps of HEAD and of the split barriers (keys refilled
# after the scores, values after the products) alternated beside SDPA fp16; Π = 128 with two
# stages (10 warps) against f30eaf2 (one stage, 16 warps).
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/h5/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
timeout 220 $T/hack_kernels_gpu --test-threads 1 --nocapture > $R/tests.log 2>&1; echo "tests exit $?"
grep -E "^case 1[2-4]|^test |test result" $R/tests.log | cut -c1-230
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in head split; do
  timeout 100 $T/hack_bench_$v $CFG --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/$v-$i.log 2>&1; echo "$v-$i exit $?"
done; done
P128="--backend cuda --config bits=2,pi=128,round=stochastic,seed=0"
for i in 1 2; do for v in base head; do
  timeout 60 $T/hack_bench_$v $P128 --contexts 32768,65536 --batches 8 --runs 200 --prefill-contexts 64 > $R/pi128-$v-$i.log 2>&1; echo "pi128-$v-$i exit $?"
done; done
timeout 150 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
grep check $R/split-1.log | tail -3
for f in head-1 split-1 head-2 split-2 sdpa pi128-base-1 pi128-head-1 pi128-base-2 pi128-head-2; do echo "== $f"; grep -E "^\| [18] \| [0-9]" $R/$f.log; done
