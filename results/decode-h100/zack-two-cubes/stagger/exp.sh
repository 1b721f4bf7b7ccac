#!/usr/bin/env bash
# The tensor-core decode kernel (32K): two staging buffers in one cube per SM (committed) against
# one buffer in two cubes per SM, with and without the rounds' computation.
Z=.gpu/z; T=/tmp/kvt; mkdir -p $T "$OUT"
xz -dc $Z/zack_bench_exp.xz > $T/zb; chmod +x $T/zb
export KVC_SHARED=$PWD/$Z/shared
A="--backend cuda --rank-fractions 0.5 --storage f16 --contexts 32768 --batches 1,8 --runs 8 --prefill-contexts 64"
M="--metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size --csv"
for mode in ${MODES:-b2 b1 b2-stagger b1-stagger b2-stagger-copies b1-stagger-copies}; do
  unset KVC_EXP_BUFFERS KVC_COPIES_ONLY KVC_EXP_STAGGER
  [[ $mode == *stagger* ]] && export KVC_EXP_STAGGER=1
  [[ $mode == b1* ]] && export KVC_EXP_BUFFERS=1
  [[ $mode == *copies ]] && export KVC_COPIES_ONLY=1
  timeout 80 $T/zb --backend cuda --rank-fractions 0.5 --storage f16 --contexts 4096,32768 --batches 1,8 --runs 50 --prefill-contexts 64 > $OUT/wall-$mode.log 2>&1
  echo "== $mode"; grep -E "^check|^\| 0.*32768" $OUT/wall-$mode.log | cut -c40- | head -6
  timeout 80 ncu --clock-control none $M -k regex:"mma_decode|merge" $T/zb $A > $OUT/exp-$mode.csv 2>/dev/null
  python3 - $OUT/exp-$mode.csv $mode <<'PY'
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=next(r for r in rows if r and r[0]=="ID")
ix={k:i for i,k in enumerate(hdr)}
d=collections.defaultdict(list)
for r in rows:
    if len(r)==len(hdr) and r[0]!="ID" and ("decode" in r[ix["Kernel Name"]] or "duration" in r[ix["Metric Name"]]) and "grid" not in r[ix["Metric Name"]] and "regis" not in r[ix["Metric Name"]]:
        d[(r[ix["Kernel Name"]][:20],r[ix["Grid Size"]],r[ix["Metric Name"]])].append(float(r[ix["Metric Value"]].replace(",","")))
for k,v in sorted(d.items()):
    v.sort(); print(sys.argv[2], *k, v[len(v)//2])
PY
done
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 50 --prefill-contexts 64 > "$OUT/sdpa.log" 2>&1
grep -E "^\|" "$OUT/sdpa.log" | head -8
