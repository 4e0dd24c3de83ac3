#!/usr/bin/env bash
# The main job `make run` shows: the seed's flow on a default shape with 2
# ranks: gen (inputs + golden), run (precision), verify, then perf mode for
# the time and GFLOP/s; then the same for the reverse op (matmul-alltoall:
# the matmul, then the AllToAll of its column blocks), shorter. Override the
# shape with M= K= N= R= DIR= (N divisible by R for the reverse op).
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
