#!/usr/bin/env bash
# Session 25, call 1. Probe: HACK decode at 16/18/20 warps per cube (an env override,
# KVC_EXP_WARPS, of an experimental build of f179a57), and every kernel of a step at real clocks.
H=.gpu/probe; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/hack_bench.xz > $T/hb; chmod +x $T/hb
CFG="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0"
for i in 1 2; do for w in 16 20 18; do
  KVC_EXP_WARPS=$w $T/hb $CFG --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/w$w-$i.log 2>&1
  echo "w$w-$i $(grep -E '^\| [18] \| [0-9]' $R/w$w-$i.log | awk -F'|' '{printf "%s/%s:%s ", $2,$3,$7}')"
done; done
python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1; grep -E '^\| [18] \| [0-9]|copy' $R/sdpa.log | head -8
for w in 16 20 18; do
  KVC_EXP_WARPS=$w timeout 120 ncu --metrics smsp__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__block_size -k regex:mma_decode --launch-skip 20 --launch-count 1 $T/hb $CFG --contexts 32768 --batches 8 --runs 30 --prefill-contexts 64 > $R/ncu-w$w.log 2>&1
  echo "ncu w$w: $(grep -E 'inst_executed|duration|registers|grid_size|block_size' $R/ncu-w$w.log | awk '{printf "%s=%s ", $1, $NF}')"
done
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv $T/hb $CFG --contexts 32768 --batches 8 --runs 20 --prefill-contexts 64 > $R/kernels.csv 2>/dev/null
python3 - $R/kernels.csv <<'PY'
import csv, sys, collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10]
hdr=rows[0]; ki=hdr.index("Kernel Name"); vi=hdr.index("Metric Value"); ii=hdr.index("ID")
rows=rows[1:]
print("launches", len(rows))
for r in rows[-8:]: print(r[ii], r[ki][:60], r[vi])
d=collections.defaultdict(list)
for r in rows[-60:]: d[r[ki][:40]].append(float(r[vi].replace(",","")))
for k,v in d.items(): v.sort(); print("median", k, len(v), v[len(v)//2])
PY
