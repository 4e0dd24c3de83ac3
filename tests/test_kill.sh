#!/usr/bin/env bash
# kill -9 at every phase of a run and of gen (the launcher, a rank, the whole
# process group, the launcher and its guard), each phase reached through an
# A2AMM_FAULT=pause-<phase> hook, then kills at random moments of a clean
# run. After each: within 10 s no process of the run is left, no temporary
# file or commit marker is anywhere, the outputs are all the old bits or all
# the new (never a mix), nothing of ours is in /dev/shm, and the next run
# succeeds.
. "$(dirname "$0")/lib.sh"

M=2048 K=1024 N=512 R=4
d="$SCRATCH/d"
trace="$SCRATCH/trace/t.json"
mkdir -p "$SCRATCH/trace"
"$A2AMM" gen $M $K $N $R --dir "$d" --no-golden >/dev/null
"$A2AMM" run $M $K $N $R --dir "$d" >/dev/null
for r in 0 1 2 3; do
    cp "$d/output/$r/npu_out.bin" "$SCRATCH/new.$r"
    yes "old bits of rank $r" | head -c $((M * N * 2)) >"$SCRATCH/old.$r"
done

set_old() { local r; for r in 0 1 2 3; do cp "$SCRATCH/old.$r" "$d/output/$r/npu_out.bin"; done; }
outputs_are() { local r; for r in 0 1 2 3; do cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/$1.$r" || return 1; done; }
old_or_new() { outputs_are old || outputs_are new; }
# what a killed writer could leave: temporary names, a commit marker, trace parts
leftovers() { find "$1" "$SCRATCH/trace" \( -name '*.tmp.*' -o -name '*.commit.*' -o -name 't.json.rank*' \) 2>/dev/null; }
nothing_left_in() { test -z "$(leftovers "$1")"; }
no_shm() { test -z "$(ls /dev/shm 2>/dev/null | grep -i a2amm)"; }
not_running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null); [ -z "$st" ] || [ "${st#Z}" != "$st" ]; }
all_gone() { local p; for p in "$@"; do not_running "$p" || return 1; done; }
# gone within 10 s: the run's processes notice their launcher's death themselves
gone_soon() { local _; for _ in $(seq 100); do all_gone "$@" && return 0; sleep 0.1; done; all_gone "$@"; }

# paused PHASE CMD...: starts CMD with A2AMM_FAULT=pause-PHASE (and what the
# caller exported) until it says it paused; $pid is CMD's process, $paused
# the one that paused, $procs CMD and every child it has then.
paused() {
    local phase=$1 _; shift
    : >"$SCRATCH/log" # here, not only in the background, where it may come after the first look
    A2AMM_FAULT=pause-$phase "$@" >"$SCRATCH/log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do grep -q "paused at $phase " "$SCRATCH/log" && break; sleep 0.05; done
    paused=$(sed -n "s/.*paused at $phase (pid \([0-9]*\)).*/\1/p" "$SCRATCH/log")
    procs="$pid $(pgrep -P $pid | tr '\n' ' ')"
    check "$phase: reached (the process says so)" test -n "$paused" || {
        sed 's/^/    /' "$SCRATCH/log" >&2
        ps -o pid,ppid,stat,wchan:24,comm -p $pid --ppid $pid >&2
    }
}
guard_of() { pgrep -P "$1" -x a2amm-guard; }

# after_kill WHAT EXPECT: the checks after every kill; EXPECT is old or new
after_kill() {
    local what=$1 expect=$2
    wait $pid 2>/dev/null
    check "$what: every process of the run gone within 10 s ($procs)" gone_soon $procs
    check "$what: no temporary file, marker or trace part left" nothing_left_in "$d" || leftovers "$d" >&2
    check "$what: the outputs are all the $expect bits" outputs_are "$expect"
    check "$what: nothing in /dev/shm" no_shm
}
# the next run succeeds and finds nothing to put right (the guard did)
next_run_clean() {
    expect_ok "$1: the next run" "$A2AMM" run $M $K $N $R --dir "$d"
    check "$1: the next run found nothing to put right" bash -c "! grep -Eq 'removed|completed' '$SCRATCH/out'"
    check "$1: and wrote the new bits" outputs_are new
}

