#!/usr/bin/env bash
# Paths the command writes that the user names: run's and bench op's
# --trace FILE and timeline's -o FILE replace what is there (a new file
# renamed over it), so each refuses, before any work and with exit 2, a
# path that is not a regular file (a device, a FIFO, a folder) and the very
# files the work reads or writes: the run's inputs, meta file, goldens and
# outputs, through a symlink or a hard link too; timeline refuses to draw
# over the trace it reads, and a FIFO as its trace is refused at once
# instead of waiting forever. Nothing is created or changed at a refused
# path. A character device is one made here (as root), never /dev/null
# (checked still a character device at the end).
. "$(dirname "$0")/lib.sh"

d="$SCRATCH/d"
"$A2AMM" gen 64 256 32 2 --dir "$d" --quiet >/dev/null
"$A2AMM" run 64 256 32 2 --dir "$d" >/dev/null
data_files() { (cd "$d" && find . | sort); }
# snapshot: the data folder as it is now, for data_untouched
snapshot() { data_files >"$SCRATCH/files.before"; rm -rf "$SCRATCH/d.copy"; cp -a "$d" "$SCRATCH/d.copy"; }
snapshot
# the data folder as it was: the same files, the same bytes, nothing added
data_untouched() {
    data_files | cmp -s - "$SCRATCH/files.before" && diff -r "$d" "$SCRATCH/d.copy" >/dev/null
}

# refused "what" "text" cmd...: exit 2 (not 0, not 1 after the work), a
# message with text, the run never started, the data untouched (put back
# when it was not, so that one failure does not spill into the next case)
refused() {
    local what=$1 text=$2 rc=0; shift 2
    "$@" >"$SCRATCH/out" 2>&1 || rc=$?
    check "$what: exit 2 (got $rc)" test "$rc" -eq 2 || sed 's/^/    /' "$SCRATCH/out" | tail -5 >&2
    expect_output "$what: the message" "$text"
    check "$what: nothing ran" bash -c "! grep -qE 'Status:|a2amm (run|bench op): M=' '$SCRATCH/out'"
    check "$what: the data untouched" data_untouched || { rm -rf "$d"; cp -a "$SCRATCH/d.copy" "$d"; }
}

# --- a character device: refused, and still a device afterwards. Root
# names one made here; anyone else /dev/null itself (which they cannot
# replace); root without mknod skips these cases rather than risk /dev/null.
dev=""
if [ "$(id -u)" != 0 ]; then
    dev=/dev/null
elif mknod "$SCRATCH/null" c 1 3 2>/dev/null; then
    dev="$SCRATCH/null"
else
    echo "test_paths.sh: root without mknod here: the character-device cases are skipped (never /dev/null as root)"
fi
[ -z "$dev" ] || ln -s "$dev" "$SCRATCH/to-dev"
# device_case "what" "text" cmd... (DEV in cmd stands for the device, TO_DEV
# for a symlink to it): refused, and the device still one afterwards (made
# again when it is not, for the next case)
device_case() {
    [ -n "$dev" ] || return 0
    local what=$1 text=$2 a args=(); shift 2
    for a in "$@"; do
        case $a in DEV) args+=("$dev") ;; TO_DEV) args+=("$SCRATCH/to-dev") ;; *) args+=("$a") ;; esac
    done
    refused "$what" "${text//DEV/$dev}" "${args[@]}"
    check "$what: the device is still a character device" test -c "$dev" -a -L "$SCRATCH/to-dev" -a -c "$SCRATCH/to-dev" ||
        { [ "$dev" = /dev/null ] || { rm -f "$dev" && mknod "$dev" c 1 3; }; ln -sfn "$dev" "$SCRATCH/to-dev"; }
}
device_case "run --trace a character device" "--trace: DEV is a character device, not a regular file" \
    "$A2AMM" run 64 256 32 2 --dir "$d" --trace DEV
device_case "run perf --trace a symlink to a character device" "is a character device" \
    "$A2AMM" run 64 256 32 2 perf --iters 1 --dir "$d" --trace TO_DEV
mkfifo "$SCRATCH/fifo"
refused "run --trace a FIFO" "--trace: $SCRATCH/fifo is a FIFO, not a regular file" \
    timeout 20 "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$SCRATCH/fifo"
check "the FIFO is still a FIFO" test -p "$SCRATCH/fifo" || { rm -f "$SCRATCH/fifo"; mkfifo "$SCRATCH/fifo"; }
refused "run --trace a folder" "is a folder" "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$SCRATCH"

# --- the run's own files, every one of them, for every rank
for f in input/a2amm-meta.txt input/{0,1}/input_{a,scaleA,b,scaleB}.bin output/{0,1}/{cpu_output,npu_out}.bin; do
    refused "run --trace DIR/$f" "--trace: $d/$f would replace $d/$f" "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$d/$f"
done
refused "the seed's form, --trace an input" "would replace" "$A2AMM" 64 256 32 2 --dir "$d" --trace "$d/input/1/input_b.bin"
refused "run perf --trace an input" "(rank 0's A, one of the data's files)" \
    "$A2AMM" run 64 256 32 2 perf --iters 1 --dir "$d" --trace "$d/input/0/input_a.bin"
# the same file by another name: a symlink, a hard link, a relative path
ln -s "$d/input/0/input_scaleA.bin" "$SCRATCH/link-to-input"
refused "run --trace a symlink to an input" "would replace $d/input/0/input_scaleA.bin" \
    "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$SCRATCH/link-to-input"
