#!/usr/bin/env bash
# HACK decode steps at 32K with the merge sized to one wave (HEAD) against the previous build,
# alternated three times, beside SDPA fp16 in the same call.
Z=.gpu/z; T=/tmp/kvt; mkdir -p $T "$OUT"
for f in hack_bench hack_bench_base; do xz -dc $Z/$f.xz > $T/$f; chmod +x $T/$f; done
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8,1 --prefill-contexts 64"
for i in 1 2 3; do for bin in hack_bench_base hack_bench; do
  echo "$bin $i $(timeout 100 $T/$bin $C --runs 500 | grep -E '^\| [18] \|' | cut -d'|' -f2,7 | tr '\n' ' ')"
done; done | tee $OUT/steps.txt
python3 examples/bench/sdpa_anchor.py --contexts 32768 --batches 1,8 --runs 500 --prefill-contexts 64 > $OUT/sdpa.log 2>&1
grep -E "^\| [18] " $OUT/sdpa.log
