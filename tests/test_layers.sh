#!/usr/bin/env bash
# The house's layers, as docs/design.md draws them, read from the sources'
# #include lines (tests/layers.py): the library's folders include only
# library folders (never the harness), and no two folders include each
# other, directly or round a longer circle. Prints the graph. The checker
# is shown to see a circle and a library folder that reaches up.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
layers() { python3 "$root/tests/layers.py" "$1" >"$SCRATCH/layers" 2>&1; }
layers "$root"
rc=$?
cat "$SCRATCH/layers"
check "the library's folders include no harness folder, and no folders form a circle" test $rc -eq 0

# made-up houses with the faults the check is for
fake="$SCRATCH/fake"; mkdir -p "$fake/src/io" "$fake/src/gen" "$fake/src/op"
echo '#include "gen/gen.h"' >"$fake/src/io/io.c"
echo '#include "io/io.h"' >"$fake/src/gen/gen.c"
layers "$fake"
check "a circle io <-> gen is refused" test $? -ne 0
check "and named" grep -q "CIRCLE: gen -> io -> gen" "$SCRATCH/layers"
rm "$fake/src/gen/gen.c"; echo '#include "io/io.h"' >"$fake/src/op/exec.c"
layers "$fake"
check "the library's op including the harness's io is refused" test $? -ne 0
check "and named" grep -q "LAYER: library folder op includes harness folder io" "$SCRATCH/layers"
rm "$fake/src/op/exec.c"
layers "$fake"
check "without the faults the made-up house passes" test $? -eq 0
finish