# --- the launcher killed at each of its phases, and while a rank is at each of its
for phase in launch before-commit commit-0 commit-1 after-commit load compute staged; do
    set_old
    case $phase in
    load | compute | staged) export A2AMM_FAULT_RANK=2 ;;
    *) unset A2AMM_FAULT_RANK ;;
    esac
    paused $phase "$A2AMM" run $M $K $N $R --dir "$d" --tile-m 256 --trace "$trace"
    unset A2AMM_FAULT_RANK
    kill -9 $pid
    case $phase in commit-* | after-commit) want=new ;; *) want=old ;; esac
    after_kill "launcher killed at $phase" $want
    case $phase in
    before-commit) check "before-commit: the guard says it removed the 4 staged outputs" \
        grep -q "its guard removed 4 staged files" "$SCRATCH/log" ;;
    commit-1) check "commit-1: the guard says it completed the set" \
        grep -q "its guard completed the set (3 files)" "$SCRATCH/log" ;;
    esac
    next_run_clean "launcher killed at $phase"
done

# --- the whole process group killed: the guard, in a group of its own, cleans up
for phase in staged commit-1; do
    set_old
    export A2AMM_FAULT_RANK=1
    paused $phase setsid "$A2AMM" run $M $K $N $R --dir "$d"
    unset A2AMM_FAULT_RANK
    check "group kill at $phase: the launcher leads its own group" test "$(ps -o pgid= -p $pid | tr -d ' ')" = "$pid"
    kill -9 -- -$pid
    after_kill "group kill at $phase" $([ $phase = staged ] && echo old || echo new)
    next_run_clean "group kill at $phase"
done

# --- a run started at once after a kill -9: the guard may still hold the
# folder's lock for a moment; the run waits for it instead of being refused
set_old
paused commit-1 "$A2AMM" run $M $K $N $R --dir "$d"
{ kill -9 $pid; wait $pid; } 2>/dev/null # the launcher is gone; its guard may not be yet
expect_ok "a run started at once after a kill -9" "$A2AMM" run $M $K $N $R --dir "$d"
check "and it wrote the new bits" outputs_are new
check "nothing left" nothing_left_in "$d"
flock "$d" sleep 0.5 &
holder=$!
for _ in $(seq 200); do flock -n "$d" true || break; sleep 0.01; done
expect_ok "a run while the lock is held for 0.5 s more waits for it" "$A2AMM" run $M $K $N $R --dir "$d"
wait $holder

# --- a rank killed after it staged its output: the launcher fails the run, changes nothing
set_old
A2AMM_FAULT_RANK=2 paused staged "$A2AMM" run $M $K $N $R --dir "$d"
kill -9 $paused
wait $pid; rc=$?
check "rank killed after staging: the run fails (rc $rc)" test $rc -ne 0
check "rank killed after staging: named" grep -q "rank 2 (pid $paused) was killed by signal 9" "$SCRATCH/log"
after_kill "rank killed after staging" old
next_run_clean "rank killed after staging"

# --- the guard killed alone: the run goes on (resumed) and commits
set_old
paused before-commit "$A2AMM" run $M $K $N $R --dir "$d"
guard=$(guard_of $pid)
kill -9 $guard
kill -USR1 $pid # resumes a pause
wait $pid; rc=$?
check "guard killed: the run still succeeds (rc $rc)" test $rc -eq 0
check "guard killed: gone" gone_soon $procs
check "guard killed: the new bits" outputs_are new
check "guard killed: nothing left" nothing_left_in "$d"

# --- the launcher and its guard killed in the middle of the commit: a mix, which
# verify refuses and the next run completes
set_old
paused commit-1 "$A2AMM" run $M $K $N $R --dir "$d"
guard=$(guard_of $pid)
kill -9 $guard $pid
wait $pid 2>/dev/null
check "launcher and guard killed mid-commit: gone" gone_soon $procs
check "launcher and guard killed mid-commit: the marker is left" test -n "$(find "$d/output" -name 'npu_out.bin.commit.*')"
expect_fail "verify refuses a half-committed set" "may be a mix of two runs" "$A2AMM" verify $M $N $R --dir "$d"
expect_ok "the next run" "$A2AMM" run $M $K $N $R --dir "$d"
expect_output "the next run says it completed the commit" "completed putting in place the outputs of a run that was killed while doing so (3 files)"
check "then the new bits" outputs_are new
check "then nothing left" nothing_left_in "$d"

