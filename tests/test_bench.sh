#!/usr/bin/env bash
# a2amm bench gemm from the command line: help, argument rules, the table's
# rows and columns, the JSON object's keys, forced ISA levels, odd shapes and
# the peers' agreement. Behaviour only: no check here looks at a time.
# Hardware rows are checked against what the library says this CPU runs
# (a2amm cpu, A2AMM_CPU_HIDE applied): a figure exactly where the level or
# feature is there, the documented n/a (with its reason) exactly where not.
. "$(dirname "$0")/lib.sh"

amx=$(yes_no cpu_runs amx)
avx512=$(yes_no cpu_runs avx512)
avx2=$(yes_no cpu_runs avx2)
bf16=$(yes_no bash -c "$(declare -f cpu_uses); A2AMM='$A2AMM'; cpu_uses avx512f && cpu_uses avx512_bf16")
fma=$(yes_no bash -c "$(declare -f cpu_uses); A2AMM='$A2AMM'; cpu_uses avx2 && cpu_uses fma")
echo "test_bench.sh: this CPU runs amx=$amx avx512=$avx512 avx2=$avx2; bf16 probe=$bf16, FMA probe=$fma (A2AMM_CPU_HIDE=${A2AMM_CPU_HIDE-})"

# --- the benchmarks are a binary of their own: only it links the peers (oneDNN)
bench_bin="$(dirname "$A2AMM")/a2amm-bench"
check "a2amm-bench is built beside a2amm" test -x "$bench_bin"
check "a2amm does not link oneDNN" bash -c "! ldd '$A2AMM' | grep -q libdnnl"
check "a2amm-bench links oneDNN" bash -c "ldd '$bench_bin' | grep -q libdnnl"
expect_ok "a2amm-bench runs on its own" "$bench_bin" gemm 16 32 64 --iters 1 --threads 1
expect_output "a2amm-bench gemm prints the table" "a2amm MXFP8, prepared B"

# --- help teaches, with examples that work as printed
expect_ok "a2amm --help" "$A2AMM" --help
expect_output "main help lists bench" "bench NAME"
# every benchmark bench --help lists is named on the main help's bench line
benches=$("$A2AMM" bench --help | sed -n '/^benchmarks:/,/^$/s/^  \([a-z]*\) .*/\1/p')
check "bench --help lists its five benchmarks" test "$(echo $benches | wc -w)" -eq 5
for b in $benches; do
    check "main help names bench $b" bash -c "'$A2AMM' --help | grep '^  bench ' | grep -qw '$b'"
done
expect_ok "bench --help" "$A2AMM" bench --help
expect_output "bench help lists gemm" "gemm    M N K"
expect_output "bench help lists op" "op      M K N R"
expect_output "bench help lists grouped" "grouped E M H I"
expect_ok "bench gemm --help" "$A2AMM" bench gemm --help
expect_output "bench gemm help has an example" "example"
expect_output "bench gemm help names A2AMM_ISA" "A2AMM_ISA=ref|avx2|avx512|amx"
expect_fail "bench alone" "usage: a2amm bench" "$A2AMM" bench
expect_fail "unknown benchmark" "unknown benchmark 'frob'" "$A2AMM" bench frob

# --- bad arguments are refused, naming the argument (exit 2)
expect_fail "K not a multiple of 32" "K must be a multiple of 32" "$A2AMM" bench gemm 64 64 100
expect_fail "zero M" "M must be a whole number from 1" "$A2AMM" bench gemm 0 64 64
expect_fail "negative N" "N must be a whole number from 1" "$A2AMM" bench gemm 64 -64 64
expect_fail "not a number" "K must be a whole number" "$A2AMM" bench gemm 64 64 6x4
expect_fail "dimension past int32" "M must be a whole number from 1 to 2147483647" "$A2AMM" bench gemm 2147483648 64 64
expect_fail "overflowing sizes" "overflow" "$A2AMM" bench gemm 2147483647 2147483647 2147483616
expect_fail "more memory than the machine" "this machine has" "$A2AMM" bench gemm 1000000 1000000 1024
expect_fail "missing arguments" "expected M N K, got 2" "$A2AMM" bench gemm 64 64
expect_fail "too many arguments" "too many arguments at '64'" "$A2AMM" bench gemm 64 64 64 64
expect_fail "unknown option" "unknown option '--bogus'" "$A2AMM" bench gemm 64 64 64 --bogus
expect_fail "zero threads" "--threads must be a whole number from 1" "$A2AMM" bench gemm 64 64 64 --threads 0
expect_fail "zero iters" "--iters must be a whole number from 1" "$A2AMM" bench gemm 64 64 64 --iters 0
expect_fail "iters without value" "option --iters needs a value" "$A2AMM" bench gemm 64 64 64 --iters
expect_fail "a probe of no time" "--probe must be a number from 0.001 to 10" "$A2AMM" bench gemm 64 64 64 --probe 0
expect_fail "bad forced ISA" "A2AMM_ISA=bogus" env A2AMM_ISA=bogus "$A2AMM" bench gemm 64 64 64 --iters 1
"$A2AMM" bench gemm 64 64 100 >"$SCRATCH/o" 2>&1
check "bad args exit 2" test $? -eq 2

