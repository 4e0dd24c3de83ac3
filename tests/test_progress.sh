#!/usr/bin/env bash
# Progress of long work on stderr: on a terminal (a pseudo-terminal made by
# `script`) a line rewritten in place; gen shows it only there, while perf mode
# and the benchmarks write plain lines into a pipe or a file (the first at
# once, then at most one every few seconds); none with --quiet or --json.
. "$(dirname "$0")/lib.sh"
command -v script >/dev/null || { echo "SKIP: script (util-linux) is not installed"; exit 77; }
d="$SCRATCH/g"
# on a terminal: the line names the golden's rank, rewritten in place and cleared
script -qec "'$A2AMM' gen 512 1024 256 4 --dir '$d'" /dev/null >"$SCRATCH/tty" 2>&1
check "gen on a terminal: a progress line" grep -aq "golden of rank 3 of 4" "$SCRATCH/tty"
check "gen on a terminal: rewritten in place" grep -aq $'\r' "$SCRATCH/tty"
check "gen on a terminal: the result is still said" grep -aq "wrote " "$SCRATCH/tty"
script -qec "'$A2AMM' gen 512 1024 256 4 --dir '$d' --quiet" /dev/null >"$SCRATCH/tty-quiet" 2>&1
check "gen --quiet on a terminal: no progress line" bash -c "! grep -aq 'golden of rank' '$SCRATCH/tty-quiet'"
check "gen --quiet on a terminal: the result is still said" grep -aq "wrote " "$SCRATCH/tty-quiet"
# in a pipe and into a file: none
"$A2AMM" gen 512 1024 256 4 --dir "$d" 2>&1 | cat >"$SCRATCH/pipe"
check "gen in a pipe: no progress line" bash -c "! grep -aq 'golden of rank' '$SCRATCH/pipe'"
check "gen in a pipe: no carriage return" bash -c "! grep -aq $'\r' '$SCRATCH/pipe'"
"$A2AMM" gen 512 1024 256 4 --dir "$d" >"$SCRATCH/file" 2>"$SCRATCH/file-err"
check "gen into a file: nothing on stderr" test ! -s "$SCRATCH/file-err"
expect_ok "the data gen wrote verifies after a run" bash -c "'$A2AMM' run 512 1024 256 4 --dir '$d' && '$A2AMM' verify 512 256 4 --dir '$d'"

# a perf run: the repetitions done, on a terminal only (a small shape: the
# line is drawn at the start and every 0.1 s, so even a short run shows it)
p="$SCRATCH/p"
"$A2AMM" gen 256 512 128 2 --dir "$p" --quiet >/dev/null
perf="'$A2AMM' run 256 512 128 2 perf --iters 12 --dir '$p'"
# shows the end of what a run under `script` printed, when a check on it fails
tail_of() { tr '\r' '\n' <"$1" | tail -15 | sed 's/^/    /' >&2; }
script -qec "$perf" /dev/null >"$SCRATCH/perf-tty" 2>&1
echo "script exit $?" >>"$SCRATCH/perf-tty"
check "perf on a terminal: a progress line of the repetitions" grep -aq "perf repetition [0-9]* of 12" "$SCRATCH/perf-tty" || tail_of "$SCRATCH/perf-tty"
check "perf on a terminal: the table is still printed" grep -aq "Status: SUCCESS" "$SCRATCH/perf-tty" || tail_of "$SCRATCH/perf-tty"
script -qec "$perf --quiet" /dev/null >"$SCRATCH/perf-quiet" 2>&1
check "perf --quiet on a terminal: none" bash -c "! grep -aq 'perf repetition' '$SCRATCH/perf-quiet'"
check "perf --quiet on a terminal: the table" grep -aq "Status: SUCCESS" "$SCRATCH/perf-quiet" || tail_of "$SCRATCH/perf-quiet"
script -qec "$perf --json" /dev/null >"$SCRATCH/perf-json" 2>&1
check "perf --json on a terminal: none" bash -c "! grep -aq 'perf repetition' '$SCRATCH/perf-json'"
"$A2AMM" run 256 512 128 2 perf --iters 12 --dir "$p" 2>&1 | cat >"$SCRATCH/perf-pipe"
check "perf in a pipe: a plain progress line" grep -aq "^a2amm: perf repetition [0-9]* of 12 ([0-9]* s)$" "$SCRATCH/perf-pipe" || tail_of "$SCRATCH/perf-pipe"
check "perf in a pipe: no carriage return" bash -c "! grep -aq $'\r' '$SCRATCH/perf-pipe'"
check "perf in a pipe: the table" grep -aq "Status: SUCCESS" "$SCRATCH/perf-pipe" || tail_of "$SCRATCH/perf-pipe"
"$A2AMM" run 256 512 128 2 perf --iters 12 --dir "$p" >"$SCRATCH/perf-out" 2>"$SCRATCH/perf-err"
check "perf, stderr a file: progress lines there" grep -aq "^a2amm: perf repetition [0-9]* of 12 ([0-9]* s)$" "$SCRATCH/perf-err" || tail_of "$SCRATCH/perf-err"
check "perf, stderr a file: none on stdout" bash -c "! grep -aq 'perf repetition' '$SCRATCH/perf-out'"
for opt in --quiet --json; do
    "$A2AMM" run 256 512 128 2 perf --iters 3 --dir "$p" $opt >/dev/null 2>"$SCRATCH/perf-err"
    check "perf $opt, stderr a file: nothing there" test ! -s "$SCRATCH/perf-err"
