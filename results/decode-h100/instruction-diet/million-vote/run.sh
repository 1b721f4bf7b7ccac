#!/usr/bin/env bash
# Call 1: MILLION's warp vote (weigh_round's `vote`) against HEAD 9af8e6c: PQ kernel tests under
# bounds validation, alternated pipelined steps, SDPA fp16, Nsight of the vote build's decode
# kernel at 32K batch 8 (stalls, pipes, shared-memory wavefronts, per-opcode SASS counts).
H=.gpu/c1; T=/tmp/kvt; R="$OUT"; mkdir -p $T $R/val
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 200 bash examples/bench/validate_bounds.sh $R/val $T/merge_gpu $T/pq_kernels_gpu | tee $R/val/summary.txt
A="--backend cuda --contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in _base ""; do timeout 50 $T/pq_bench$v $A > $R/pq$v-$i.log 2>&1; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
M="gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,smsp__inst_executed.sum,sm__warps_active.avg.per_cycle_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,regex:sm__inst_executed_pipe_.*.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,dram__bytes_read.sum"
timeout 120 ncu --clock-control none --metrics "$M" -k regex:"mma_decode" $T/pq_bench $B > $R/ncu.txt 2> $R/ncu.err
SKIP=$(grep -E "mma_decode" $R/ncu.txt | awk '/\(2, 64, 1\)/{print NR-1; exit}'); echo "skip $SKIP"
timeout 150 ncu --clock-control none --section SourceCounters -k regex:"mma_decode" --launch-skip $SKIP -c 1 --page source --print-source sass --csv $T/pq_bench $B > $R/source.csv 2> $R/source.err
python3 - $R <<'PY'
import csv,sys,re,collections
R=sys.argv[1]
rows=list(csv.reader(open(R+"/source.csv")))
h=next((i for i,r in enumerate(rows) if "Source" in r),None)
if h is None: print("no source header"); sys.exit()
hd=rows[h]; body=[r for r in rows[h+1:] if len(r)==len(hd)]
ex=next(i for i,c in enumerate(hd) if c.startswith("Instructions Executed"))
def num(x):
    try: return float(x.replace(",",""))
    except: return 0.0
op=collections.Counter()
for r in body: op[r[hd.index("Source")].split()[0].split(".")[0] if r[hd.index("Source")].strip() else "?"]+=num(r[ex])
tot=sum(op.values()); print("SASS rows",len(body),"warp instructions",tot)
print(" ".join(f"{k}:{v/tot*100:.1f}%" for k,v in op.most_common(25)))
PY
echo "== steps (batch/context = pipelined us)"
for f in $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee $R/steps.txt
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
grep -E "mma_decode|duration|inst_executed.sum|stalled_(short|wait|math|long|mio|no_inst|barrier)|pipe_(alu|fma|lsu|fmaheavy|uniform|tensor).*pct|wavefronts|conflicts|op_shared" $R/ncu.txt | sed -n '/(2, 64, 1)/,$p' | head -40