# --- the table: every contender, the columns, the lines under it
over=$(( $(nproc) + 1 ))
expect_ok "more threads than cores" "$A2AMM" bench gemm 8 64 32 --probe 0.02 --iters 1 --threads $over
expect_output "more threads than cores is warned about" "WARNING: $over threads on $(nproc) cores"
expect_ok "bench gemm table" "$A2AMM" bench gemm 96 200 64 --probe 0.02 --iters 2 --threads 2
cp "$SCRATCH/out" "$SCRATCH/table"
# row_has "label" yes|no: the row is there, with a figure (yes) or n/a and its reason (no)
row_has() {
    local line
    line=$(grep -F -- "  $1" "$SCRATCH/table" | head -1)
    if [ -z "$line" ]; then fail "table row '$1' is missing"; return; fi
    if [ "$2" = yes ]; then
        if grep -q ' n/a ' <<<"$line"; then fail "table row '$1' has no figure: $line"; else pass; fi
    elif grep -Eq ' n/a +n/a: (this CPU lacks|A2AMM_CPU_HIDE hides|the OS) ' <<<"$line"; then
        pass
    else
        fail "table row '$1' is not n/a with a reason: $line"
    fi
}
# oneDNN's row, as in bench op below: bf16 where AVX512_BF16 is (used); fp32
# without AVX-512 (oneDNN 2.6 has no bf16 matmul there); on AVX-512 without
# BF16 oneDNN decides, and the test says which row it found.
if [ "$bf16" = yes ]; then
    onednn_row="oneDNN bf16, packed B"
elif ! cpu_uses avx512f; then
    onednn_row="oneDNN fp32, packed B"
elif grep -qF "oneDNN bf16, packed B" "$SCRATCH/table"; then
    onednn_row="oneDNN bf16, packed B"
    echo "test_bench.sh: AVX-512 without BF16: oneDNN ran bf16"
else
    onednn_row="oneDNN fp32, packed B"
    echo "test_bench.sh: AVX-512 without BF16: oneDNN ran fp32"
fi
for row in "a2amm MXFP8, prepared B" "a2amm incl. B preparation" "$onednn_row" "OpenBLAS sgemm fp32"; do
    row_has "$row" yes
done
row_has "AMX bf16 ceiling" $amx
row_has "AMX fed from L2" $amx
row_has "bf16 ceiling" $bf16
row_has "fp32 FMA ceiling" $fma
check "oneDNN bf16 wherever a2amm's avx512 level runs" test "$avx512" = no -o "$onednn_row" = "oneDNN bf16, packed B"
for col in "median ms" "min ms" "max ms" "GFLOP/s" "a2amm/row"; do
    expect_output "table column: $col" "$col"
done
expect_output "says which ISA ran" "a2amm: ISA "
expect_output "says how many threads" "threads: 2 in each"
check "says oneDNN's version, implementation and ISA" grep -Eq "oneDNN: [0-9]+\.[0-9]+\.[0-9]+, implementation [^ ]+, ISA [a-z0-9_]+" "$SCRATCH/out"
expect_output "says which OpenBLAS core ran" "OpenBLAS: core "
expect_output "says the caches were flushed" "to flush the caches"
expect_output "says the contenders run in interleaved rounds" "2 rounds after 1 warm-up of each"
# a2amm's level has a ceiling to be held against: AMX for amx, bf16 for
# avx512, the FMA probe for avx2 and ref (none where FMA is absent or hidden)
ceiling=yes
[ "$avx512" = no ] && ceiling=$fma
if [ "$ceiling" = yes ]; then
    expect_output "table column: a2amm's fraction" "<- a2amm's fraction"
    expect_output "gives the best repetition's fraction" "at its best repetition"
    expect_output "gives the fraction paired by round" "paired by round (each call over its own round's probe): median 0."
    expect_output "says how the ceiling was taken" "the best of the probes"
else
    expect_output "says there is no ceiling here, and why" "ceiling to hold it against here (n/a: "
    check "no fraction of a missing ceiling" bash -c "! grep -q -e 'a2amm.s fraction' -e nan '$SCRATCH/table'"
fi
if [ "$(yes_no bash -c "$(declare -f cpu_uses); A2AMM='$A2AMM'; cpu_uses avx2 || cpu_uses avx512f")" = yes ]; then
    check "the memory line: the streaming read, B's fp8 bytes over a2amm's call" \
        grep -Eq "memory: a streaming read probe runs at [0-9.]+ GB/s \(2 threads, (512|256)-bit loads over [0-9]+ MiB\)" "$SCRATCH/table"
    expect_output "the memory line's fraction, paired by round" "over a2amm's median call: "
else
    expect_output "the memory line says why there is no read probe" "memory: no streaming read measured (n/a: "
