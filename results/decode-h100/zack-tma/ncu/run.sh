#!/usr/bin/env bash
# Where a pipelined ZACK step's time goes with the TMA kernel: each kernel's time under Nsight
# with warm caches (no flush), against the pipelined step.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in .gpu/t1/zack_bench.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
M="gpu__time_duration.sum,smsp__inst_executed.sum,smsp__warps_launched.sum,dram__bytes_read.sum"
for ctx in 32768 65536 4096; do
timeout 120 ncu --clock-control none --cache-control none --csv --metrics "$M" -k regex:"tma_decode|rotate_queries|merge" -c 45 $T/zack_bench --backend cuda --storage f16 --rank-fractions 0.5 --contexts $ctx --batches 8 --runs 20 --prefill-contexts 64 > $R/ncu-$ctx.csv 2>/dev/null
done
python3 - $R <<'PY'
import csv,collections,statistics,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+"/ncu-*.csv")):
    rows=list(csv.reader(open(f))); h=next((i for i,r in enumerate(rows) if r and r[0]=="ID"),None)
    if h is None: print(os.path.basename(f),"no rows"); continue
    ix={k:i for i,k in enumerate(rows[h])}; d=collections.defaultdict(dict)
    for r in rows[h+1:]:
        if len(r)<len(rows[h]): continue
        d[r[ix["ID"]]][r[ix["Metric Name"]]]=float(r[ix["Metric Value"]].replace(",",""))
        d[r[ix["ID"]]]["name"]=r[ix["Kernel Name"]][:40]; d[r[ix["ID"]]]["grid"]=r[ix["Grid Size"]]
    g=collections.defaultdict(list)
    for v in d.values(): g[(v["name"],v["grid"])].append(v)
    print(os.path.basename(f))
    for (n,gr),xs in g.items():
        if len(xs)<5: continue
        print(f"  {n:40s} {gr:14s} n={len(xs):3d} {statistics.median(x['gpu__time_duration.sum'] for x in xs)/1e3:8.2f} us  {statistics.median(x['dram__bytes_read.sum'] for x in xs)/1e6:8.1f} MB  {statistics.median(x['smsp__inst_executed.sum']/x['smsp__warps_launched.sum'] for x in xs):8.0f} instr/warp")
PY
