#!/usr/bin/env bash
# HEAD 1df889f's kernels (merge 4 splits a round) against the merge of f179a57 (one split a
# round, KVC_EXP_MERGE1 of this build's env switch) in all three schemes' steps, alternated; HACK
# at HEAD three more times beside SDPA fp16.
H=.gpu/merge; T=/tmp/kvt; R="$OUT"; mkdir -p $T
for f in $H/*.xz; do n=$(basename $f .xz); xz -dc $f > $T/$n; chmod +x $T/$n; done
HC="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64"
PC="--backend cuda --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
ZC="--backend cuda --storage f16 --rank-fractions 0.5 --contexts 32768,65536 --batches 8,1 --runs 200 --prefill-contexts 64"
row() { grep -E '^\| [18] \| [0-9]' $1 | awk -F'|' '{printf "%s/%s:%s ", $2,$3,$7}'; }
keep() { echo "== $2" >> $R/$1.log; cat $T/last.log >> $R/$1.log; }
for i in 1 2; do for v in new old; do E=KVC_EXP_NONE=1; [ $v = old ] && E=KVC_EXP_MERGE1=1
  env $E timeout 80 $T/pq_bench $PC > $T/last.log 2>&1; keep pq pq-$v-$i; echo "pq-$v-$i $(row $T/last.log)"
  env $E timeout 80 $T/zack_bench $ZC > $T/last.log 2>&1; keep zack zack-$v-$i; echo "zack-$v-$i $(row $T/last.log)"
done; done
for i in 1 2 3; do timeout 80 $T/hack_bench $HC > $T/last.log 2>&1; keep hack hack-$i; echo "hack-$i $(row $T/last.log) $(grep -c 'check vs' $T/last.log) checks"; done
python3 examples/bench/sdpa_anchor.py --contexts 32768,65536 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1; grep -E '^\| [18] \| [0-9]|copy' $R/sdpa.log | head -8
