#!/usr/bin/env bash
# The ZACK decode kernel at one round per cube (256 slots, batch 8, warm caches): stall reasons per
# issued instruction, instructions, cycles; then Nsight's per-instruction source page (SASS) with
# its stall samples, the 40 instructions with the most samples.
H=.gpu/fix; # binary (not in git): 9f995d9
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/zack_bench.xz > $T/zack_bench; chmod +x $T/zack_bench
Z="--backend cuda --storage f16 --rank-fractions 0.5 --contexts 256 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_active.avg,smsp__warps_launched.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__average_warp_latency_per_inst_issued.ratio"
timeout 150 ncu --clock-control none --cache-control none --metrics "$M" -k regex:"mma_decode" -c 14 $T/zack_bench $Z > $R/stalls.txt 2> $R/stalls.err
grep -E "mma_decode" $R/stalls.txt | awk '{print NR-1, $2, $3, $4}' | head -14
SKIP=$(grep -E "mma_decode" $R/stalls.txt | awk '/\(8, 1, 8\)/{print NR-1; exit}'); echo "first one-round launch: $SKIP"
awk -v n=$((SKIP+2)) '/mma_decode/{k++} k==n+0 && /stalled|duration|inst_executed|cycles_active|launched|latency/{print $1, $NF}' $R/stalls.txt | sort -k2 -g -r | head -30
timeout 200 ncu --clock-control none --cache-control none --section SourceCounters --section WarpStateStats -k regex:"mma_decode" --launch-skip $((SKIP+1)) -c 1 --page source --print-source sass --csv $T/zack_bench $Z > $R/source.csv 2> $R/source.err
echo "source rows: $(wc -l < $R/source.csv)"; tail -3 $R/source.err
python3 - $R/source.csv <<'PY'
import csv,sys
rows=list(csv.reader(open(sys.argv[1])))
h=next((i for i,r in enumerate(rows) if any("Source" == c or "Address" in c for c in r)),None)
if h is None: print("no header"); print(rows[:3]); sys.exit()
hd=rows[h]; print(" | ".join(hd)[:600])
samp=[i for i,c in enumerate(hd) if "Sampl" in c]
print("sample columns:",[hd[i] for i in samp])
k=samp[0] if samp else None
if k is None: sys.exit()
body=[r for r in rows[h+1:] if len(r)==len(hd)]
def num(x):
    try: return float(x.replace(",",""))
    except: return 0.0
tot=sum(num(r[k]) for r in body); print("instructions",len(body),"samples",tot)
src=hd.index("Source") if "Source" in hd else 1
for r in sorted(body,key=lambda r:-num(r[k]))[:40]: print(f"{num(r[k]):8.0f} {r[0][:8]} {r[src][:70]} | "+" ".join(f"{hd[i][:18]}={r[i]}" for i in samp[1:4]))
PY
