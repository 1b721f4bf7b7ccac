#!/usr/bin/env bash
# The merge sized to one wave of units: bounds-validated merge tests, Nsight merge times, and
# pipelined steps of ZACK and HACK decode before (base) and after, alternated three times.
Z=.gpu/z; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $Z/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
export KVC_SHARED=$PWD/$Z/shared
timeout 200 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu > $R/validate.txt 2>&1
grep -h "max diff\|panicked\|test result" $R/validate/*.log > $R/kernels_gpu_summary.txt
A="--backend cuda --rank-fractions 0.5 --storage f16 --contexts 32768 --batches 8,1 --prefill-contexts 64"
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 8,1 --prefill-contexts 64"
for i in 1 2 3; do
  for bin in zack_bench_base zack_bench; do echo "$bin $i $(timeout 100 $T/$bin $A --runs 500 | grep -E '^\| 0\.' | cut -d'|' -f4,9 | tr '\n' ' ')"; done
  for bin in hack_bench_base hack_bench; do echo "$bin $i $(timeout 100 $T/$bin $C --runs 500 | grep -E '^\| [18] \|' | cut -d'|' -f2,7 | tr '\n' ' ')"; done
done | tee $R/steps.txt
M="--clock-control none --metrics gpu__time_duration.sum --csv"
for bin in zack_bench_base zack_bench; do timeout 100 ncu $M -k regex:"merge" $T/$bin $A --runs 5 > $R/ncu-$bin.csv 2>/dev/null; done
for bin in hack_bench_base hack_bench; do timeout 100 ncu $M -k regex:"merge" $T/$bin $C --runs 5 > $R/ncu-$bin.csv 2>/dev/null; done
(cd $R && tar cf "$OUT/all.tar" .)
cat $R/validate.txt; tail -3 $R/kernels_gpu_summary.txt
for bin in zack_bench_base zack_bench hack_bench_base hack_bench; do python3 - $R/ncu-$bin.csv $bin <<'PY'
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=next((r for r in rows if r and r[0]=="ID"),None)
if hdr is None: print(sys.argv[2],"no ncu rows"); sys.exit()
ix={k:i for i,k in enumerate(hdr)}
d=collections.defaultdict(list)
for r in rows:
    if len(r)==len(hdr) and r[0]!="ID":
        d[(r[ix["Grid Size"]],r[ix["Block Size"]])].append(float(r[ix["Metric Value"]].replace(",","")))
for k,v in sorted(d.items()):
    v.sort(); print(sys.argv[2], *k, "merge ns median", v[len(v)//2], "n", len(v))
PY
done
