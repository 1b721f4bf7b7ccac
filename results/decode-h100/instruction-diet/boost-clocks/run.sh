#!/usr/bin/env bash
# Spills and traffic of the three builds' ZACK decode kernel at 32K batch 8, at boost clocks
# (Nsight --clock-control none): local loads/stores, DRAM and L2 bytes, time.
H=.gpu/fix; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/zack_bench*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
export KVC_SHARED=$PWD/$H/shared
Z="--backend cuda --storage f16 --rank-fractions 0.5"
M="gpu__time_duration.sum,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum,dram__bytes_read.sum,lts__t_bytes.sum,smsp__inst_executed.sum,smsp__warps_launched.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__cycles_active.avg"
for v in _base _vote ""; do
  timeout 60 ncu --clock-control none --csv --metrics "$M" -k regex:"mma_decode" -c 3 $T/zack_bench$v $Z --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64 > $R/ncu$v.csv 2>$R/ncu$v.err
done
python3 - $R <<'PY'
import csv,collections,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+"/ncu*.csv")):
    rows=list(csv.reader(open(f))); h=next((i for i,r in enumerate(rows) if r and r[0]=="ID"),None)
    if h is None: print(os.path.basename(f),"no rows"); continue
    ix={k:i for i,k in enumerate(rows[h])}; d=collections.defaultdict(dict)
    for r in rows[h+1:]:
        if len(r)<len(rows[h]): continue
        try: d[r[ix["ID"]]][r[ix["Metric Name"]]]=float(r[ix["Metric Value"]].replace(",",""))
        except ValueError: d[r[ix["ID"]]][r[ix["Metric Name"]]]=r[ix["Metric Value"]]
    for k,v in d.items():
        print(os.path.basename(f), " ".join(f"{m.split('__')[1][:38]}={x:.4g}" if isinstance(x,float) else f"{m}={x}" for m,x in v.items()))
PY
tail -3 $R/ncu.err
