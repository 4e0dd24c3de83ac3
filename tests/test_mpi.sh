#!/usr/bin/env bash
# The operator over Open MPI across "hosts" that are network namespaces of
# this machine (scripts/netns-hosts.sh), ranks launched across them by
# mpirun: results bit-identical to the shared-memory transport on the same
# inputs (fused and unfused, on the put path: the direct path is refused);
# a rank killed on one host stops the job within seconds, naming it; nothing
# is left running in any namespace, and the namespaces are gone after, also
# when a check fails; misuse through the API (tests/mpi_misuse.c) is an
# error returned on every rank, never an abort or a print by the library.
# Skipped, saying why, where namespaces cannot be made.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
hosts="$here/../scripts/netns-hosts.sh"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "making network namespaces needs root"
command -v mpirun >/dev/null || skip "mpirun is not installed (make deps installs openmpi-bin)"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"

# our own names and subnet: unique to this run, so two suites never meet
P=a2t$$
NET=10.78.$(( $$ % 200 + 20 ))
cleanup() { bash "$hosts" down "$P" >/dev/null 2>&1; rm -rf "$SCRATCH"; }
trap cleanup EXIT
bash "$hosts" up "$P" 4 "$NET" >"$SCRATCH/up" 2>&1 || { cat "$SCRATCH/up"; skip "cannot make network namespaces here"; }

# mpirun_hosts NP HOSTLIST ARGS...: mpirun in the first host's namespace, ranks across HOSTLIST, TCP on our subnet only
mpirun_hosts() {
    local np=$1 list=$2; shift 2
    timeout 120 bash "$hosts" exec "$P-h1" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" --host "$list" \
        --mca plm_rsh_agent "/tmp/$P-agent" --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" \
        --mca oob_tcp_if_include "$NET.0/24" -x A2AMM_FAULT -x A2AMM_FAULT_RANK -x ASAN_OPTIONS "$@" </dev/null
}
export A2AMM_FAULT="" A2AMM_FAULT_RANK="" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"

# without mpirun: says how to launch it
d="$SCRATCH/d2"
"$A2AMM" gen 256 512 64 2 --dir "$d" >/dev/null
expect_fail "no mpirun: says how to launch" "mpirun --allow-run-as-root --oversubscribe -np 2 a2amm run" "$A2AMM" run 256 512 64 2 --dir "$d" --transport mpi
"$A2AMM" gen 16 64 32 2 --op moe --experts 4 --topk 2 --dir "$SCRATCH/moe-alone" >/dev/null
expect_fail "the MoE op without mpirun: says how to launch, as root too" \
    "mpirun --allow-run-as-root --oversubscribe -np 2 a2amm run 16 64 32 2 --op moe --transport mpi" \
    "$A2AMM" run 16 64 32 2 --op moe --dir "$SCRATCH/moe-alone" --transport mpi

for R in 2 4; do
    list=$(seq -s, -f "$P-h%g" "$R")
    d="$SCRATCH/d$R"
    [ -d "$d" ] || "$A2AMM" gen 256 512 64 "$R" --dir "$d" >/dev/null
    mpirun_hosts "$R" "$list" hostname >"$SCRATCH/names" 2>&1
    check "R=$R: one rank on each of the $R hosts" test "$(sort -u "$SCRATCH/names" | grep -c "^$P-h")" -eq "$R"
    for sched in "" "--unfused"; do
        expect_ok "R=$R shm $sched" "$A2AMM" run 256 512 64 "$R" --dir "$d" --path put --tile-m 32 --depth 2 $sched
        mkdir -p "$SCRATCH/want"
        for r in $(seq 0 $((R - 1))); do cp "$d/output/$r/npu_out.bin" "$SCRATCH/want/$r"; rm "$d/output/$r/npu_out.bin"; done
        expect_ok "R=$R over MPI across $R hosts $sched" mpirun_hosts "$R" "$list" "$A2AMM" run 256 512 64 "$R" \
            --dir "$d" --transport mpi --tile-m 32 --depth 2 $sched
        expect_output "R=$R over MPI $sched: success" "Status: SUCCESS"
        for r in $(seq 0 $((R - 1))); do
            check "R=$R $sched rank $r: the same bits as shared memory" cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/want/$r"
        done
        check "R=$R $sched: no temporary left" test -z "$(find "$d" -name '*.tmp.*')"
    done
    expect_ok "R=$R perf over MPI" mpirun_hosts "$R" "$list" "$A2AMM" run 256 512 64 "$R" perf --iters 2 --dir "$d" \
        --transport mpi --tile-m 64 --baseline
    check "R=$R perf: a fused row" grep -Eq "^  fused +[0-9.]+" "$SCRATCH/out"
    check "R=$R perf: a baseline row" grep -Eq "^  baseline +[0-9.]+" "$SCRATCH/out"
    check "R=$R perf: the baseline exchanges with MPI_Alltoall" grep -q "MPI_Alltoall, OpenBLAS sgemm" "$SCRATCH/out"
    check "R=$R perf: one report (rank 0 speaks)" test "$(grep -c 'Status: SUCCESS' "$SCRATCH/out")" -eq 1