check "the symlink is still a symlink" test -L "$SCRATCH/link-to-input"
ln "$d/output/1/cpu_output.bin" "$SCRATCH/hard-golden"
refused "run --trace a hard link to a golden" "would replace $d/output/1/cpu_output.bin (rank 1's golden" \
    "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$SCRATCH/hard-golden"
rm "$SCRATCH/hard-golden"
refused "run --trace an input by a relative path" "would replace" \
    bash -c "cd '$d/input/1' && '$A2AMM' run 64 256 32 2 --dir ../.. --trace input_scaleB.bin"
# an output the run has yet to write: its name in its folder
mv "$d/output/1/npu_out.bin" "$SCRATCH/npu_out.1"
snapshot
refused "run --trace the output it is about to write" "(rank 1's output, one of the data's files)" \
    "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$d/output/1/npu_out.bin"
check "that output was not written" test ! -e "$d/output/1/npu_out.bin"
mv "$SCRATCH/npu_out.1" "$d/output/1/npu_out.bin"
snapshot
# a trace beside the data (not one of its files) is fine, and so is one over an earlier trace
expect_ok "run --trace a new file in the data folder" "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$d/t.json"
expect_ok "run --trace over an earlier trace" "$A2AMM" run 64 256 32 2 --dir "$d" --trace "$d/t.json"
check "the trace is a trace" grep -q traceEvents "$d/t.json"
rm "$d/t.json"

# --- bench op: the same rules; with --dir, that folder's files are its data
device_case "bench op --trace a character device" "--trace: DEV is a character device" \
    "$A2AMM" bench op 64 256 32 2 --iters 1 --trace DEV
refused "bench op --trace an input of its --dir" "--trace: $d/input/1/input_a.bin would replace" \
    "$A2AMM" bench op 64 256 32 2 --iters 1 --dir "$d" --trace "$d/input/1/input_a.bin"
refused "bench op --trace a symlink to an input of its --dir" "would replace $d/input/0/input_scaleA.bin" \
    "$A2AMM" bench op 64 256 32 2 --iters 1 --dir "$d" --trace "$SCRATCH/link-to-input"
check "bench op left no temporary folder" test -z "$(ls -A "$TMPDIR")"

# --- timeline: never over its own trace, never a FIFO
"$A2AMM" run 64 256 32 2 --dir "$d" --trace "$SCRATCH/t.json" >/dev/null
cp "$SCRATCH/t.json" "$SCRATCH/t.copy"
# the trace t.json, a hard link and a symlink to it (made again after a case that replaced them)
trace_links() {
    rm -f "$SCRATCH/t.json" "$SCRATCH/t-hard.json" "$SCRATCH/t-sym.svg"
    cp "$SCRATCH/t.copy" "$SCRATCH/t.json" && ln "$SCRATCH/t.json" "$SCRATCH/t-hard.json" && ln -s t.json "$SCRATCH/t-sym.svg"
}
trace_links
for out in "$SCRATCH/t.json" "$SCRATCH/t-hard.json" "$SCRATCH/t-sym.svg"; do
    refused "timeline -o ${out##*/} (the trace it reads)" "-o: $out would replace $SCRATCH/t.json, the trace it draws" \
        "$A2AMM" timeline "$SCRATCH/t.json" -o "$out"
    check "timeline -o ${out##*/}: the trace unchanged" cmp -s "$SCRATCH/t.json" "$SCRATCH/t.copy"
    check "timeline -o ${out##*/}: the links as they were" \
        test -L "$SCRATCH/t-sym.svg" -a "$SCRATCH/t-hard.json" -ef "$SCRATCH/t.json" || trace_links
done
device_case "timeline -o a character device" "-o: DEV is a character device" "$A2AMM" timeline "$SCRATCH/t.json" -o DEV
refused "timeline -o a FIFO" "-o: $SCRATCH/fifo is a FIFO" timeout 20 "$A2AMM" timeline "$SCRATCH/t.json" -o "$SCRATCH/fifo"
refused "timeline -o a folder" "-o: $SCRATCH is a folder" "$A2AMM" timeline "$SCRATCH/t.json" -o "$SCRATCH"
check "the refused timelines drew nothing" test ! -e "$SCRATCH/t.svg"
check "no temporary files left" test -z "$(ls "$SCRATCH" | grep '\.tmp\.')"
# a FIFO as the trace: refused at once (a writer never comes), not a wait
mkfifo "$SCRATCH/f.json"
start=$SECONDS
rc=0; timeout 20 "$A2AMM" timeline "$SCRATCH/f.json" >"$SCRATCH/out" 2>&1 || rc=$?
check "timeline of a FIFO: refused, not killed by timeout (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
check "timeline of a FIFO: at once ($((SECONDS - start)) s)" test $((SECONDS - start)) -le 5
expect_output "timeline of a FIFO: the reason" "$SCRATCH/f.json is a FIFO, not a file"
check "timeline of a FIFO: no picture" test ! -e "$SCRATCH/f.svg"
expect_fail "timeline of a folder: refused" "$SCRATCH/d is a directory, not a file" timeout 20 "$A2AMM" timeline "$SCRATCH/d"
check "timeline of a folder: no picture" test ! -e "$SCRATCH/d.svg"
expect_ok "timeline of the trace through its symlink, to a new picture" \
    "$A2AMM" timeline "$SCRATCH/t-sym.svg" -o "$SCRATCH/picture.svg"
check "the picture is a picture" grep -q "<svg" "$SCRATCH/picture.svg"

check "/dev/null is still a character device" test -c /dev/null
finish
