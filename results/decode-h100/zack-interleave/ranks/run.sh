#!/usr/bin/env bash
# bebb819 on another machine: decode steps against the kept rank (1.0, 0.75, 0.5, 0.25) over the
# issue's grid, twice, SDPA fp16 in the same call.
T=/tmp/kvt; R="$OUT"; mkdir -p $T
xz -dc .gpu/l2/zack_bench.xz > $T/zack_bench; chmod +x $T/*
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2; do
  timeout 200 $T/zack_bench --backend cuda --storage f16 --contexts 4096,16384,32768,65536 --batches 8,1 --runs 200 --prefill-contexts 4096 > $R/ranks-$i.log 2>&1
  echo "== run $i"; grep -E '^\| [01]\.' $R/ranks-$i.log | awk -F'|' '{printf "%s b%s %s=%s\n", $2+0, $4+0, $5+0, $9+0}' | paste -sd' ' | fold -w 200
done
grep -h "check vs" $R/ranks-1.log
timeout 100 python3 examples/bench/sdpa_anchor.py --contexts 4096,16384,32768,65536 --batches 1,8 --runs 200 --prefill-contexts 4096 > $R/sdpa.log 2>&1
echo "sdpa: $(grep -E '^\| [18] \|' $R/sdpa.log | awk -F'|' '{printf "%s/%s=%s ", $2+0, $3+0, $6+0}')"
cp $R/*.log $R/.. 2>/dev/null; cd $R && tar czf all.tgz *.log && rm -f *.log
