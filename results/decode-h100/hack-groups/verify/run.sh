#!/usr/bin/env bash
# The build to land (copy groups of 4 warps, the P codes' rounder, the merge loading 4 splits a
# round): steps beside SDPA fp16, the HACK kernel tests, and the merge and PQ kernel tests under
# CubeCL's bounds validation.
H=.gpu/verify; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do
  $T/hack_bench $CFG --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/land-$i.log 2>&1
  echo "land-$i $(grep -E '^\| [18] \| [0-9]' $R/land-$i.log | awk -F'|' '{printf "%s/%s:%s ", $2,$3,$7}') $(grep -c 'check vs' $R/land-$i.log) checks $(grep -c 'panicked\|Error' $R/land-$i.log) errors"
done
grep "check vs" $R/land-1.log | head -6
python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1; grep -E '^\| [18] \| [0-9]|copy' $R/sdpa.log | head -8
timeout 260 $T/kernels_gpu --test-threads 1 > $R/tests.log 2>&1; echo "hack kernels_gpu exit $?"
grep -E "^test |test result|max" $R/tests.log | tail -30
timeout 150 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/pq_kernels_gpu; echo "validate exit $?"
