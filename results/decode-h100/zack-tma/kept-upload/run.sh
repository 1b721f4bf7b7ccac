#!/usr/bin/env bash
# TMA kernel, then its first round asked for before any metadata and the step's metadata upload
# kept: tests, pipelined steps alternated with c0a6c8c (cp.async + wmma) and 7a (the first TMA
# build), SDPA fp16 in the same call.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/t1/zack_bench_base.xz > $T/zack_bench_base; xz -dc .gpu/t1/zack_bench.xz > $T/zack_bench_tma1
for f in .gpu/t4/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; done; chmod +x $T/*
nvidia-smi --query-gpu=name --format=csv,noheader
for t in zack_kernels_gpu zack_storage_gpu; do
  timeout 150 $T/$t --test-threads 1 --nocapture > $R/$t.txt 2>&1; echo "$t: $(grep -E 'test result' $R/$t.txt | cut -c1-60) $(grep -c panicked $R/$t.txt) panics"
done
grep -E "case (5|10|11|12), f16|rising" $R/zack_kernels_gpu.txt | cut -c1-120
Z="--backend cuda --storage f16 --rank-fractions 0.5"
A="--contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2 3; do for v in _base _tma1 ""; do timeout 45 $T/zack_bench$v $Z $A > $R/zack$v-$i.log 2>&1; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context=pipelined us)"
for f in $R/zack*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done | tee $R/steps.txt
grep -h "check vs" $R/zack-1.log | head -2
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
cd $R && tar czf all.tgz *.txt *.log && rm -f *.log