done

# the reverse op (matmul-alltoall) over MPI: the same bits as shared memory, fused and unfused; perf's baseline
# is the matmul, then MPI_Alltoall of its column blocks
for R in 2 4; do
    list=$(seq -s, -f "$P-h%g" "$R")
    d="$SCRATCH/rev$R"
    "$A2AMM" gen 200 512 $((24 * R + R)) "$R" --op matmul-alltoall --dir "$d" >/dev/null   # N/R = 25
    N=$((24 * R + R))
    for sched in "" "--unfused"; do
        expect_ok "reverse R=$R shm $sched" "$A2AMM" run 200 512 $N "$R" --dir "$d" --path put --tile-m 32 $sched
        mkdir -p "$SCRATCH/rwant"
        for r in $(seq 0 $((R - 1))); do cp "$d/output/$r/npu_out.bin" "$SCRATCH/rwant/$r"; rm "$d/output/$r/npu_out.bin"; done
        expect_ok "reverse R=$R over MPI across $R hosts $sched" mpirun_hosts "$R" "$list" "$A2AMM" run 200 512 $N "$R" \
            --dir "$d" --transport mpi --tile-m 32 $sched
        expect_output "reverse R=$R over MPI $sched: the op" "op matmul-alltoall"
        for r in $(seq 0 $((R - 1))); do
            check "reverse R=$R $sched rank $r: the same bits as shared memory" cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/rwant/$r"
        done
    done
    expect_ok "reverse R=$R: verify" "$A2AMM" verify 200 $N "$R" --dir "$d"
    expect_ok "reverse R=$R perf over MPI" mpirun_hosts "$R" "$list" "$A2AMM" run 200 512 $N "$R" perf --iters 2 --dir "$d" \
        --transport mpi --tile-m 64 --baseline
    for row in fused unfused "matmul alone" "alltoall alone" baseline; do
        check "reverse R=$R perf over MPI: a $row row" grep -Eq "^  $row +[0-9.]+" "$SCRATCH/out"
    done
    check "reverse R=$R perf: the baseline is the matmul, then MPI_Alltoall of its blocks" \
        grep -q "OpenBLAS sgemm on fp32 (weights dequantized once), then MPI_Alltoall of its column blocks" "$SCRATCH/out"
done
expect_ok "reverse op traced over MPI" mpirun_hosts 2 "$P-h1,$P-h2" "$A2AMM" run 200 512 50 2 --dir "$SCRATCH/rev2" \
    --transport mpi --tile-m 32 --trace "$SCRATCH/mpi-rev.json"
check "the reverse op's MPI trace: matmuls per (tile, destination), waits per (tile, other source)" python3 -c "
import json; o=json.load(open('$SCRATCH/mpi-rev.json')); m=o['otherData']
assert m['op']=='matmul-alltoall' and m['transport']=='mpi', m
mm={(e['pid'],e['args']['tile'],e['args']['to']) for e in o['traceEvents'] if e.get('cat')=='matmul'}
assert mm=={(r,t,d) for r in range(2) for t in range(7) for d in range(2)}, len(mm)
w={(e['pid'],e['args']['tile'],e['args']['source']) for e in o['traceEvents'] if e.get('cat')=='wait'}
assert w=={(r,t,1-r) for r in range(2) for t in range(7)}, len(w)"
expect_ok "the reverse op's MPI trace draws" "$A2AMM" timeline "$SCRATCH/mpi-rev.json" -o "$SCRATCH/mpi-rev.svg"
expect_ok "bench op --op matmul-alltoall over MPI" mpirun_hosts 2 "$P-h1,$P-h2" "$A2AMM" bench op 256 512 64 2 --iters 2 \
    --transport mpi --op matmul-alltoall
