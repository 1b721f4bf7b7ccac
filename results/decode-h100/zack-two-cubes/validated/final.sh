#!/usr/bin/env bash
# One device call: bounds-validated merge / ZACK kernel / ZACK storage tests; ZACK decode and HACK
# decode before (base) and after (two cubes per SM with one buffer each; merge sized to one wave),
# beside SDPA; Nsight kernel times of all four builds. Outputs tarred into $OUT/all.tar.
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $Z/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
export KVC_SHARED=$PWD/$Z/shared
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/smi.txt 2>&1
timeout 300 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu $T/storage_gpu > $R/validate.txt 2>&1
grep -h "max diff\|panicked\|test result" $R/validate/*.log > $R/kernels_gpu_summary.txt
A="--backend cuda --rank-fractions 0.5 --storage f16"
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for bin in zack_bench_base zack_bench; do
  timeout 150 $T/$bin $A --contexts 4096,32768 --batches 1,8 --runs 50 --prefill-contexts 64 > $R/wall-$bin.log 2>&1
done
for bin in hack_bench_base hack_bench; do
  timeout 150 $T/$bin $C --contexts 32768 --batches 1,8 --runs 50 --prefill-contexts 64 > $R/wall-$bin.log 2>&1
done
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 50 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size --csv"
for bin in zack_bench_base zack_bench; do
  timeout 100 ncu $M -k regex:"decode|merge|rotate" $T/$bin $A --contexts 32768 --batches 1,8 --runs 5 --prefill-contexts 64 > $R/ncu-$bin.csv 2> $R/ncu-$bin.err
done
for bin in hack_bench_base hack_bench; do
  timeout 100 ncu $M -k regex:"merge" $T/$bin $C --contexts 32768 --batches 1,8 --runs 5 --prefill-contexts 64 > $R/ncu-$bin.csv 2> $R/ncu-$bin.err
done
(cd $R && tar cf "$OUT/all.tar" .)
cat $R/validate.txt; tail -4 $R/kernels_gpu_summary.txt
for bin in zack_bench_base zack_bench hack_bench_base hack_bench; do echo "== $bin"; grep -E "^check|^\| 0\.|^\| [18] \|" $R/wall-$bin.log | cut -c1-150 | head -6; done
grep -E "^\| [18] " $R/sdpa.log | head -4
for bin in zack_bench_base zack_bench hack_bench_base hack_bench; do python3 - $R/ncu-$bin.csv $bin <<'PY'
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=next((r for r in rows if r and r[0]=="ID"),None)
if hdr is None: print(sys.argv[2],"no ncu rows"); sys.exit()
ix={k:i for i,k in enumerate(hdr)}
d=collections.defaultdict(list)
for r in rows:
    if len(r)==len(hdr) and r[0]!="ID" and "grid" not in r[ix["Metric Name"]]:
        d[(r[ix["Kernel Name"]][:16],r[ix["Grid Size"]],r[ix["Metric Name"]][:14])].append(float(r[ix["Metric Value"]].replace(",","")))
for k,v in sorted(d.items()):
    v.sort(); print(sys.argv[2], *k, v[len(v)//2])
PY
done
