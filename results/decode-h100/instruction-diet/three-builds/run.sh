#!/usr/bin/env bash
# Which half of the instruction diet slows ZACK's long contexts: HEAD 9af8e6c (_base), the warp
# vote only (_vote), the vote and the precomputed copy sources (""). Nsight at 32K batch 8 (time,
# registers, DRAM read rate, instructions per warp), pipelined steps alternated three times, SDPA.
H=.gpu/fix; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/zack_bench*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
export KVC_SHARED=$PWD/$H/shared
Z="--backend cuda --storage f16 --rank-fractions 0.5"
M="gpu__time_duration.sum,launch__registers_per_thread,dram__bytes_read.sum.per_second,smsp__inst_executed.sum,smsp__warps_launched.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
for v in _base _vote ""; do
  timeout 60 ncu --csv --metrics "$M" -k regex:"mma_decode" -c 3 $T/zack_bench$v $Z --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64 > $R/ncu32k$v.csv 2>/dev/null
done
python3 - $R <<'PY'
import csv,collections,statistics,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+"/ncu32k*.csv")):
    rows=list(csv.reader(open(f))); h=next((i for i,r in enumerate(rows) if r and r[0]=="ID"),None)
    if h is None: print(os.path.basename(f),"no rows"); continue
    ix={k:i for i,k in enumerate(rows[h])}; d=collections.defaultdict(dict)
    for r in rows[h+1:]:
        if len(r)<len(rows[h]): continue
        d[r[ix["ID"]]][r[ix["Metric Name"]]]=float(r[ix["Metric Value"]].replace(",",""))
    for k,v in d.items():
        print(os.path.basename(f), f'{v["gpu__time_duration.sum"]/1000:.1f}us regs {v["launch__registers_per_thread"]:.0f} dram {v["dram__bytes_read.sum.per_second"]:.3g} instr/warp {v["smsp__inst_executed.sum"]/v["smsp__warps_launched.sum"]:.0f} barrier {v["smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"]:.2f} longsb {v["smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"]:.2f}')
PY
A="--contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2 3; do for v in _base _vote ""; do timeout 45 $T/zack_bench$v $Z $A > $R/zack$v-$i.log 2>&1; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context=pipelined us)"
for f in $R/zack*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done | tee $R/steps.txt
grep -h "check vs" $R/zack_vote-1.log | head -2
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