check "bench op --op matmul-alltoall over MPI: oneDNN's matmul, then MPI_Alltoall" \
    grep -Eq "oneDNN .* then MPI_Alltoall of its column blocks" "$SCRATCH/out"

# --trace over MPI: rank 0 gathers every rank's spans, with each one's clock offset measured by pings
expect_ok "R=4 traced over MPI" mpirun_hosts 4 "$P-h1,$P-h2,$P-h3,$P-h4" "$A2AMM" run 256 512 64 4 --dir "$SCRATCH/d4" \
    --transport mpi --tile-m 32 --depth 2 --trace "$SCRATCH/mpi-trace.json"
check "the MPI trace: every rank's matmul spans per (tile, source), offsets measured" python3 -c "
import json; o=json.load(open('$SCRATCH/mpi-trace.json')); m=o['otherData']
assert m['transport']=='mpi' and len(m['clock_offsets_ns'])==4 and 'ping' in m['clock_offsets_how'], m
mm={(e['pid'],e['args']['tile'],e['args']['source']) for e in o['traceEvents'] if e.get('cat')=='matmul'}
assert mm=={(r,t,s) for r in range(4) for t in range(8) for s in range(4)}, len(mm)
w={(e['pid'],e['args']['tile'],e['args']['source']) for e in o['traceEvents'] if e.get('cat')=='wait'}
assert len(w)==4*8*3, len(w)
# one machine's clock: the offsets measured are small (under 50 ms)
assert all(abs(x)<5e7 for x in m['clock_offsets_ns']), m['clock_offsets_ns']"
expect_ok "the MPI trace draws" "$A2AMM" timeline "$SCRATCH/mpi-trace.json" -o "$SCRATCH/mpi-trace.svg"

expect_ok "bench op over MPI across 2 hosts" mpirun_hosts 2 "$P-h1,$P-h2" "$A2AMM" bench op 256 512 64 2 --iters 2 \
    --transport mpi
check "bench op over MPI: its ratios" grep -q "ratios (medians): fused / matmul alone" "$SCRATCH/out"
check "bench op over MPI: the baseline is MPI_Alltoall + oneDNN" grep -q "MPI_Alltoall, oneDNN" "$SCRATCH/out"
check "bench op over MPI: one report" test "$(grep -c 'ratios (medians)' "$SCRATCH/out")" -eq 1
check "bench op over MPI: its scratch folders removed" test -z "$(ls "$TMPDIR" | grep a2amm-bench-op)"
expect_fail "bench op without mpirun: says how to launch, as root too" \
    "mpirun --allow-run-as-root --oversubscribe -np 2 a2amm bench op 256 512 64 2 --transport mpi" \
    "$A2AMM" bench op 256 512 64 2 --transport mpi

expect_fail "the direct path is refused over MPI" "needs --path put" \
    mpirun_hosts 2 "$P-h1,$P-h2" "$A2AMM" run 256 512 64 2 --dir "$SCRATCH/d2" --transport mpi --path direct
expect_fail "a rank count other than R is refused" "mpirun started 4 ranks, the shape's R is 2" \
    mpirun_hosts 4 "$P-h1,$P-h2,$P-h3,$P-h4" "$A2AMM" run 256 512 64 2 --dir "$SCRATCH/d2" --transport mpi

# failures across hosts: every rank stops within seconds, the failing one named
list=$P-h1,$P-h2,$P-h3,$P-h4
for fault in kill error; do
    start=$SECONDS
    A2AMM_FAULT=$fault A2AMM_FAULT_RANK=2 mpirun_hosts 4 "$list" "$A2AMM" run 256 512 64 4 --dir "$SCRATCH/d4" \
        --transport mpi --tile-m 32 --timeout 60 >"$SCRATCH/out" 2>&1
    rc=$?
    check "$fault on rank 2: the job fails (exit $rc)" test $rc -ne 0 -a $rc -ne 124
    check "$fault on rank 2: all stop well before the 60 s deadline" test $((SECONDS - start)) -le 20
    check "$fault on rank 2: the message names rank 2" grep -Eq "rank 2" "$SCRATCH/out"
    sleep 1
    left=0
    for i in 1 2 3 4; do
        for pid in $(ip netns pids "$P-h$i"); do
            case $(cat /proc/$pid/comm 2>/dev/null) in a2amm | orted | mpirun) left=$((left + 1)) ;; esac
        done
    done
    check "$fault on rank 2: nothing left running on any host ($left)" test $left -eq 0
