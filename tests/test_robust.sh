#!/usr/bin/env bash
# Hang nowhere, leave nothing half-written, report what happened: stalled
# ranks with R = 1 and after the last barrier, a memory limit, kill -9 and
# SIGINT/SIGTERM at the launcher, a failed run's outputs, two commands on
# one folder, and what each rank is reported as (a fork that fails:
# test_nproc.sh; kill -9 at every phase: test_kill.sh). Bounds in seconds
# are generous for a loaded 2-core machine; each is far below the hang it
# rules out.
. "$(dirname "$0")/lib.sh"

d="$SCRATCH/d"
"$A2AMM" gen 256 256 64 4 --dir "$d" >/dev/null
"$A2AMM" run 256 256 64 4 --dir "$d" >/dev/null
for r in 0 1 2 3; do cp "$d/output/$r/npu_out.bin" "$SCRATCH/good.$r"; done
outputs_untouched() {
    local r
    for r in 0 1 2 3; do cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/good.$r" || return 1; done
}
no_temporaries() { test -z "$(find "$d" -name '*.tmp.*')"; }
no_children_of() { test -z "$(pgrep -P "$1")"; }

# --- R = 1, a stalled rank: the run ends at its stall watch, naming it
d1="$SCRATCH/r1"; "$A2AMM" gen 64 256 32 1 --dir "$d1" >/dev/null
start=$SECONDS
A2AMM_FAULT_RANK=0 A2AMM_FAULT=stall timeout 60 "$A2AMM" run 64 256 32 1 --dir "$d1" --timeout 1 >"$SCRATCH/out" 2>&1
rc=$?
check "R=1 stall: ends, non-zero (not the 60 s guard: rc $rc)" test $rc -ne 0 -a $rc -ne 124
check "R=1 stall: within 20 s" test $((SECONDS - start)) -le 20
expect_output "R=1 stall: names the silent rank" "rank 0 (pid"
expect_output "R=1 stall: says it showed no sign of life" "showed no sign of life"

# --- R = 1 stopped from outside (kill -STOP): the same
"$A2AMM" run 64 256 32 1 perf --iters 100000 --dir "$d1" --timeout 1 >"$SCRATCH/stop" 2>&1 &
launcher=$!
for _ in $(seq 100); do kid=$(pgrep -P $launcher); [ -n "$kid" ] && break; sleep 0.05; done
sleep 0.3; kill -STOP $kid 2>/dev/null
start=$SECONDS
timeout 60 tail --pid=$launcher -f /dev/null; wait $launcher; rc=$?
check "R=1 kill -STOP: the launcher ends non-zero" test $rc -ne 0
check "R=1 kill -STOP: within 20 s" test $((SECONDS - start)) -le 20
check "R=1 kill -STOP: the stopped rank is named" grep -q "rank 0 (pid $kid) showed no sign of life" "$SCRATCH/stop"
check "R=1 kill -STOP: the rank process is gone" bash -c "! kill -0 $kid 2>/dev/null"

# --- R = 2, a rank stalled after the last barrier: the other finishes, the run still ends
d2="$SCRATCH/r2"; "$A2AMM" gen 64 256 32 2 --dir "$d2" >/dev/null
start=$SECONDS
A2AMM_FAULT_RANK=1 A2AMM_FAULT=stall-end timeout 60 "$A2AMM" run 64 256 32 2 --dir "$d2" --timeout 2 >"$SCRATCH/out" 2>&1
rc=$?
check "stall after the last barrier: ends non-zero (rc $rc)" test $rc -ne 0 -a $rc -ne 124
check "stall after the last barrier: within 25 s" test $((SECONDS - start)) -le 25
expect_output "stall after the last barrier: names rank 1" "rank 1 (pid"
expect_output "stall after the last barrier: rank 0 was ok" "[Rank 0] ok"
check "stall after the last barrier: no output committed" test ! -e "$d2/output/0/npu_out.bin"
check "stall after the last barrier: no temporaries" test -z "$(find "$d2" -name '*.tmp.*')"