fi
expect_output "agreement line" "agreement on 256 sampled elements"
expect_output "a2amm agrees with fp64" "a2amm fp32 vs fp64"
check "no peer disagrees" bash -c "! grep -q DISAGREES '$SCRATCH/out'"
check "no warning" bash -c "! grep -q WARNING '$SCRATCH/out'"
check "a2amm's own ratio is 1.00" bash -c "grep 'a2amm MXFP8, prepared B' '$SCRATCH/table' | grep -q ' 1.00\$'"

# --- JSON: one object on stdout and nothing else, with every key
json_ok() { # json_ok FILE PYTHON-CONDITION...: the file parses and each condition holds
    python3 - "$@" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError as e:
    print("not one JSON object:", e, file=sys.stderr)
    sys.exit(1)
for cond in sys.argv[2:]:
    if not eval(cond, {"d": d}):
        print("json condition failed:", cond, file=sys.stderr)
        sys.exit(1)
EOF
}
"$A2AMM" bench gemm 33 70 96 --probe 0.02 --iters 1 --threads 3 --json >"$SCRATCH/j.json" 2>"$SCRATCH/j.err"
check "json run exits 0" test $? -eq 0
check "json parses, shape and options" json_ok "$SCRATCH/j.json" \
    'd["command"] == "bench gemm"' 'd["M"] == 33 and d["N"] == 70 and d["K"] == 96' \
    'd["threads"] == 3 and d["iters"] == 1 and d["warmup"] == 1' 'd["flush_bytes"] > 0'
check "json has every contender with figures" json_ok "$SCRATCH/j.json" \
    'all(d[k]["available"] and d[k]["gflops"] > 0 and d[k]["median_s"] > 0 and "ratio" in d[k]
         for k in ("a2amm", "a2amm_incl_prepare", "onednn", "openblas"))' \
    'd["a2amm"]["ratio"] == 1' 'd["a2amm_prepare"]["median_s"] > 0' \
    'abs(d["gflop"] - 2 * 33 * 70 * 96 / 1e9) < 1e-6'
check "json has the ceiling and the fraction" json_ok "$SCRATCH/j.json" \
    '(d["ceiling"]["fma_gflops"] is not None) == ("'$fma'" == "yes")' \
    '(d["ceiling"]["bf16_gflops"] is not None) == ("'$bf16'" == "yes")' \
    '(d["ceiling"]["amx_gflops"] is not None) == ("'$amx'" == "yes")' \
    'd["ceiling"]["fma_gflops"] is None or d["ceiling"]["fma_gflops"] > 0' \
    'd["ceiling"]["threads"] == 3' 'd["fraction_of"] in ("amx", "bf16", "fma")' \
    '(d["fraction_of_ceiling"] is not None) == ("'$ceiling'" == "yes")' \
    'd["fraction_of_ceiling"] is None or d["fraction_of_ceiling"] > 0' \
    'd["fraction_of_ceiling"] is None or d["best_fraction_of_ceiling"] >= d["fraction_of_ceiling"]' \
    '"bf16_gflops" in d["ceiling"] and "bf16_instruction" in d["ceiling"]' \
    '"amx_gflops" in d["ceiling"] and "amx_instruction" in d["ceiling"]' \
    '"amx_l2_gflops" in d["ceiling"] and "amx_l2_instruction" in d["ceiling"]' \
    '(d["ceiling"]["amx_l2_gflops"] is None) == (d["ceiling"]["amx_gflops"] is None)' \
    'd["ceiling"]["amx_l2_gflops"] is None or d["ceiling"]["amx_l2_gflops"] == max(d["ceiling"]["amx_l2_gflops_first"], d["ceiling"]["amx_l2_gflops_last"], d["ceiling"]["amx_l2_gflops_rounds"])' \
    'd["ceiling"]["amx_gflops"] is None or d["ceiling"]["amx_gflops"] == max(d["ceiling"]["amx_gflops_first"], d["ceiling"]["amx_gflops_last"], d["ceiling"]["amx_gflops_rounds"])' \
    '(d["fraction_of"] == "amx") == (d["isa"] == "amx")' \
    'd["fraction_of_ceiling"] is None or 0 < d["paired_fraction_of_ceiling"]["min"] <= d["paired_fraction_of_ceiling"]["median"] <= d["paired_fraction_of_ceiling"]["max"]' \
    'd["fraction_of_ceiling"] is None or d["paired_fraction_of_ceiling"]["median"] >= d["fraction_of_ceiling"] * 0.999' \
    'd["ceiling"]["fma_gflops"] is None or d["ceiling"]["fma_gflops"] == max(d["ceiling"]["fma_gflops_first"], d["ceiling"]["fma_gflops_last"], d["ceiling"]["fma_gflops_rounds"])'
