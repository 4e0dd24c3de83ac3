#!/usr/bin/env bash
# The put path under stress: many one-row tiles, a ring one slot deep (every
# slot handed back before the next tile), more ranks than cores, so that
# ranks sleep and wake on every signal; repeated until thousands of tiles
# have gone through every slot. Every run must give the same bits as the
# direct path (which shares no slot and no signal): a missing fence or an
# early release shows as a changed row. The memory-ordering argument this
# tests is in docs/design.md ("Memory ordering").
. "$(dirname "$0")/lib.sh"

R=6 M=200 K=384 N=8 runs=${A2AMM_STRESS_RUNS:-60}
d="$SCRATCH/s"
"$A2AMM" gen $M $K $N $R --dir "$d" --seed 77 >/dev/null
"$A2AMM" run $M $K $N $R --dir "$d" >/dev/null
for r in $(seq 0 $((R - 1))); do cp "$d/output/$r/npu_out.bin" "$SCRATCH/direct.$r"; done
expect_ok "the direct path verifies" "$A2AMM" verify $M $N $R --dir "$d"
differ=0 failed=0
for i in $(seq $runs); do
    depth=$(( (i % 3) + 1 )) tile=$(( (i % 4) + 1 ))
    if ! "$A2AMM" run $M $K $N $R --dir "$d" --path put --depth $depth --tile-m $tile --timeout 30 >"$SCRATCH/out" 2>&1; then
        failed=$((failed + 1)); sed 's/^/    /' "$SCRATCH/out" | tail -5 >&2; continue
    fi
    for r in $(seq 0 $((R - 1))); do cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/direct.$r" || differ=$((differ + 1)); done
done
echo "test_stress.sh: $runs runs of $R ranks on $(nproc) cores, tiles of 1-4 rows through rings 1-3 deep"
check "every put-path run succeeded ($failed failed)" test $failed -eq 0
check "every put-path output is the direct path's bits ($differ rank outputs differ)" test $differ -eq 0
# epochs: perf mode repeats the fused run over the same ring; signals keep counting up
expect_ok "perf: 40 repetitions through a one-slot ring" "$A2AMM" run $M $K $N $R perf --iters 40 --dir "$d" \
    --path put --depth 1 --tile-m 2 --timeout 30
expect_output "perf: 40 repetitions" "40 repetitions"
finish
