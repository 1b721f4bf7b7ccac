#!/usr/bin/env bash
# Session 25, call 2. Copy barriers per group of warps (KVC_EXP_GROUPS of an experimental build: 1 is
# f179a57's one pair a cube) and the merge loading 4 splits at once (in every variant).
H=.gpu/groups; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/hack_bench.xz > $T/hb; chmod +x $T/hb
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for g in 1 4 16 2 8; do
  KVC_EXP_GROUPS=$g $T/hb $CFG --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/g$g-$i.log 2>&1
  echo "g$g-$i $(grep -E '^\| [18] \| [0-9]' $R/g$g-$i.log | awk -F'|' '{printf "%s/%s:%s ", $2,$3,$7}') $(grep -c 'check vs' $R/g$g-$i.log) checks $(grep -ci 'error\|panic' $R/g$g-$i.log) errors"
done; done
python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1; grep -E '^\| [18] \| [0-9]|copy' $R/sdpa.log | head -8
for g in 1 16 4; do
  KVC_EXP_GROUPS=$g timeout 120 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread -k regex:mma_decode --launch-skip 20 --launch-count 1 $T/hb $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-g$g.log 2>&1
  echo "ncu g$g: $(grep -E 'inst_executed|duration|registers' $R/ncu-g$g.log | awk '{printf "%s=%s ", $1, $NF}')"
done
timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum -k regex:merge --launch-skip 30 --launch-count 9 $T/hb $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-merge.log 2>&1
echo "merge µs: $(grep -E 'duration' $R/ncu-merge.log | awk '{printf "%s ", $NF}')"
