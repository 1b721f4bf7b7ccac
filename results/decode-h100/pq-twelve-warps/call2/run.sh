#!/usr/bin/env bash
# Call 2: MILLION decode, precomputed value-walk store words + -0 key sums + queries read from
# global memory (room for 12 warps), against HEAD bf7c6f2 (pq_bench_old). KVC_PQ_WARPS caps warps.
H=.gpu/m2; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader
(cd $T && timeout 120 ./pq_kernels_gpu > $R/tests.log 2>&1; echo "pq kernel tests rc=$?"; grep -E "test result|FAILED|panicked" $R/tests.log | head -5)
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__block_size"
for v in old:0 new:11 new:12; do b=${v%%:*}; w=${v##*:}; s=""; [ $b = old ] && s=_old
  KVC_PQ_WARPS=$([ $w = 0 ] && echo 16 || echo $w) timeout 100 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -c 8 $T/pq_bench$s $B > $R/ncu-$b-$w.txt 2>/dev/null
  echo "ncu $b $w: $(grep -E "duration|inst_executed|registers|block_size" $R/ncu-$b-$w.txt | tail -4 | awk '{printf "%s=%s ", $1, $NF}')"
done
A="--backend cuda --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in old:16 new:11 new:12; do b=${v%%:*}; w=${v##*:}; s=""; [ $b = old ] && s=_old
  KVC_PQ_WARPS=$w timeout 60 $T/pq_bench$s $A > $R/pq-$b-$w-$i.log 2>&1; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context = pipelined us)"
for f in $R/pq-*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}') $(grep -ciE 'mismatch|fail' $f)"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}' | tee $R/sdpa-steps.txt; echo
timeout 200 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tail -4
cd $R && tar czf logs.tgz *.log *.txt val && rm -rf val *.log ncu-*.txt