check "json names the ISA and the peers' setup" json_ok "$SCRATCH/j.json" \
    'd["isa"] in ("ref", "avx2", "avx512", "amx")' 'd["isa_forced"] is False' \
    '__import__("re").fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", d["onednn"]["version"])' 'd["onednn"]["impl"] != ""' \
    'd["onednn"]["threads"] == 3' 'd["onednn"]["dtype"] in ("bf16", "f32")' \
    '(d["onednn"]["dtype"] == "f32") == (d["onednn"]["bf16_why_not"] is not None)' \
    'd["onednn"]["dtype"] == "bf16" or "'$avx512'" == "no"' \
    'd["isa"] == ("amx" if "'$amx'" == "yes" else "avx512" if "'$avx512'" == "yes" else "avx2" if "'$avx2'" == "yes" else "ref")' \
    'd["openblas"]["threads"] == 3' \
    'd["openblas"]["corename"] != ""' '"coretype_env" in d["openblas"] and "config" in d["openblas"]'
check "json: the peers agree with a2amm" json_ok "$SCRATCH/j.json" \
    'd["onednn"]["agrees"] is True and d["openblas"]["agrees"] is True' \
    'd["check"]["a2amm_vs_fp64"] <= d["check"]["limit"]' 'd["check"]["samples"] == 256' \
    'd["check"]["bf16_inexact"] == 0'
# the streaming read probe (wherever AVX2 or AVX-512 loads are there) and B's fp8 bytes against it
readp=$(yes_no bash -c "$(declare -f cpu_uses); A2AMM='$A2AMM'; cpu_uses avx2 || cpu_uses avx512f")
check "json has the streaming read and B's fp8 bytes against it" json_ok "$SCRATCH/j.json" \
    'd["b_fp8_bytes"] == 70 * 96 * 33 / 32' '"read_instruction" in d["ceiling"]' \
    '(d["ceiling"]["read_gbs"] is not None) == ("'$readp'" == "yes")' \
    'd["ceiling"]["read_gbs"] is None or (d["ceiling"]["read_gbs"] > 0 and d["ceiling"]["read_bytes"] >= 512 * 2**20)' \
    'd["ceiling"]["read_gbs"] is None or d["ceiling"]["read_gbs"] == max(d["ceiling"]["read_gbs_first"], d["ceiling"]["read_gbs_last"], d["ceiling"]["read_gbs_rounds"])' \
    'd["b_fp8_gbs"] > 0 and abs(d["b_fp8_gbs"] - d["b_fp8_bytes"] / d["a2amm"]["median_s"] / 1e9) <= 1e-3 * d["b_fp8_gbs"]' \
    'd["ceiling"]["read_gbs"] is None or abs(d["fraction_of_read"] - d["b_fp8_gbs"] / d["ceiling"]["read_gbs"]) <= 1e-3 * d["fraction_of_read"]' \
    'd["ceiling"]["read_gbs"] is None or 0 < d["paired_fraction_of_read"]["min"] <= d["paired_fraction_of_read"]["median"] <= d["paired_fraction_of_read"]["max"]'
# 3 threads on fewer cores is warned about on stderr, and nothing else may be there
check "json: nothing else on stderr" bash -c "! grep -v 'threads on .* cores: the figures say little' '$SCRATCH/j.err' | grep -q ."

# --- A2AMM_ISA forces a level; OPENBLAS_CORETYPE is reported as it is
env A2AMM_ISA=ref "$A2AMM" bench gemm 3 65 32 --probe 0.02 --iters 1 --threads 2 --json >"$SCRATCH/ref.json"
check "forced ref runs and agrees" json_ok "$SCRATCH/ref.json" 'd["isa"] == "ref" and d["isa_forced"] is True' \
    'd["fraction_of"] == "fma"' 'd["onednn"]["agrees"] and d["openblas"]["agrees"]' \
    'd["check"]["samples"] == 3 * 65'
# every level: runs where the library says so (its fraction of its own
# ceiling), refused naming the level and the reason where not
for isa in avx2 avx512 amx; do
    if cpu_runs $isa; then
        env A2AMM_ISA=$isa "$A2AMM" bench gemm 5 70 64 --probe 0.02 --iters 1 --threads 1 --json >"$SCRATCH/$isa.json"
        check "forced $isa runs and agrees" json_ok "$SCRATCH/$isa.json" 'd["isa"] == "'$isa'"' \
            'd["onednn"]["agrees"] and d["openblas"]["agrees"]' '(d["fraction_of_ceiling"] or 1) > 0'
    else
        expect_fail "forced $isa is refused here, saying why" "cannot run the $isa kernels ($("$A2AMM" cpu --runs $isa | sed "s/^$isa: //"))" \
            env A2AMM_ISA=$isa "$A2AMM" bench gemm 5 70 64 --probe 0.02 --iters 1 --threads 1
    fi
done
if cpu_runs avx2; then
    # the avx2 level uses ymm only: its ceiling is the FMA loop on ymm, even where the CPU has zmm
    check "forced avx2: its fraction is of the ymm FMA ceiling" json_ok "$SCRATCH/avx2.json" \
        'd["fraction_of"] == "fma"' 'd["ceiling"]["fma_instruction"] == "vfmadd231ps ymm"'
fi
[ "$amx" = yes ] && check "amx: its fraction is of the AMX ceiling" json_ok "$SCRATCH/amx.json" 'd["fraction_of"] == "amx"'
[ "$avx512" = yes ] && check "avx512: its fraction is of the bf16 ceiling" json_ok "$SCRATCH/avx512.json" 'd["fraction_of"] == "bf16"'