done

# the benchmarks: the same line on a terminal, none with --json or --quiet
script -qec "'$A2AMM' bench gemm 64 64 64 --iters 3 --probe 0.02 --threads 1" /dev/null >"$SCRATCH/gemm-tty" 2>&1
check "bench gemm on a terminal: a progress line" grep -aq "a2amm bench gemm: repetition [0-9] of 3" "$SCRATCH/gemm-tty" || tail_of "$SCRATCH/gemm-tty"
check "bench gemm on a terminal: its table" grep -aq "OpenBLAS" "$SCRATCH/gemm-tty"
script -qec "'$A2AMM' bench gemm 64 64 64 --iters 3 --probe 0.02 --threads 1 --json" /dev/null >"$SCRATCH/gemm-json" 2>&1
check "bench gemm --json on a terminal: none" bash -c "! grep -aq 'repetition [0-9] of' '$SCRATCH/gemm-json'"
script -qec "'$A2AMM' bench gemm 64 64 64 --iters 3 --threads 1 --quiet" /dev/null >"$SCRATCH/gemm-quiet" 2>&1
check "bench gemm --quiet on a terminal: none" bash -c "! grep -aq 'repetition [0-9] of' '$SCRATCH/gemm-quiet'"
script -qec "'$A2AMM' bench op 64 256 32 2 --iters 4" /dev/null >"$SCRATCH/op-tty" 2>&1
check "bench op on a terminal: a progress line" grep -aq "perf repetition [0-9] of 4" "$SCRATCH/op-tty" || tail_of "$SCRATCH/op-tty"
"$A2AMM" bench op 64 256 32 2 --iters 4 >/dev/null 2>"$SCRATCH/op-err"
check "bench op, stderr a file: the inputs being written" grep -aq "^a2amm bench op: writing 2 ranks' inputs ([0-9]* s)$" "$SCRATCH/op-err" || tail_of "$SCRATCH/op-err"
check "bench op, stderr a file: the repetitions" grep -aq "^a2amm: perf repetition [0-9] of 4" "$SCRATCH/op-err" || tail_of "$SCRATCH/op-err"
check "bench op, stderr a file: no carriage return" bash -c "! grep -aq $'\r' '$SCRATCH/op-err'"
"$A2AMM" bench op 64 256 32 2 --iters 2 --quiet >/dev/null 2>"$SCRATCH/op-err"
check "bench op --quiet, stderr a file: nothing there" test ! -s "$SCRATCH/op-err"
"$A2AMM" bench gemm 64 64 64 --iters 3 --threads 1 >/dev/null 2>"$SCRATCH/gemm-err"
check "bench gemm, stderr a file: progress lines" grep -aq "^a2amm bench gemm: repetition [0-9] of 3" "$SCRATCH/gemm-err" || tail_of "$SCRATCH/gemm-err"
"$A2AMM" bench api 64 256 32 2 --iters 1 --rounds 2 >/dev/null 2>"$SCRATCH/api-err"
check "bench api, stderr a file: progress lines" grep -aq "^a2amm bench api: round [0-9] of 2" "$SCRATCH/api-err" || tail_of "$SCRATCH/api-err"
script -qec "'$A2AMM' bench api 64 256 32 2 --iters 1 --rounds 2" /dev/null >"$SCRATCH/api-tty" 2>&1
check "bench api on a terminal: a progress line of its rounds" grep -aq "bench api: round 2 of 2" "$SCRATCH/api-tty" || tail_of "$SCRATCH/api-tty"
script -qec "'$A2AMM' bench api 64 256 32 2 --iters 1 --rounds 2 --quiet" /dev/null >"$SCRATCH/api-quiet" 2>&1
check "bench api --quiet: none" bash -c "! grep -aq 'round 2 of 2' '$SCRATCH/api-quiet'"
finish
