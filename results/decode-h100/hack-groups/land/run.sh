#!/usr/bin/env bash
# Session 25, call 4 (call 3 ran the same with a build whose P-code sum was a compile-time constant
# that CubeCL refused to add to: every decode panicked; no timings). f179a57's kernel (one copy
# barrier pair a cube, old P codes, merge one split a round: env switches of this experimental
# build, env-switches.patch), copy groups of 4 warps, and both with the P codes' rounder and the
# merge loading 4 splits a round (the build's defaults). The tests at the end ran past the
# call's 600 s; they ran in the next call (verify/).
H=.gpu/land; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
run() { env $2 $T/hack_bench $CFG --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/$1.log 2>&1
  echo "$1 $(grep -E '^\| [18] \| [0-9]' $R/$1.log | awk -F'|' '{printf "%s/%s:%s ", $2,$3,$7}') $(grep -c 'check vs' $R/$1.log) checks $(grep -c 'panicked\|Error' $R/$1.log) errors"; }
BASE="KVC_EXP_GROUPS=1 KVC_EXP_OLDP=1 KVC_EXP_MERGE1=1"; GRP="KVC_EXP_OLDP=1 KVC_EXP_MERGE1=1"; NEW="KVC_EXP_NONE=1"
for i in 1 2 3; do run base-$i "$BASE"; run groups-$i "$GRP"; run new-$i "$NEW"; done
python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1; grep -E '^\| [18] \| [0-9]|copy' $R/sdpa.log | head -8
for v in base new; do V=BASE; [ $v = new ] && V=NEW
  env ${!V} timeout 100 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread -k regex:mma_decode --launch-skip 20 --launch-count 1 $T/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-$v.log 2>&1
  echo "ncu $v: $(grep -E 'inst_executed|duration|registers' $R/ncu-$v.log | awk '{printf "%s=%s ", $1, $NF}')"
  env ${!V} timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum -k regex:merge --launch-skip 30 --launch-count 7 $T/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/merge-$v.log 2>&1
  echo "merge $v µs: $(grep -E 'duration' $R/merge-$v.log | awk '{printf "%s ", $NF}')"
done
timeout 100 ncu --section SourceCounters --import-source no -k regex:mma_decode --launch-skip 20 --launch-count 1 -o $T/prof $T/hack_bench $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > /dev/null 2>&1
ncu -i $T/prof.ncu-rep --page source --print-source sass --csv 2>/dev/null | xz -T8 > $R/sass-new.csv.xz; ls -la $R/sass-new.csv.xz
(timeout 60 $T/merge_gpu --test-threads 1 2>&1 | tail -3; timeout 280 $T/kernels_gpu --test-threads 1 2>&1) > $R/tests.log 2>&1
grep -E "^test |test result" $R/tests.log | tail -30