# hidden features reach the peer too: oneDNN runs at no ISA above what a2amm may use
# (avx512bf16 hidden is a CPU with AVX-512 but no BF16, as Ice Lake: oneDNN
# keeps AVX-512 without its bf16 instructions; a2amm drops to avx2)
case ",${A2AMM_CPU_HIDE-}," in
*,avx512,* | *,avx2,*)
    check "oneDNN's ISA is capped below AVX-512" json_ok "$SCRATCH/j.json" \
        '"avx512" not in d["onednn"]["isa"] and "avx512" not in d["onednn"]["impl"] and "amx" not in d["onednn"]["impl"]' ;;
*,avx512bf16,*)
    check "oneDNN's ISA is capped below AVX512_BF16" json_ok "$SCRATCH/j.json" \
        'd["onednn"]["isa_cap"] == "avx512_core_vnni"' '"bf16" not in d["onednn"]["isa"] and "amx" not in d["onednn"]["isa"]' \
        '"bf16" not in d["onednn"]["impl"] and "amx" not in d["onednn"]["impl"]' ;;
*,amx,*)
    check "oneDNN's ISA is capped below AMX" json_ok "$SCRATCH/j.json" '"amx" not in d["onednn"]["isa"] and "amx" not in d["onednn"]["impl"]' ;;
esac
env OPENBLAS_CORETYPE=Haswell "$A2AMM" bench gemm 1 64 32 --probe 0.02 --iters 1 --threads 1 --no-flush --json >"$SCRATCH/h.json"
check "coretype reported as set, one thread, no flush" json_ok "$SCRATCH/h.json" \
    'd["openblas"]["coretype_env"] == "Haswell"' 'd["threads"] == 1 and d["onednn"]["threads"] == 1 and d["openblas"]["threads"] == 1' \
    'd["flush_bytes"] == 0' 'd["onednn"]["agrees"] and d["openblas"]["agrees"]'
expect_ok "unset coretype" env -u OPENBLAS_CORETYPE "$A2AMM" bench gemm 7 64 64 --probe 0.02 --iters 1 --no-flush --warmup 0
expect_output "unset coretype is said" "OPENBLAS_CORETYPE=(unset)"
expect_output "no flush is said" "caches not flushed (--no-flush)"

# --- the help's own example works as printed
ex=$("$A2AMM" bench gemm --help | sed -n 's/^  a2amm bench gemm /gemm /p' | head -1)
expect_ok "bench gemm help example: $ex" "$A2AMM" bench $ex

# --- bench op: fused, unfused, in place and the baseline in one table
expect_ok "bench op" "$A2AMM" bench op 40 128 24 2 --iters 2 --tile-m 16
for row in "fused" "unfused" "matmul alone" "baseline " "exposed communication" "ratios (medians)"; do
    expect_output "bench op row: $row" "$row"
done
check "bench op: a spread for each variant, the baseline's too" grep -Eq "^  spread, \(max - min\) / max: fused [0-9]+%.*, unfused [0-9]+%.*, matmul alone [0-9]+%.*, alltoall alone [0-9]+%.*, baseline [0-9]+%" "$SCRATCH/out"
check "bench op: fused against unfused, in words" grep -Eq "^  fused vs unfused: (no measurable difference|fused faster by|fused slower by)" "$SCRATCH/out"
# the matmul alone slowed on rank 0 (by 50 ms, as a busy machine may): no negative time, nothing exposed measurable
A2AMM_FAULT_RANK=0 A2AMM_FAULT=slow-matmul "$A2AMM" bench op 40 128 24 2 --iters 2 --tile-m 16 >"$SCRATCH/slow" 2>&1
check "bench op, matmul alone slowed: no negative time printed" bash -c "! grep -E -- '-[0-9.]+ ?(ms|s|%)' '$SCRATCH/slow'"
# where the fused median is not above the slowed matmul's (the case the fault makes, unless the machine
# slowed the fused run more), the exposed time is none measurable, not a negative one
if awk '$1 == "fused" && NF >= 5 { f = $3 } $1 == "matmul" && $2 == "alone" && NF >= 6 { m = $4 }
        END { exit !(f != "" && m != "" && f + 0 <= m + 0) }' "$SCRATCH/slow"; then
    check "bench op, matmul alone slowed: exposed communication none measurable" \
        grep -q "^  exposed communication, median fused - median matmul alone: none measurable (the run's median is not above" "$SCRATCH/slow"
else
    check "bench op, matmul alone slowed: the exposed line is there" \
        grep -q "^  exposed communication, median fused - median matmul alone: " "$SCRATCH/slow"
    echo "test_bench.sh: the fused run was slower than the slowed matmul alone here: the none-measurable case not met"
