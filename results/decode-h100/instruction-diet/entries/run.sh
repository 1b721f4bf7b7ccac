#!/usr/bin/env bash
# Call 5: MILLION's lookup table as entries of both planes side by side (one 8-byte load per key
# code) and a key walk whose half warps fall on distinct pairs of banks, against the folded-bases
# build (dcd16d7): kernel tests under bounds validation, alternated pipelined steps over the
# issue's grid, SDPA fp16, Nsight of both decode kernels at 32K batch 8, the SASS source page.
H=.gpu/c5; T=/tmp/kvt; R="$OUT/c5"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
timeout 200 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tee $R/val-summary.txt
A="--backend cuda --contexts 4096,16384,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in _fold ""; do timeout 55 $T/pq_bench$v $A > $R/pq$v-$i.log 2>&1; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,regex:smsp__average_warps_issue_stalled_(short_scoreboard|wait|math_pipe_throttle|mio_throttle|long_scoreboard|no_instruction)_per_issue_active.ratio,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
for v in _fold ""; do timeout 100 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" -c 8 $T/pq_bench$v $B > $R/ncu$v.txt 2>/dev/null; done
N=$(grep -cE "^  mma_decode.*\((1|3), " $R/ncu.txt); echo "small launches before: $N"
timeout 150 ncu --clock-control none --section SourceCounters -k regex:"mma_decode" --launch-skip $N -c 1 --page source --print-source sass --csv $T/pq_bench $B > $R/source.csv 2> $R/source.err
python3 - $R <<'PY'
import csv,sys,collections
R=sys.argv[1]
rows=list(csv.reader(open(R+"/source.csv")))
h=next((n for n,r in enumerate(rows) if "Source" in r),None)
if h is None: print("no source header"); sys.exit()
hd=rows[h]; body=[r for r in rows[h+1:] if len(r)==len(hd)]
ex=hd.index("Instructions Executed"); sc=hd.index("Source")
def num(x):
    try: return float(x.replace(",",""))
    except: return 0.0
op=collections.Counter()
for r in body:
    t=r[sc].split(); o=t[0] if t else "?"
    if o.startswith("@"): o=t[1] if len(t)>1 else o
    op[o.split(".")[0]]+=num(r[ex])
tot=sum(op.values()); print("SASS rows",len(body),"warp instructions",tot)
print(" ".join(f"{k}:{v/tot*100:.1f}%" for k,v in op.most_common(22)))
loop=collections.Counter()
for r in body:
    if num(r[ex])>=60000:
        t=r[sc].split(); o=t[0] if t else "?"
        if o.startswith("@"): o=t[1] if len(t)>1 else o
        loop[o.split(".")[0]]+=1
print("per round:",sum(loop.values()), " ".join(f"{k}:{v}" for k,v in loop.most_common(14)))
PY
echo "== steps (batch/context = pipelined us)"
for f in $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}' | tee $R/sdpa-steps.txt; echo
for v in _fold ""; do echo "ncu$v:"; awk '/\(2, 64, 1\)/{f=1} f' $R/ncu$v.txt | grep -E "duration|inst_executed.sum|registers|wavefronts|conflicts|stalled_(short|wait|math)|pipe_" | head -10 | awk '{print "  "$1, $NF}'; done
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