# --- gen killed at each phase: no temporary file, no meta file (not a complete
# set), no process; the next gen succeeds
g="$SCRATCH/g"
"$A2AMM" gen 512 1024 256 4 --dir "$g" >/dev/null
for phase in gen-inputs gen-golden gen-meta; do
    paused $phase "$A2AMM" gen 512 1024 256 4 --dir "$g" --seed 2
    kill -9 $pid
    wait $pid 2>/dev/null
    check "gen killed at $phase: gone within 10 s" gone_soon $procs
    check "gen killed at $phase: no temporary file" nothing_left_in "$g"
    check "gen killed at $phase: no meta file" test ! -e "$g/input/a2amm-meta.txt"
    check "gen killed at $phase: the guard says the set is incomplete" grep -q "not a complete set" "$SCRATCH/log"
    expect_ok "gen killed at $phase: the next gen" "$A2AMM" gen 512 1024 256 4 --dir "$g" --seed 2
    check "gen killed at $phase: the next gen found nothing to remove" bash -c "! grep -q removed '$SCRATCH/out'"
done

# --- kill -9 at random moments of a clean run, and of a clean gen (the report:
# 10 kills at fractions of a run's time). The launcher is stopped before it is
# killed, so that its children can be listed (it forks no more); to it that is
# the same as being killed at that moment.
kill_at() { # kill_at SECONDS CMD...: the kill and the checks but the outputs'
    local at=$1 _; shift
    "$@" >"$SCRATCH/log" 2>&1 &
    pid=$!
    sleep "$at"
    kill -STOP $pid 2>/dev/null
    for _ in $(seq 100); do st=$(ps -o stat= -p $pid 2>/dev/null); [ "${st#T}" != "$st" ] || [ -z "$st" ] || [ "${st#Z}" != "$st" ] && break; sleep 0.01; done
    procs="$pid $(pgrep -P $pid | tr '\n' ' ')"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
}
ms_of() { local s; s=$(date +%s%N); "$@" >/dev/null 2>&1; echo $((($(date +%s%N) - s) / 1000000)); }
run_ms=$(ms_of "$A2AMM" run $M $K $N $R --dir "$d")
for i in 0 1 2 3 4 5 6 7 8 9; do
    set_old
    at=$(awk -v t=$run_ms -v i=$i -v j=$RANDOM 'BEGIN { printf "%.4f", t * (i + j / 32768) / 10 / 1000 }')
    kill_at "$at" "$A2AMM" run $M $K $N $R --dir "$d"
    what="run killed at ${at}s of ${run_ms} ms"
    check "$what: every process gone within 10 s ($procs)" gone_soon $procs
    check "$what: nothing left" nothing_left_in "$d" || leftovers "$d" >&2
    check "$what: all old or all new bits" old_or_new
    check "$what: nothing in /dev/shm" no_shm
done
next_run_clean "after the random kills"
gen_ms=$(ms_of "$A2AMM" gen 512 1024 256 4 --dir "$g" --seed 2)
for i in 0 1 2 3 4; do
    at=$(awk -v t=$gen_ms -v i=$i -v j=$RANDOM 'BEGIN { printf "%.4f", t * (i + j / 32768) / 5 / 1000 }')
    kill_at "$at" "$A2AMM" gen 512 1024 256 4 --dir "$g" --seed 2
    check "gen killed at ${at}s of ${gen_ms} ms: gone within 10 s" gone_soon $procs
    check "gen killed at ${at}s of ${gen_ms} ms: nothing left" nothing_left_in "$g" || leftovers "$g" >&2
done
expect_ok "after the random kills, gen" "$A2AMM" gen 512 1024 256 4 --dir "$g" --seed 2
finish