fi
# the baseline is oneDNN's matmul with packed weights: bf16 where this CPU has one, else fp32, said
expect_output "bench op: the baseline is oneDNN's" "a2amm_comm_alltoall, oneDNN "
# AVX512_BF16 here: oneDNN has a bf16 matmul; no AVX-512 at all: oneDNN 2.6 has none (fp32, said why);
# AVX-512 without BF16: oneDNN decides, and the line says which it ran
if [ "$bf16" = yes ]; then expect_output "bench op: oneDNN's bf16 matmul on this CPU" "bf16 matmul, weights packed once"
elif ! cpu_uses avx512f; then expect_output "bench op: oneDNN's fp32 matmul, said why" "fp32 matmul, weights packed once"
    expect_output "bench op: why not bf16" "no bf16 matmul for this CPU"
else check "bench op: the baseline line says bf16 or fp32 (and why)" grep -Eq "bf16 matmul, weights packed once|fp32 matmul, weights packed once.*no bf16 matmul for this CPU" "$SCRATCH/out"; fi
expect_ok "bench op --json, put path" "$A2AMM" bench op 40 96 24 3 --iters 2 --path put --json
check "bench op --json has every variant" python3 -c "
import json
o=json.loads(open('$SCRATCH/out').read())
assert o['path']=='put' and o['R']==3
for k in ('run','unfused','matmul','baseline'): assert o[k]['median_s']>0
assert 'oneDNN' in o['baseline_what'], o['baseline_what']"
expect_fail "bench op: bad shape" "K / R must be a multiple of 32" "$A2AMM" bench op 40 100 24 2
expect_fail "bench op: bad path" "--path must be direct or put" "$A2AMM" bench op 40 128 24 2 --path x
# the reverse op: the same rows; its baseline is the matmul, then the AllToAll of the result's blocks
expect_ok "bench op --op matmul-alltoall" "$A2AMM" bench op 40 128 42 3 --iters 2 --tile-m 16 --op matmul-alltoall
for row in "op matmul-alltoall" "fused" "unfused" "matmul alone" "alltoall alone" "baseline " "exposed communication" "ratios (medians)"; do
    expect_output "bench op --op matmul-alltoall row: $row" "$row"
done
expect_output "bench op --op matmul-alltoall: the matmul alone is X_r by B_r" "a2amm_matmul of X_r [M, K] by B_r, all N columns"
check "bench op --op matmul-alltoall: the baseline is oneDNN's matmul, then the AllToAll of its blocks" \
    grep -Eq "baseline: dequantize to fp32, the matmul to bf16, the whole AllToAll of its blocks: oneDNN .* matmul, weights packed once .*then a2amm_comm_alltoall of its column blocks" "$SCRATCH/out"
expect_ok "bench op --op matmul-alltoall --json" "$A2AMM" bench op 40 96 42 3 --iters 2 --path put --json --op matmul-alltoall
check "bench op --op matmul-alltoall --json: the op and every variant" python3 -c "
import json
o=json.loads(open('$SCRATCH/out').read())
assert o['op']=='matmul-alltoall' and o['path']=='put' and o['R']==3
for k in ('run','unfused','matmul','alltoall','baseline'): assert o[k]['median_s']>0, k
assert o['baseline_what'].startswith('oneDNN') and 'then a2amm_comm_alltoall' in o['baseline_what'], o['baseline_what']"
expect_fail "bench op --op matmul-alltoall: N not divisible by R" "N must be divisible by R for matmul-alltoall" \
    "$A2AMM" bench op 40 128 40 3 --op matmul-alltoall
expect_fail "bench op: an unknown op" "--op must be alltoall-matmul" "$A2AMM" bench op 40 128 24 2 --op x
expect_ok "bench op --help" "$A2AMM" bench op --help
expect_output "bench op --help names --op" "--op alltoall-matmul|matmul-alltoall"
ex=$("$A2AMM" bench op --help | sed -n 's/^  a2amm bench op //p' | grep -- "--op matmul-alltoall")
expect_ok "bench op help's reverse example: $ex" "$A2AMM" bench op $ex
expect_output "bench op help's reverse example runs the reverse op" "op matmul-alltoall"
check "bench op left no temporary folder" test -z "$(ls -A "$TMPDIR")"

# --- bench api: the in-memory call beside a2amm run, and setting weights
expect_ok "bench api" "$A2AMM" bench api 40 128 24 2 --iters 2 --rounds 2 --tile-m 16
for row in "a2amm run (fused, perf mode)" "in-memory call (a2amm_op_run)" "set_weights (per rank, slowest)" \
           "in-memory, weights set every call" "in-memory call / a2amm run (medians): "; do
    expect_output "bench api row: $row" "$row"
done
# the recorder's cost counts only beyond the spread: within it the line says none is measurable
check "bench api: the traced call's cost against the spreads" python3 - "$SCRATCH/out" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
def row(name):
    m = re.search(r"^  %s +([0-9.]+) +([0-9.]+) +([0-9.]+) " % re.escape(name), text, re.M)
    return tuple(float(m.group(i)) for i in (1, 2, 3))
