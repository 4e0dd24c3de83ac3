#!/usr/bin/env bash
# The main job `make run` shows: the seed's flow on a default shape.
# gen writes the inputs and the golden; when `a2amm run` exists the fused
# run follows, then verify.
set -euo pipefail
build=${1:-build}
A2AMM=$build/a2amm
M=${M:-1024} K=${K:-4096} N=${N:-1024} R=${R:-2}
dir=${DIR:-runs/default}
echo "== a2amm gen $M $K $N $R --dir $dir"
"$A2AMM" gen "$M" "$K" "$N" "$R" --dir "$dir"
if "$A2AMM" run --help >/dev/null 2>&1; then
    echo "== a2amm run $M $K $N $R --dir $dir"
    "$A2AMM" run "$M" "$K" "$N" "$R" --dir "$dir"
    echo "== a2amm verify $M $N $R --dir $dir"
    "$A2AMM" verify "$M" "$N" "$R" --dir "$dir" | tail -n $((R + 4))
    echo "== a2amm run $M $K $N $R perf --dir $dir"
    "$A2AMM" run "$M" "$K" "$N" "$R" perf --dir "$dir"
fi