# --- a failed run changes no output: failures before, during and after the writes
for fault in error kill exit stall-end; do
    A2AMM_FAULT_RANK=2 A2AMM_FAULT=$fault "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 --timeout 2 >"$SCRATCH/out" 2>&1
    check "$fault: the run fails" test $? -ne 0
    check "$fault: every output as it was" outputs_untouched
    check "$fault: no temporary left" no_temporaries
done
expect_ok "after the failures, a run succeeds" "$A2AMM" run 256 256 64 4 --dir "$d"
check "and writes the same bits" outputs_untouched

# --- what each rank is reported as
A2AMM_FAULT_RANK=2 A2AMM_FAULT=exit "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 >"$SCRATCH/out" 2>&1
expect_output "exit: the faulty rank is the one that failed" "[Rank 2] FAILED: exited with code 3"
expect_output "exit: the others stopped for it" "[Rank 0] stopped: another rank failed"
check "exit: rank 2 is not reported as stopped by another" bash -c "! grep -q 'Rank 2\] stopped' '$SCRATCH/out'"
A2AMM_FAULT_RANK=2 A2AMM_FAULT=error "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 >"$SCRATCH/out" 2>&1
check "no doubled prefix" bash -c "! grep -q 'rank 2: rank 2' '$SCRATCH/out'"
expect_output "error: the message names rank 2 once" "error: rank 2: injected error"
# --- SIGINT / SIGTERM at the launcher: ranks stopped, nothing written, 130 / 143
for sig in INT TERM; do
    A2AMM_FAULT_RANK=1 A2AMM_FAULT=stall "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 >"$SCRATCH/sig" 2>&1 &
    launcher=$!
    for _ in $(seq 100); do [ "$(rank_pids $launcher | wc -l)" -eq 4 ] && break; sleep 0.05; done
    kids=$(pgrep -P $launcher) # the ranks and the guard
    # (the command runs itself again once, without OpenBLAS threads: by /proc/self/exe the kernel named
    # every process of the run "exe", which pgrep/pkill a2amm did not find)
    check "SIG$sig: the launcher and its ranks are named a2amm" \
        bash -c "for p in $launcher $(rank_pids $launcher | tr '\n' ' '); do [ \"\$(cat /proc/\$p/comm)\" = a2amm ] || exit 1; done"
    sleep 0.5
    kill -$sig $launcher
    wait $launcher; rc=$?
    want=$([ $sig = INT ] && echo 130 || echo 143)
    check "SIG$sig: exit $want (got $rc)" test $rc -eq $want
    check "SIG$sig: says it was interrupted" grep -q "interrupted by signal" "$SCRATCH/sig"
    check "SIG$sig: each rank reported as it was (in the call, waiting for rank 1), none at the end barrier" \
        bash -c "grep -q 'Rank 0\] stopped: another rank failed (it was: a2amm_op_run call' '$SCRATCH/sig' && ! grep -q 'end barrier' '$SCRATCH/sig'"
    for k in $kids; do check "SIG$sig: rank pid $k gone" bash -c "! kill -0 $k 2>/dev/null"; done
    check "SIG$sig: outputs untouched" outputs_untouched
    check "SIG$sig: no temporary left" no_temporaries
done

# --- kill -9 of the launcher: its ranks and its guard end; the next run removes
# what a writer killed with no guard left (test_kill.sh: kills at every phase)
A2AMM_FAULT_RANK=1 A2AMM_FAULT=stall "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 100); do [ "$(rank_pids $launcher | wc -l)" -eq 4 ] && break; sleep 0.05; done
kids=$(pgrep -P $launcher); sleep 0.3 # the ranks and the guard (it holds the folder's lock until it is done)
kill -9 $launcher; wait $launcher 2>/dev/null
# gone (or a zombie) within 10 s: they notice the launcher's death themselves
not_running() { st=$(ps -o stat= -p "$1" 2>/dev/null); [ -z "$st" ] || [ "${st#Z}" != "$st" ]; }
for k in $kids; do
    for _ in $(seq 100); do not_running "$k" && break; sleep 0.1; done
    check "launcher kill -9: pid $k (a rank or the guard) not running" not_running "$k"