c, t = row("in-memory call (a2amm_op_run)"), row("in-memory call, traced (recorder)")
gap, spread = abs(t[1] - c[1]), max(c[2] - c[0], t[2] - t[0])
said = "within the spread: none measurable" in text
# rounded to 0.001 ms: only a clear case must agree with what is said
if gap < spread - 0.002: assert said
if gap > spread + 0.002: assert not said
EOF
expect_ok "bench api --json, put path" "$A2AMM" bench api 40 96 24 3 --iters 2 --rounds 1 --path put --json
check "bench api --json has the figures" python3 -c "
import json
o = json.loads(open('$SCRATCH/out').read())
assert o['R'] == 3 and o['rounds'] == 1 and o['iters'] == 2
assert o['run_median_s'] > 0 and o['call_median_s'] > 0 and o['set_weights_median_s'] > 0
assert abs(o['call_with_weights_s'] - o['call_median_s'] - o['set_weights_median_s']) <= 1e-4 * o['call_with_weights_s']
assert abs(o['call_over_run'] - o['call_median_s'] / o['run_median_s']) <= 1e-3 * o['call_over_run']"
expect_fail "bench api: bad shape" "K / R must be a multiple of 32" "$A2AMM" bench api 40 100 24 2
check "bench api left no temporary folder" test -z "$(ls -A "$TMPDIR")"

# --- bench gemm --sweep: M = 1 .. 128 at one N and K, a line each against oneDNN and the read (eight
# whole runs: once, with nothing hidden; the levels themselves are the single runs' above)
if [ -z "${A2AMM_CPU_HIDE:-}" ]; then
    expect_ok "bench gemm --sweep --json" "$A2AMM" bench gemm --sweep 64 64 --iters 1 --json --quiet
    cp "$SCRATCH/out" "$SCRATCH/sweep.json"
    check "bench gemm --sweep: M = 1 .. 128, each measured and agreeing with the fp64 check and oneDNN" python3 -c "
import json, math
d = json.load(open('$SCRATCH/sweep.json'))
rows = d['rows']
assert d['N'] == 64 and d['K'] == 64, d
assert [r['M'] for r in rows] == [1, 2, 4, 8, 16, 32, 64, 128], rows
for r in rows:
    assert r['agrees'] and r['a2amm_median_s'] > 0 and math.isfinite(r['speedup']) and r['b_fp8_gbs'] > 0, r
"
fi
expect_fail "bench gemm --sweep: N K or nothing" "expected N K or nothing" "$A2AMM" bench gemm --sweep 1 2 3
expect_ok "bench gemm --help names --sweep" "$A2AMM" bench gemm --help
expect_output "bench gemm --help names --sweep" "--sweep"

# --- bench moe: the MoE op beside its experts alone, the gather + reduce-scatter way (1), alltoallv + oneDNN
#     experts (2), a read of the experts
expect_ok "bench moe --help" "$A2AMM" bench moe --help
expect_output "bench moe --help has an example" "a2amm bench moe 2 16 2048 1408 64 6"
expect_fail "bench moe: K over E names that rule alone" "bench moe: K (experts a token) must be at most E (got" \
    "$A2AMM" bench moe 2 16 64 64 8 9
expect_fail "bench moe: E not a multiple of R names that rule alone" "bench moe: E must be a multiple of R (got" \
    "$A2AMM" bench moe 3 16 64 64 8 2
for args in "2 6 64 32 4 2" "3 5 96 64 6 3 --skew" "1 4 64 32 2 1 --uniform-codes"; do
    # shellcheck disable=SC2086
    expect_ok "bench moe $args" "$A2AMM" bench moe $args --iters 2
    for row in "a2amm MoE call (fused schedule)" "a2amm MoE call, unfused schedule" "a2amm MoE call, overlap schedule" \
        "experts alone" "(1) gather + reduce-scatter" "(2) alltoallv + oneDNN bf16 experts" \
        "read of the experts' fp8 codes" "call / experts alone"; do
        expect_output "bench moe $args: $row" "$row"
    done
    # the baseline computes what the op does by another route: the same bits, or the bench fails
    expect_output "bench moe $args: the baseline and the other schedules give the op's bits" "(1), the unfused and the overlap schedules give the fused call's bits on every rank: yes"
    # (2) rounds g, u and y to bf16: near the op's output (the bench fails past 5%), and says what it ran
    expect_output "bench moe $args: baseline (2) says what it ran" "(2) runs oneDNN"
    # a row whose spread is over 10% of its max is marked wide, and then the note says what that means
    check "bench moe $args: wide rows marked as the rule says, and explained" python3 - "$SCRATCH/out" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
rows = re.findall(r"^  (\S.*?) +([0-9.]+) +([0-9.]+) +([0-9.]+) +[0-9]+( +wide)?$", text, re.M)
assert len(rows) == 7, rows
for name, lo, mid, hi, wide in rows:
    # the figures are rounded to 0.001 ms: only a clear case must agree with the mark
    lo, hi = float(lo), float(hi)
    if lo < 0.9 * hi - 0.002: assert wide, name
    if lo > 0.9 * hi + 0.002: assert not wide, name
