#!/usr/bin/env bash
# What this CPU runs and A2AMM_CPU_HIDE: `a2amm cpu` agrees with itself
# (text, JSON, --runs); each hidden set drops dispatch to the documented next
# level, and `run` under it gives the same bits as A2AMM_ISA forcing that
# level without hiding; a level above what is left is refused, saying why; a
# bad list is refused by every command. Runs on any x86-64 CPU: what is
# expected follows from what the CPU itself has (a2amm cpu, nothing hidden).
. "$(dirname "$0")/lib.sh"
unset A2AMM_CPU_HIDE A2AMM_ISA

expect_ok "cpu --help" "$A2AMM" cpu --help
expect_output "cpu --help documents A2AMM_CPU_HIDE" "A2AMM_CPU_HIDE=LIST"
expect_output "cpu --help has an example" "example"
expect_ok "main help lists cpu" "$A2AMM" --help
expect_output "main help names A2AMM_CPU_HIDE" "A2AMM_CPU_HIDE="
expect_fail "cpu: unknown option" "unknown option '--bogus'" "$A2AMM" cpu --bogus
expect_fail "cpu --runs: unknown level" "--runs must be ref, avx2, avx512 or amx" "$A2AMM" cpu --runs sse9

# --- the text, the JSON and --runs say the same
"$A2AMM" cpu --json >"$SCRATCH/cpu.json"
check "cpu --json parses" python3 -c "import json; json.load(open('$SCRATCH/cpu.json'))"
expect_ok "cpu (text)" "$A2AMM" cpu
for isa in ref avx2 avx512 amx; do
    runs=$(python3 -c "import json; print('yes' if json.load(open('$SCRATCH/cpu.json'))['levels']['$isa']['runs'] else 'no')")
    check "--runs $isa agrees with the JSON ($runs)" test "$(yes_no cpu_runs $isa)" = "$runs"
    if [ "$runs" = yes ]; then expect_output "text: $isa runs" "  $(printf '%-7s' $isa) runs"
    else expect_output "text: $isa does not, saying why" "  $(printf '%-7s' $isa) no: "; fi
done
check "ref runs everywhere" cpu_runs ref
# the level run and bench use: said once, as the JSON's selected, forced or not
for isa in "" ref; do
    A2AMM_ISA=$isa "$A2AMM" cpu >"$SCRATCH/cpu.txt"
    sel=$(A2AMM_ISA=$isa "$A2AMM" cpu --json | python3 -c "import json,sys; print(json.load(sys.stdin)['selected'])")
    check "A2AMM_ISA=$isa: one line names the level in use" test "$(grep -c 'run and bench use' "$SCRATCH/cpu.txt")" -eq 1
    check "A2AMM_ISA=$isa: it is the JSON's ($sel)" grep -q "^run and bench use: $sel (" "$SCRATCH/cpu.txt"
done

