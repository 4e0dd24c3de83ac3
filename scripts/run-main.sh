#!/usr/bin/env bash
# The main job `make run` shows: the seed's flow on a default shape with 2
# ranks: gen (inputs + golden), run (precision), verify, then perf mode for
# the time and GFLOP/s; then the same for the reverse op (matmul-alltoall:
# the matmul, then the AllToAll of its column blocks), shorter. Override the
# shape with M= K= N= R= DIR= (N divisible by R for the reverse op); then the
# MoE op (expert parallelism) on a small layer (MT= MH= MI= ME= MK=).
set -euo pipefail
build=${1:-build}
A2AMM=$build/a2amm
M=${M:-1024} K=${K:-4096} N=${N:-1024} R=${R:-2}
dir=${DIR:-runs/default}
echo "== a2amm gen $M $K $N $R --dir $dir"
"$A2AMM" gen "$M" "$K" "$N" "$R" --dir "$dir"
echo
echo "== a2amm run $M $K $N $R precision --dir $dir"
"$A2AMM" run "$M" "$K" "$N" "$R" precision --dir "$dir"
echo
echo "== a2amm verify $M $N $R --dir $dir"
"$A2AMM" verify "$M" "$N" "$R" --dir "$dir" | tail -n $((R + 4))
echo
echo "== a2amm run $M $K $N $R perf --iters 5 --dir $dir"
"$A2AMM" run "$M" "$K" "$N" "$R" perf --iters 5 --dir "$dir"

rdir=$dir-reverse
echo
echo "== the reverse op: a2amm gen $M $K $N $R --op matmul-alltoall --dir $rdir (then run, verify, perf)"
"$A2AMM" gen "$M" "$K" "$N" "$R" --op matmul-alltoall --dir "$rdir" --quiet | head -n 2
"$A2AMM" run "$M" "$K" "$N" "$R" precision --dir "$rdir" | tail -n 2
"$A2AMM" verify "$M" "$N" "$R" --dir "$rdir" | tail -n 1
echo "== a2amm run $M $K $N $R perf --iters 5 --dir $rdir"
"$A2AMM" run "$M" "$K" "$N" "$R" perf --iters 5 --dir "$rdir" | sed -n '/min ms/,/exposed communication/p'

# the MoE op (expert parallelism): each token to the ranks of its top-K experts, SwiGLU experts, the
# weighted results back; a small layer so that gen's fp64 golden stays quick
mdir=$dir-moe
MT=${MT:-128} MH=${MH:-1024} MI=${MI:-512} ME=${ME:-16} MK=${MK:-4}
echo
echo "== the MoE op: a2amm gen $MT $MH $MI $R --op moe --experts $ME --topk $MK --route skewed --dir $mdir (then run, verify, perf)"
"$A2AMM" gen "$MT" "$MH" "$MI" "$R" --op moe --experts "$ME" --topk "$MK" --route skewed --dir "$mdir" --quiet | head -n 2
"$A2AMM" run "$MT" "$MH" "$MI" "$R" precision --dir "$mdir" | tail -n 2
"$A2AMM" verify "$MT" "$MH" "$MI" "$R" --dir "$mdir" | tail -n 1
echo "== a2amm run $MT $MH $MI $R perf --iters 5 --dir $mdir"
"$A2AMM" run "$MT" "$MH" "$MI" "$R" perf --iters 5 --dir "$mdir" | sed -n '/perf:/,$p'
