#!/usr/bin/env bash
# HACK tensor-core decode: tests (plain, then bounds-validated), steps of the base (scalar kernel)
# and new builds alternated, SDPA fp16 anchor, Nsight of the new build's kernels, CUDA source.
H=.gpu/h; T=/tmp/kvt; R=/tmp/res; mkdir -p $T $R "$OUT"
for f in $H/*.xz; do xz -dc "$f" > $T/$(basename "$f" .xz); chmod +x $T/$(basename "$f" .xz); done
timeout 200 $T/kernels_gpu --test-threads 1 --nocapture > $R/tests.txt 2>&1
mkdir -p $R/src && (cd $R/src && printf '[compilation.logger]\nlevel = "full"\nfile = "%s/src/kernels.log"\n' $R > cubecl.toml && timeout 60 $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096 --batches 1 --runs 2 --prefill-contexts 64 > run.log 2>&1)
C="--backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 4096,32768 --batches 1,8 --runs 200 --prefill-contexts 64"
for i in 1 2; do for bin in hack_bench_base hack_bench; do
  timeout 100 $T/$bin $C > $R/wall-$bin-$i.log 2>&1
done; done
timeout 100 $T/hack_bench --backend cuda --config bits=2,pi=128,round=stochastic,seed=0 --contexts 32768 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/wall-pi128.log 2>&1
python3 examples/bench/sdpa_anchor.py --contexts 4096,32768 --batches 1,8 --runs 200 --prefill-contexts 64 > $R/sdpa.log 2>&1
M="--clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_global_ld.sum,smsp__sass_inst_executed_op_local_ld.sum --csv"
timeout 90 ncu $M -k regex:"mma_decode|merge|query" $T/hack_bench --backend cuda --config bits=2,pi=64,round=stochastic,seed=0 --contexts 32768 --batches 1,8 --runs 2 --prefill-contexts 64 > $R/ncu.csv 2> $R/ncu.err
timeout 200 bash examples/bench/validate_bounds.sh $R/validate $T/merge_gpu $T/kernels_gpu > $R/validate.txt 2>&1
(cd $R && tar cf "$OUT/all.tar" .)
echo "== tests"; grep -E "test result|panicked|FAILED|failed|^case" $R/tests.txt | head -20
for i in 1 2; do for bin in hack_bench_base hack_bench; do echo "== $bin $i"; grep -E "^\| [18] \|" $R/wall-$bin-$i.log | cut -c1-100; grep -i "panick\|error" $R/wall-$bin-$i.log | head -3; done; done
echo "== pi128"; grep -E "^check decode|^\| [18] \|" $R/wall-pi128.log | cut -c1-100
echo "== sdpa"; grep -E "^\| [18] " $R/sdpa.log | head -6
echo "== ncu"; python3 examples/bench/ncu_summary.py $R/ncu.csv --name-width 12 2>&1 | grep -E "kernel|mma_decode" | head -12; tail -2 $R/ncu.err
echo "== sass"; which nvcc cuobjdump; python3 $H/sass.py $R/src/kernels.log $R/src 2>&1 | tail -12
echo "== validate"; tail -3 $R/validate.txt