done
check "launcher kill -9: outputs untouched" outputs_untouched
printf 'x' > "$d/output/3/npu_out.bin.tmp.999999"   # as a writer killed between naming and renaming leaves
printf 'x' > "$d/input/0/input_a.bin.tmp.999998"
expect_ok "the next run" "$A2AMM" run 256 256 64 4 --dir "$d"
# (the 2 made here: the guard left nothing)
check "the next run says it removed what was left" grep -q "removed 2 temporary files" "$SCRATCH/out"
check "no temporary left after it" no_temporaries

# --- one gen or run at a time per folder
A2AMM_FAULT_RANK=0 A2AMM_FAULT=stall "$A2AMM" run 256 256 64 4 --dir "$d" --timeout 30 >/dev/null 2>&1 &
holder=$!
for _ in $(seq 100); do [ "$(rank_pids $holder | wc -l)" -eq 4 ] && break; sleep 0.05; done
expect_fail "a second run on a busy folder is refused" "is in use by another a2amm gen or run" "$A2AMM" run 256 256 64 4 --dir "$d"
expect_fail "a gen on a busy folder is refused" "is in use by another a2amm gen or run" "$A2AMM" gen 256 256 64 4 --dir "$d"
kill -INT $holder; wait $holder
expect_ok "once it is gone, the folder is free" "$A2AMM" run 256 256 64 4 --dir "$d"
check "two gens at once never mix: the inputs are one seed's" bash -c "
    '$A2AMM' gen 512 1024 256 2 --dir '$SCRATCH/g' --seed 1 >/dev/null 2>&1 & a=\$!
    '$A2AMM' gen 512 1024 256 2 --dir '$SCRATCH/g' --seed 2 >/dev/null 2>&1; b=\$?
    wait \$a; a=\$?
    [ \$a -eq 0 ] || [ \$b -eq 0 ] || exit 1
    seed=\$(sed -n 's/^seed //p' '$SCRATCH/g/input/a2amm-meta.txt')
    '$A2AMM' gen 512 1024 256 2 --dir '$SCRATCH/g1' --seed \$seed --no-golden >/dev/null
    for r in 0 1; do cmp -s '$SCRATCH/g/input/'\$r/input_a.bin '$SCRATCH/g1/input/'\$r/input_a.bin || exit 1; done"

# --- bench op stopped with SIGINT: its scratch folder is removed
"$A2AMM" bench op 256 256 64 4 --iters 100000 >/dev/null 2>&1 &
b=$!
for _ in $(seq 200); do [ -n "$(ls -A "$TMPDIR")" ] && [ "$(pgrep -P $b | wc -l)" -ge 1 ] && break; sleep 0.05; done
sleep 0.5
kill -INT $b; wait $b; rc=$?
check "bench op SIGINT: exit 130 (got $rc)" test $rc -eq 130
check "bench op SIGINT: no scratch folder left" test -z "$(ls -A "$TMPDIR")"

# --- run --json in precision mode: the run as one JSON object
"$A2AMM" run 256 256 64 4 --dir "$d" --json >"$SCRATCH/j" 2>"$SCRATCH/je"
check "precision --json: one object with the run" python3 -c "
import json; d = json.load(open('$SCRATCH/j'))
assert d['mode'] == 'precision' and d['status'] == 'SUCCESS' and d['R'] == 4
assert [r['status'] for r in d['ranks']] == ['ok'] * 4 and len(d['outputs']) == 4 and d['wall_s'] > 0"
A2AMM_FAULT_RANK=3 A2AMM_FAULT=error "$A2AMM" run 256 256 64 4 --dir "$d" --tile-m 32 --json >"$SCRATCH/j" 2>/dev/null
check "precision --json of a failure: the status and who failed" python3 -c "
import json; d = json.load(open('$SCRATCH/j'))
assert d['status'] == 'FAILURE' and 'rank 3' in d['error'] and d['ranks'][3]['status'] == 'failed' and d['outputs'] == []"
finish
