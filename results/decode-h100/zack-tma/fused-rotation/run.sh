#!/usr/bin/env bash
# The TMA kernel forming its reduced queries itself (no rotation kernel): tests, bounds validation,
# the issue's grid alternated with a4bfcf5 (TMA + rotation kernel) and c0a6c8c (wmma), SDPA fp16.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/t1/zack_bench_base.xz > $T/zack_bench_base; xz -dc .gpu/t6/zack_bench.xz > $T/zack_bench_tma; xz -dc .gpu/c6/merge_gpu.xz > $T/merge_gpu
for f in .gpu/t7/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; done; chmod +x $T/*
export KVC_SHARED=$PWD/.gpu/t7/shared
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 $T/zack_kernels_gpu --test-threads 1 --nocapture > $R/zack_kernels_gpu.txt 2>&1; echo "kernels: $(grep -E 'test result' $R/zack_kernels_gpu.txt | cut -c1-60) $(grep -c panicked $R/zack_kernels_gpu.txt) panics"
grep -E "case (5|10|11|12|15), f16|TMA case|rising" $R/zack_kernels_gpu.txt | cut -c1-120
Z="--backend cuda --storage f16 --rank-fractions 0.5"
A="--contexts 4096,16384,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2; do for v in _base _tma ""; do timeout 60 $T/zack_bench$v $Z $A > $R/zack$v-$i.log 2>&1; done; done
timeout 60 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context=pipelined us)"
for f in $R/zack*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done | tee $R/steps.txt
grep -h "check vs" $R/zack-1.log | head -2
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
M="gpu__time_duration.sum,dram__bytes_read.sum"
timeout 100 ncu --clock-control none --cache-control none --csv --metrics "$M" -k regex:"tma_decode|merge" -c 30 $T/zack_bench $Z --contexts 32768 --batches 8 --runs 10 --prefill-contexts 64 > $R/ncu.csv 2>/dev/null
python3 - $R/ncu.csv <<'PY'
import csv,collections,statistics,sys
rows=list(csv.reader(open(sys.argv[1]))); h=next((i for i,r in enumerate(rows) if r and r[0]=="ID"),None)
if h is None: print("ncu: no rows"); sys.exit()
ix={k:i for i,k in enumerate(rows[h])}; d=collections.defaultdict(dict)
for r in rows[h+1:]:
    if len(r)<len(rows[h]): continue
    d[r[ix["ID"]]][r[ix["Metric Name"]]]=float(r[ix["Metric Value"]].replace(",","")); d[r[ix["ID"]]]["k"]=(r[ix["Kernel Name"]][:30],r[ix["Grid Size"]])
g=collections.defaultdict(list)
for v in d.values(): g[v["k"]].append(v["gpu__time_duration.sum"]/1e3)
for k,xs in g.items():
    if len(xs)>=3: print("ncu", k, f"{statistics.median(xs):.2f} us n={len(xs)}")
PY
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((575 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture decode > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -cE "^case|TMA case|rising" $R/validate-decode.log
cd $R && tar czf all.tgz *.txt *.log *.csv && rm -f *.log
