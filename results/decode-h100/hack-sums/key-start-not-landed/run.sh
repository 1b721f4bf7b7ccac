#!/usr/bin/env bash
# Session 22, call 8: v8 = 68bf4df + no key-start upload when no row is left-padded (a compile-time
# variant of the kernel) against v7 = 68bf4df: HACK GPU tests of v8 under bounds validation
# (+ control), v7/v8 alternated at batch 1 and 8, SDPA fp16.
T=/tmp/kvt; R="$OUT"; mkdir -p $T/v1 $T/v7 $T/v8
for v in v1 v7 v8; do for f in .gpu/$v/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$v/$n; chmod +x $T/$v/$n; done; done
bash examples/bench/validate_bounds.sh $R/validate $T/v1/merge_gpu $T/v8/hack_kernels_gpu > $R/validate.txt 2>&1; echo "validate exit $?"; tail -2 $R/validate.txt
grep -hE "^case|test result" $R/validate/hack_kernels_gpu*.log | cut -c1-120 > $R/cases.txt; cat $R/cases.txt | cut -c1-90
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for v in v7 v8; do timeout 100 $T/$v/hack_bench $CFG --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/hack-$v-$i.log 2>&1; echo "$v run $i exit $?"; done; done
timeout 150 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
for v in v7 v8; do echo "== $v"; grep -hE "^\| [18] \| [0-9]" $R/hack-$v-1.log $R/hack-$v-2.log; done; echo "== sdpa"; grep -hE "^\| [18] \| [0-9]" $R/sdpa.log
cd $R && tar cJf validate.tar.xz validate validate.txt && rm -rf validate validate.txt
