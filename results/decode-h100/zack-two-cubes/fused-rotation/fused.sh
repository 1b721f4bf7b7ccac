#!/usr/bin/env bash
# Queries rotated inside the ZACK tensor-core kernel (no rotation launch): bounds-validated tests, pipelined steps of
# base and fused builds alternated three times (32K, batches 8 and 1), SDPA in the same call,
# Nsight kernel times, L2 sectors, registers and local memory. Outputs tarred into $OUT/all.tar.
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $Z/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
export KVC_SHARED=$PWD/$Z/shared
timeout 240 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu $T/storage_gpu > $R/validate.txt 2>&1
grep -h "max diff\|panicked\|test result" $R/validate/*.log > $R/kernels_gpu_summary.txt
A="--backend cuda --rank-fractions 0.5 --storage f16 --prefill-contexts 64"
for bin in zack_bench_base zack_bench; do timeout 100 $T/$bin $A --contexts 4096,32768 --batches 1,8 --runs 50 > $R/wall-$bin.log 2>&1; done
for i in 1 2 3; do for bin in zack_bench_base zack_bench; do
  echo "$bin $i $(timeout 100 $T/$bin $A --contexts 32768 --batches 8,1 --runs 500 | grep -E '^\| 0\.' | cut -d'|' -f4,9 | tr '\n' ' ')"
done; done | tee $R/steps.txt
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 50 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,launch__registers_per_thread,l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum --csv"
for bin in zack_bench_base zack_bench; do timeout 100 ncu $M -k regex:"mma_decode|rotate|merge" $T/$bin $A --contexts 32768 --batches 1,8 --runs 5 > $R/ncu-$bin.csv 2>/dev/null; done
(cd $R && tar cf "$OUT/all.tar" .)
cat $R/validate.txt; tail -3 $R/kernels_gpu_summary.txt
for bin in zack_bench_base zack_bench; do echo "== $bin"; grep -E "^check|^\| 0\." $R/wall-$bin.log | cut -c36-120 | head -6; done
grep -E "^\| [18] " $R/sdpa.log | head -4
for bin in zack_bench_base zack_bench; do python3 - $R/ncu-$bin.csv $bin <<'PY'
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=next((r for r in rows if r and r[0]=="ID"),None)
if hdr is None: print(sys.argv[2],"no ncu rows"); sys.exit()
ix={k:i for i,k in enumerate(hdr)}
d=collections.defaultdict(list)
for r in rows:
    if len(r)==len(hdr) and r[0]!="ID":
        d[(r[ix["Grid Size"]],r[ix["Metric Name"]][:20])].append(float(r[ix["Metric Value"]].replace(",","")))
for k,v in sorted(d.items()):
    v.sort(); print(sys.argv[2], *k, v[len(v)//2])
PY
done
