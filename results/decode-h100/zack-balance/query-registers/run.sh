#!/usr/bin/env bash
# Query operands held in registers for the split: ZACK kernel and storage tests, pipelined steps
# alternated with the base build (HEAD 558a015), SDPA fp16 in the same call, then the decode test
# under CubeCL's bounds validation (with the merge's planted-read control). Outputs go to $OUT.
H=.gpu/bal; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
export KVC_SHARED=$PWD/$H/shared
timeout 100 $T/zack_kernels_gpu --test-threads 1 --nocapture > $R/zack-tests.txt 2>&1
timeout 40 $T/zack_storage_gpu --test-threads 1 > $R/zack-storage.txt 2>&1
A="--backend cuda --storage f16 --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for b in zack_bench_base zack_bench; do
  timeout 40 $T/$b $A --rank-fractions 0.5 > $R/$b-uneven-$i.log 2>&1
  timeout 40 $T/$b $A --rank-fractions 0.5 --even > $R/$b-even-$i.log 2>&1
  timeout 40 $T/$b $A --rank-fractions 0.25 > $R/$b-uneven-25-$i.log 2>&1
done; done
timeout 40 python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== tests"; for f in zack-tests zack-storage; do grep -E "test result|panicked|FAILED" $R/$f.txt | head -5; done
grep -E "rising|case (3|5|9|11), f16" $R/zack-tests.txt | head -6
echo "== steps (fraction:batch/context=pipelined us)"
for f in $R/zack_bench*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s:%s/%s=%s ", $2+0, $4+0, $5+0, $9+0}')"; done > $R/steps.txt
cat $R/steps.txt
grep -h "check vs" $R/zack_bench-uneven-1.log
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((570 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_the_reference_on_uneven_heads > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -c "^case" $R/validate-decode.log