done
expect_output "error on rank 2: its message, with what it was doing" "injected error at tile 1"

# misuse through the API over MPI (tests/mpi_misuse.c): every call returns, with an error on every rank
# naming what differs; the library prints nothing and never aborts; each rank goes on to MPI_Finalize
misuse="$(dirname "$A2AMM")/tests/mpi_misuse"
# line RANK CALL: that rank's line for the call
line() { grep "^rank $1: $2: " "$SCRATCH/out"; }
# quick RANK CALL: the call returned within 10 s (the waits' deadline is 30 s)
quick() { line "$1" "$2" | awk '{ for (i = 1; i < NF; i++) if ($i == "after") exit !($(i + 1) < 10); exit 1 }'; }
finished_both() { test "$(grep -c '^rank [01]: finished$' "$SCRATCH/out")" -eq 2; }
no_abort() { ! grep -Eq "MPI_ERR|MPI_Abort|^a2amm: rank" "$SCRATCH/out"; }
# named_on_both LABEL CALL PATTERN...: on ranks 0 and 1, CALL failed with an error matching every PATTERN, at once
named_on_both() {
    local label=$1 call=$2 r p filter
    shift 2
    for r in 0 1; do
        filter="grep '^rank $r: $call: status -' '$SCRATCH/out'"
        for p in "$@"; do filter="$filter | grep -e '$p'"; done
        check "$label, rank $r: an error naming $*" bash -c "$filter >/dev/null"
        check "$label, rank $r: at once" quick $r "$call"
    done
}

expect_ok "misuse: alltoall of 64 and 128 bytes" mpirun_hosts 2 "$P-h1,$P-h2" "$misuse" alltoall-sizes
named_on_both "alltoall sizes" a2amm_comm_alltoall 'block_bytes = ' 64 128
check "alltoall sizes: no MPI error handler, no abort" no_abort
check "alltoall sizes: both ranks went on to the end" finished_both

expect_ok "misuse: an argument error in a2amm_op_run on rank 0" mpirun_hosts 2 "$P-h1,$P-h2" "$misuse" run-arg
check "run-arg: rank 0's call returns its error" \
    bash -c "grep '^rank 0: a2amm_op_run: status -1 ' '$SCRATCH/out' | grep -q 'm must be 1 to max_m = 8 (got 9)'"
# rank 1 hears in the call it is in: a2amm_op_run, or still a2amm_op_create's last barrier when rank 0,
# past that barrier, fails at once (MPI completes the barrier and brings the notice in either order)
rank1_call=$(grep -oE '^rank 1: a2amm_op_(create|run): status -8 ' "$SCRATCH/out" | head -1 | cut -d' ' -f3 | tr -d :)
check "run-arg: rank 1's call returns A2AMM_E_PEER, naming rank 0 (in ${rank1_call:-no call})" \
    bash -c "grep -E '^rank 1: a2amm_op_(create|run): status -8 ' '$SCRATCH/out' | grep -q 'rank 0: a2amm_op_run: rank 0: m must be'"
check "run-arg: rank 1 heard at once" quick 1 "${rank1_call:-a2amm_op_run}"
check "run-arg: a2amm_comm_status gives rank 1 the first failure" \
    bash -c "grep '^rank 1: a2amm_comm_status: status -1 ' '$SCRATCH/out' | grep -q 'rank 0: a2amm_op_run'"
check "run-arg: the library printed nothing and aborted nothing" no_abort
check "run-arg: both ranks went on to the end" finished_both

# an argument refused on one rank in a2amm_comm_alltoallv fails the communicator: the other rank's call
# returns A2AMM_E_PEER at once with rank 0's reason, not a mismatch with rank 0's next call
expect_ok "misuse: send_bytes[1] = SIZE_MAX in a2amm_comm_alltoallv on rank 0" mpirun_hosts 2 "$P-h1,$P-h2" "$misuse" alltoallv-arg
check "alltoallv-arg: rank 0's call returns its error" \
    bash -c "grep '^rank 0: a2amm_comm_alltoallv: status -5 ' '$SCRATCH/out' | grep -q 'the block of rank 1 overflows'"
