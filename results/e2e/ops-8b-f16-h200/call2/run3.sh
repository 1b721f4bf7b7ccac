#!/usr/bin/env bash
# Call 2 (two GPUs): this build's decode steps (row_bench, 32 layers, dense f16 cache of 8K
# tokens; HEAD's ran in call 1 on the same kind of machine), then issue 8's one-request-at-a-time
# sweep with this build (run2.sh with BINS=disagg).
H=.gpu/ops; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/row_bench.xz > $T/row_bench; chmod +x $T/row_bench
start=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout 200 $T/row_bench --backend cuda --weights f16 --layers 32 --context 8192 --runs 20 > $R/row_bench.md 2> $R/row_bench.err
echo "row_bench exit $? after $(( $(date +%s) - start )) s"; grep -A4 "Decode steps" $R/row_bench.md
BINS=disagg LIMIT=${LIMIT:-300} bash $H/run2.sh