assert any(r[4] for r in rows) == ("a busy machine:" in text)
EOF
done
expect_fail "bench moe: E not a multiple of R" "E must be a multiple of R" "$A2AMM" bench moe 3 4 64 32 4 2
expect_fail "bench moe: H not a multiple of 32" "H and I must be multiples of 32" "$A2AMM" bench moe 2 4 48 32 4 2
expect_fail "bench moe: too few arguments" "expected R T H I E K, got 3" "$A2AMM" bench moe 2 4 64
expect_fail "bench moe: unknown option" "unknown option '--bogus'" "$A2AMM" bench moe 2 4 64 32 4 2 --bogus
expect_fail "bench moe --transport mpi without mpirun: a line that works as printed, as root too" \
    "mpirun --allow-run-as-root --oversubscribe -np 2 a2amm bench moe 2 8 64 32 4 2 --transport mpi" \
    "$A2AMM" bench moe 2 8 64 32 4 2 --transport mpi
expect_fail "bench op --transport mpi without mpirun: a line that works as printed, as root too" \
    "mpirun --allow-run-as-root --oversubscribe -np 2 a2amm bench op 256 512 64 2 --transport mpi" \
    "$A2AMM" bench op 256 512 64 2 --transport mpi
for b in moe op; do
    "$A2AMM" bench $b --help >"$SCRATCH/out" 2>&1
    expect_output "bench $b --help: its mpirun line works as printed, as root too" \
        "mpirun --allow-run-as-root --oversubscribe -np R"
done
# progress on stderr where it is a file: the preparation, then the repetitions, the last one's too; none with --quiet
"$A2AMM" bench moe 2 6 64 32 4 2 --iters 3 >/dev/null 2>"$SCRATCH/moe-err"
check "bench moe, stderr a file: the preparation said" grep -q "^a2amm bench moe: preparing 2 ranks' data, the op and the baselines ([0-9]* s)$" "$SCRATCH/moe-err" || tail -15 "$SCRATCH/moe-err" >&2
check "bench moe, stderr a file: the last repetition's line" grep -q "^a2amm bench moe: repetition 3 of 3 ([0-9]* s)$" "$SCRATCH/moe-err" || tail -15 "$SCRATCH/moe-err" >&2
check "bench moe, stderr a file: no carriage return" bash -c "! grep -q $'\r' '$SCRATCH/moe-err'"
"$A2AMM" bench moe 2 6 64 32 4 2 --iters 2 --quiet >/dev/null 2>"$SCRATCH/moe-err"
check "bench moe --quiet, stderr a file: nothing there" test ! -s "$SCRATCH/moe-err"
# a rank stuck outside every wait (paused before its data; one rank, so no barrier waits for it) fails
# the launch once it shows no sign of life for 1.5 --timeout + 1 s, named, instead of hanging
A2AMM_FAULT=pause-bench-prepare A2AMM_FAULT_RANK=0 timeout 60 "$A2AMM" bench moe 1 4 64 32 2 1 --iters 2 \
    --timeout 1 --quiet >"$SCRATCH/stuck" 2>&1
rc=$?
check "bench moe, a rank stuck: the launch fails (exit $rc; 124: it hung)" test "$rc" -eq 1
check "bench moe, a rank stuck: named" grep -q "rank 0 (pid [0-9]*) showed no sign of life for 2.5 s" "$SCRATCH/stuck"

# --- bench grouped: E experts of M rows as the MoE op runs them, against a read of their weights
expect_ok "bench grouped" "$A2AMM" bench grouped 4 3 64 32 --iters 2 --threads 2
for row in "a2amm grouped experts (gate+up, down)" "read of the same bytes" "experts / read:" "paired by repetition"; do
    expect_output "bench grouped: $row" "$row"
done
"$A2AMM" bench grouped 4 3 64 32 --iters 3 --threads 2 >/dev/null 2>"$SCRATCH/grouped-err"
check "bench grouped, stderr a file: the preparation said" grep -q "^a2amm bench grouped: making and preparing 4 experts' weights ([0-9]* s)$" "$SCRATCH/grouped-err" || tail -15 "$SCRATCH/grouped-err" >&2
check "bench grouped, stderr a file: the last repetition's line" grep -q "^a2amm bench grouped: repetition 3 of 3 ([0-9]* s)$" "$SCRATCH/grouped-err" || tail -15 "$SCRATCH/grouped-err" >&2
"$A2AMM" bench grouped 4 3 64 32 --iters 2 --threads 2 --quiet >/dev/null 2>"$SCRATCH/grouped-err"
check "bench grouped --quiet, stderr a file: nothing there" test ! -s "$SCRATCH/grouped-err"
expect_ok "bench grouped --help" "$A2AMM" bench grouped --help
expect_output "bench grouped --help has an example" "a2amm bench grouped 64 4 2048 1408"
expect_fail "bench grouped: H not a multiple of 32" "H and I must be multiples of 32" "$A2AMM" bench grouped 4 3 48 32
expect_fail "bench grouped: too few arguments" "expected E M H I, got 2" "$A2AMM" bench grouped 4 3

finish
