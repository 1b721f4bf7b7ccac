#!/usr/bin/env bash
# ZACK's copy plan from a shared table of targets (one head search per vector of a row, no
# division per copy): kernel and storage tests, the decode kernel at one round per cube (Nsight,
# warm caches: time and instructions), pipelined steps alternated with 9f995d9 (three runs each),
# SDPA fp16, the decode test under bounds validation.
H=.gpu/fix; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
export KVC_SHARED=$PWD/$H/shared
for t in zack_kernels_gpu zack_storage_gpu pq_kernels_gpu; do
  timeout 100 $T/$t --test-threads 1 --nocapture > $R/$t.txt 2>&1; echo "$t: $(grep -E 'test result' $R/$t.txt | cut -c1-60) $(grep -c panicked $R/$t.txt) panics"
done
grep -E "rising|case (3|5|9|11), f16" $R/zack_kernels_gpu.txt | head -5 | cut -c1-160
Z="--backend cuda --storage f16 --rank-fractions 0.5"
M="gpu__time_duration.sum,smsp__inst_executed.sum,smsp__warps_launched.sum"
for v in _base ""; do
  timeout 60 ncu --clock-control none --cache-control none --csv --metrics "$M" -k regex:"mma_decode" -c 20 $T/zack_bench$v $Z --contexts 256,4096 --batches 8 --runs 3 --prefill-contexts 64 > $R/ncu-zack$v.csv 2>/dev/null
done
python3 - $R <<'PY'
import csv,collections,statistics,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+"/ncu-*.csv")):
    rows=list(csv.reader(open(f))); h=next((i for i,r in enumerate(rows) if r and r[0]=="ID"),None)
    if h is None: print(os.path.basename(f),"no rows"); continue
    ix={k:i for i,k in enumerate(rows[h])}; d=collections.defaultdict(dict)
    for r in rows[h+1:]:
        if len(r)<len(rows[h]): continue
        d[r[ix["ID"]]][r[ix["Metric Name"]]]=float(r[ix["Metric Value"]].replace(",","")); d[r[ix["ID"]]]["grid"]=r[ix["Grid Size"]]
    g=collections.defaultdict(list)
    for v in d.values(): g[v["grid"]].append((v["gpu__time_duration.sum"]/1000, v["smsp__inst_executed.sum"]/v["smsp__warps_launched.sum"]))
    print(os.path.basename(f)," ".join(f"{k}: {statistics.median(x[0] for x in xs):.2f}us {statistics.median(x[1] for x in xs):.0f}instr/warp (n{len(xs)})" for k,xs in g.items() if len(xs)>=2))
PY
A="--contexts 4096,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
for i in 1 2 3; do for v in _base ""; do timeout 45 $T/zack_bench$v $Z $A > $R/zack$v-$i.log 2>&1; done; done
for i in 1 2; do for v in _base ""; do timeout 45 $T/pq_bench$v --backend cuda $A > $R/pq$v-$i.log 2>&1; done; done
timeout 50 python3 examples/bench/sdpa_anchor.py --contexts 4096,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
echo "== steps (batch/context=pipelined us)"
for f in $R/zack*.log; do echo "$(basename $f .log): $(grep -E '^\| 0\.' $f | awk -F'|' '{printf "%s/%s=%s ", $4+0, $5+0, $9+0}')"; done | tee $R/steps.txt
for f in $R/pq*.log; do echo "$(basename $f .log): $(grep -E '^\| [18] \|' $f | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $7+0}')"; done | tee -a $R/steps.txt
grep -h "check vs" $R/zack-1.log | head -2; grep -h "check" $R/pq-1.log | head -2
echo "== sdpa"; grep -E "^\| [18] \|" $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}'; echo
W=$(mktemp -d); printf '[compilation]\ncheck_mode = "validate"\n' > $W/cubecl.toml
(cd $W && timeout 30 $T/merge_gpu --ignored --exact bounds_validation_reports_a_merge_reading_past_its_buffers --nocapture > $R/control.log 2>&1)
echo "control reports (must be >0): $(grep -c VALIDATION $R/control.log)"
left=$((580 - SECONDS)); echo "validation time left: $left s"
(cd $W && timeout $left $T/zack_kernels_gpu --test-threads 1 --nocapture --exact decode_kernel_equals_the_reference_on_uneven_heads > $R/validate-decode.log 2>&1; echo "exit $?" >> $R/validate-decode.log)
echo "reports: $(grep -c VALIDATION $R/validate-decode.log)"; grep -E "test result|^exit|panicked" $R/validate-decode.log | cut -c1-80; grep -c "^case" $R/validate-decode.log
