#!/usr/bin/env bash
# Dump MILLION's generated CUDA source and the decode loop's SASS (HEAD).
H=.gpu/m1; T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc $H/pq_bench.xz > $T/pq_bench; chmod +x $T/pq_bench
nvidia-smi --query-gpu=name --format=csv,noheader
which nvcc cuobjdump nvdisasm ncu 2>&1 | head
B="--backend cuda --contexts 32768 --batches 8 --runs 3 --prefill-contexts 64"
CUBECL_DEBUG_LOG=$R/cubecl.log timeout 60 $T/pq_bench $B > $R/pq.log 2>&1
python3 - $R <<'PY'
import sys,re
R=sys.argv[1]; s=open(R+"/cubecl.log",errors="replace").read()
i=s.find("mma_decode_kernel"); print("log chars",len(s),"first mma_decode at",i)
# keep every kernel source containing mma_decode
parts=s.split("extern \"C\" __global__")
keep=[p for p in parts if "mma_decode" in p[:400]]
open(R+"/mma_decode.cu","w").write(("\n//======\n").join(keep))
print("kept",len(keep),"chunks",sum(len(k) for k in keep))
PY
rm -f $R/cubecl.log
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread -k regex:"mma_decode" -c 8 $T/pq_bench $B > $R/ncu.txt 2>/dev/null
N=$(grep -cE "^  mma_decode.*\((1|3), " $R/ncu.txt); echo "small launches before: $N"; grep -E "^  mma_decode|duration|inst_executed|registers" $R/ncu.txt | head -40
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
with open(R+"/sass.txt","w") as f:
    for r in body: f.write(f"{num(r[ex]):>12.0f}  {r[sc]}\n")
print("rows",len(body))
PY
gzip -k $R/source.csv; rm $R/source.csv
grep -E '^\| 8 \|' $R/pq.log | head