# The levels this CPU itself runs, nothing hidden; a hidden set's ceiling.
best_of() { # best_of MAXLEVEL: the best level this CPU runs, at most MAXLEVEL
    local best=ref l
    for l in avx2 avx512 amx; do
        case "$1" in ref) break ;; avx2) [ $l = avx2 ] || break ;; avx512) [ $l != amx ] || break ;; esac
        cpu_runs $l && best=$l
    done
    echo $best
}
d="$SCRATCH/bits"
"$A2AMM" gen 130 192 40 3 --dir "$d" >/dev/null
for spec in "amx:avx512" "avx512bf16:avx2" "avx512:avx2" "amx,avx512:avx2" "avx2:ref" "none:amx" ":amx" "avx2,amx:ref"; do
    hide=${spec%%:*} cap=${spec##*:}
    want=$(best_of $cap)
    got=$(A2AMM_CPU_HIDE=$hide "$A2AMM" cpu --json | python3 -c "import json,sys; print(json.load(sys.stdin)['selected'])")
    check "A2AMM_CPU_HIDE=$hide: dispatch picks $want (got $got)" test "$got" = "$want"
    # every level above the cap: refused when forced, naming the reason
    past=0
    for l in ref avx2 avx512 amx; do
        if [ $past = 1 ]; then
            expect_fail "A2AMM_CPU_HIDE=$hide: A2AMM_ISA=$l refused" "cannot run the $l kernels (" \
                env A2AMM_CPU_HIDE=$hide A2AMM_ISA=$l "$A2AMM" run 130 192 40 3 --dir "$d"
            if cpu_runs $l; then expect_output "A2AMM_CPU_HIDE=$hide: the refusal of $l says it is hidden" "A2AMM_CPU_HIDE hides"; fi
            # a level refused for what the CPU lacks keeps that reason, not a feature hidden besides
            unhidden=$("$A2AMM" cpu | sed -n "s/^  $l *no: //p")
            case $unhidden in "this CPU lacks"*)
                expect_output "A2AMM_CPU_HIDE=$hide: the refusal of $l still says '$unhidden'" "$unhidden" ;;
            esac
        fi
        [ $l = "$cap" ] && past=1
    done
    # run under the hidden set: the level named, the same bits as forcing it
    expect_ok "A2AMM_CPU_HIDE=$hide: run" env A2AMM_CPU_HIDE=$hide "$A2AMM" run 130 192 40 3 --dir "$d" --tile-m 32
    expect_output "A2AMM_CPU_HIDE=$hide: run uses $want" "kernel $want"
    for r in 0 1 2; do cp "$d/output/$r/npu_out.bin" "$SCRATCH/hidden.$r"; done
    env A2AMM_ISA=$want "$A2AMM" run 130 192 40 3 --dir "$d" --tile-m 32 >/dev/null 2>&1
    same=1; for r in 0 1 2; do cmp -s "$d/output/$r/npu_out.bin" "$SCRATCH/hidden.$r" || same=0; done
    check "A2AMM_CPU_HIDE=$hide: the same bits as A2AMM_ISA=$want" test $same -eq 1
    expect_ok "A2AMM_CPU_HIDE=$hide: verifies" "$A2AMM" verify 130 40 3 --dir "$d"
done

# --- hidden features are reported as hidden, detected ones as present
A2AMM_CPU_HIDE=avx2 "$A2AMM" cpu --json >"$SCRATCH/hid.json"
check "avx2 hidden: every feature hidden, none used" python3 -c "
import json; d = json.load(open('$SCRATCH/hid.json'))
assert d['hide'] == 'avx2' and all(f['hidden'] and not f['used'] for f in d['features'].values())
assert d['selected'] == 'ref' and [k for k, v in d['levels'].items() if v['runs']] == ['ref']"
check "nothing hidden: used is detected" python3 -c "
import json; d = json.load(open('$SCRATCH/cpu.json'))
assert all(f['used'] == f['detected'] and not f['hidden'] for f in d['features'].values())"

# --- bench gemm with everything above ref hidden: the ref level, no ceiling, oneDNN capped
A2AMM_CPU_HIDE=avx2 "$A2AMM" bench gemm 17 40 64 --probe 0.02 --iters 1 --threads 1 --json >"$SCRATCH/b.json" 2>"$SCRATCH/b.err"
check "bench gemm, avx2 hidden: ref, no FMA ceiling, peers measured" python3 -c "
import json; d = json.load(open('$SCRATCH/b.json'))
assert d['isa'] == 'ref' and d['ceiling']['fma_gflops'] is None and d['fraction_of_ceiling'] is None
assert 'A2AMM_CPU_HIDE hides' in d['ceiling']['fma_instruction'] or 'lacks' in d['ceiling']['fma_instruction']
assert d['onednn']['available'] and d['onednn']['agrees'] and d['openblas']['agrees']
assert 'avx' not in d['onednn']['isa'] or d['onednn']['isa_cap'] is None"

# --- a bad list is refused by every command, naming the entry
for cmd in "cpu" "run 130 192 40 3 --dir $d" "bench gemm 8 8 32 --iters 1 --probe 0.02"; do
    expect_fail "A2AMM_CPU_HIDE=amx,sse9: a2amm $cmd refuses" "'sse9' is not a feature a2amm can hide" \
        env A2AMM_CPU_HIDE=amx,sse9 "$A2AMM" $cmd
done
finish
