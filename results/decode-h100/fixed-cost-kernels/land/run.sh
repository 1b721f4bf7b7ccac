#!/usr/bin/env bash
# The decode step's fixed cost: ZACK's queries load while the first round's rows land, the
# rotation requests its basis before its queries, the merge is one pass. Kernel tests (ZACK,
# merge, HACK, MILLION), pipelined steps of the three schemes alternated with HEAD, SDPA fp16 in the
# same call, then bounds validation (the merge's planted-read control, the ZACK decode test).
H=.gpu/fix; # binaries (not in git): this build, and HEAD cd31318 as *_base
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
export KVC_SHARED=$PWD/$H/shared
for t in zack_kernels_gpu zack_storage_gpu merge_gpu hack_kernels_gpu pq_kernels_gpu; do
  timeout 120 $T/$t --test-threads 1 --nocapture > $R/$t.txt 2>&1; echo "$t: $(grep -E 'test result' $R/$t.txt | cut -c1-60) $(grep -c panicked $R/$t.txt) panics"
done
Z="--backend cuda --storage f16 --rank-fractions 0.5"
K="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
A="--contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in _base ""; do
  timeout 45 $T/zack_bench$v $Z $A > $R/zack$v-$i.log 2>&1
  timeout 45 $T/hack_bench$v $K $A > $R/hack$v-$i.log 2>&1
  timeout 45 $T/pq_bench$v --backend cuda $A > $R/pq$v-$i.log 2>&1
done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context=pipelined us)"
for f in $R/zack*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done | tee $R/steps.txt
for f in $R/hack*.log $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee -a $R/steps.txt
grep -h "check vs" $R/zack-1.log | head -3; grep -h "check" $R/hack-1.log | grep -v "pi=\(32\|128\)" | head -3; grep -h "check" $R/pq-1.log | head -2
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((570 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_the_reference_on_uneven_heads > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -c "^case" $R/validate-decode.log