check "alltoallv-arg: rank 1's call returns A2AMM_E_PEER, naming rank 0 and why" \
    bash -c "grep '^rank 1: a2amm_comm_alltoallv: status -8 ' '$SCRATCH/out' | grep -q 'rank 0: a2amm_comm_alltoallv: the block of rank 1 overflows'"
check "alltoallv-arg: rank 1 heard at once" quick 1 a2amm_comm_alltoallv
check "alltoallv-arg: rank 0's next collective call returns A2AMM_E_PEER" \
    bash -c "grep -q '^rank 0: a2amm_comm_barrier: status -8 ' '$SCRATCH/out'"
check "alltoallv-arg: both ranks went on to the end" finished_both

# the create agreement (a hash of the whole config, then the fields where it differs) over MPI messages
expect_ok "misuse: depth 3 on the last rank, 2 on the others" mpirun_hosts 2 "$P-h1,$P-h2" "$misuse" config-differs
named_on_both "config-differs" a2amm_op_create 'depth = ' 'must pass the same' 2 3
check "config-differs: both ranks went on to the end" finished_both

expect_ok "misuse: two ops called in swapped order" mpirun_hosts 2 "$P-h1,$P-h2" "$misuse" swapped
named_on_both "swapped" a2amm_op_run 'on op 1' 'on op 2'
check "swapped: both ranks went on to the end" finished_both

# a rank that leaves (destroys its communicator) while another is in a call that needs it: that call ends
# with A2AMM_E_PEER naming the rank that left, at once (a grace of 0.2 s), not at its 30 s deadline
expect_ok "misuse: rank 1 destroys its communicator while rank 0 calls an alltoall" mpirun_hosts 2 "$P-h1,$P-h2" "$misuse" leave
check "leave: rank 0's call returns A2AMM_E_PEER, naming rank 1 as the one that left" \
    bash -c "grep '^rank 0: a2amm_comm_alltoall: status -8 ' '$SCRATCH/out' | grep -q 'rank 1 left the communicator'"
check "leave: at once" quick 0 a2amm_comm_alltoall
check "leave: rank 1's destroy returned at once too" quick 1 a2amm_comm_destroy
check "leave: both ranks went on to the end" finished_both

# the uneven AllToAll (a2amm_comm_alltoallv) across hosts, over MPI messages: the cases of
# tests/alltoallv_cases.h (sizes by pair and round, zeros, scattered blocks, the even AllToAll between,
# last a block over its room refused on every rank before a byte moves), as test_alltoallv does over shm
for np in 2 3; do
    expect_ok "alltoallv over MPI, $np ranks on 2 hosts" mpirun_hosts $np "$P-h1,$P-h2" "$(dirname "$A2AMM")/tests/mpi_alltoallv"
    check "alltoallv over MPI, $np ranks: every rank ran every case" \
        test "$(grep -Ec '^rank [0-9]: alltoallv: [1-9][0-9]* checks, 0 failed$' "$SCRATCH/out")" -eq $np
done

# the MoE op (a2amm_moe_*) across hosts over MPI messages: every case of tests/moe_cases.h made for the
# job's ranks within the fp64 bound on every rank, and the same bits as over shared memory (test_moe)
"$(dirname "$A2AMM")/tests/test_moe" digests >"$SCRATCH/moe-shm" 2>&1
check "test_moe digests: every case over shared memory" test "$(grep -c ': digest ' "$SCRATCH/moe-shm")" -ge 10
for np in 2 4; do
    hosts_of=$(seq -s, -f "$P-h%g" 1 $np)
    expect_ok "the MoE op over MPI, $np ranks on $np hosts" mpirun_hosts $np "$hosts_of" "$(dirname "$A2AMM")/tests/mpi_moe"
    check "the MoE op over MPI, $np ranks: within the fp64 bound on every rank" \
        test "$(grep -Ec '^rank [0-9]: moe: [1-9][0-9]* cases, 0 off the bound or failed$' "$SCRATCH/out")" -eq $np
    grep ': digest ' "$SCRATCH/out" | sort >"$SCRATCH/moe-mpi"
    check "the MoE op over MPI, $np ranks: the same bits as over shared memory ($(wc -l <"$SCRATCH/moe-mpi") digests)" \
        bash -c "test -s '$SCRATCH/moe-mpi' && ! grep -qvxF -f '$SCRATCH/moe-shm' '$SCRATCH/moe-mpi'"
done

# the MoE op from the command line (a2amm run --op moe --transport mpi) across hosts: the same bits as
# shm, within verify's bound, and perf mode's figures
for np in 2 4; do
    hosts_of=$(seq -s, -f "$P-h%g" 1 $np)
    d="$SCRATCH/moe$np"
    "$A2AMM" gen 10 96 64 $np --op moe --experts $((2 * np)) --topk 3 --route skewed --dir "$d" --quiet >/dev/null
    expect_ok "run --op moe, $np ranks, shm" "$A2AMM" run 10 96 64 $np --op moe --dir "$d"
    mkdir -p "$SCRATCH/moe-want$np"
    for r in $(seq 0 $((np - 1))); do mv "$d/output/$r/npu_out.bin" "$SCRATCH/moe-want$np/$r"; done
    expect_ok "run --op moe over MPI, $np ranks on $np hosts" mpirun_hosts $np "$hosts_of" "$A2AMM" run 10 96 64 $np \
        --op moe --transport mpi --dir "$d"
    for r in $(seq 0 $((np - 1))); do
        check "run --op moe over MPI, rank $r of $np: the same bits as shm" cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/moe-want$np/$r"
    done
    expect_ok "verify --op moe after MPI, $np ranks" "$A2AMM" verify 10 96 64 $np --dir "$d"
    expect_ok "run --op moe perf over MPI, $np ranks" mpirun_hosts $np "$hosts_of" "$A2AMM" run 10 96 64 $np perf \
        --iters 2 --transport mpi --dir "$d"
    expect_output "run --op moe perf over MPI: the call's time" "a2amm MoE call (dispatch, experts, combine)"
    expect_ok "run --op moe traced over MPI, $np ranks" mpirun_hosts $np "$hosts_of" "$A2AMM" run 10 96 64 $np \
        --op moe --transport mpi --dir "$d" --trace "$SCRATCH/moe-mpi$np.json"
    check "the MoE op's MPI trace, $np ranks: every rank's dispatch, experts and combine, offsets measured" \
        /usr/bin/python3 -c "
import json; j = json.load(open('$SCRATCH/moe-mpi$np.json')); o = j['otherData']
assert o['op'] == 'moe' and o['R'] == $np and o['transport'] == 'mpi', o
assert len(o['clock_offsets_ns']) == $np and o['clock_offsets_ns'][0] == 0, o
spans = [e for e in j['traceEvents'] if e.get('ph') == 'X']
for want in ('dispatch chunk 0', 'experts chunk 0 (', 'combine chunk 0', 'call 1 ('):
    assert len({e['pid'] for e in spans if e['name'].startswith(want)}) == $np, (want, spans)"
    for r in $(seq 0 $((np - 1))); do
        check "run --op moe traced over MPI, rank $r of $np: the same bits" cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/moe-want$np/$r"
    done
    expect_ok "the MoE op's MPI trace draws" "$A2AMM" timeline "$SCRATCH/moe-mpi$np.json" -o "$SCRATCH/moe-mpi$np.svg"
done
expect_ok "bench moe over MPI across 2 hosts" mpirun_hosts 2 "$P-h1,$P-h2" "$A2AMM" bench moe 2 8 64 32 4 2 --iters 2 \
    --threads 1 --transport mpi
expect_output "bench moe over MPI: baseline (1) and the other schedules give the op's bits" \
    "(1), the unfused and the overlap schedules give the fused call's bits on every rank: yes"
expect_output "bench moe over MPI: baseline (2) ran" "(2) alltoallv + oneDNN bf16 experts"
expect_fail "bench moe --transport mpi without mpirun: says how to launch, as root too" \
    "mpirun --allow-run-as-root --oversubscribe -np 2 a2amm bench moe 2 8 64 32 4 2 --transport mpi" \
    "$A2AMM" bench moe 2 8 64 32 4 2 --transport mpi

bash "$hosts" down "$P"
check "the namespaces are gone" test -z "$(ip netns list | grep "^$P-")"
check "their hosts files are gone" test ! -e "/etc/netns/$P-h1"
finish test_mpi.sh
