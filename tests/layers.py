"""The house's layers from the sources' #include lines (tests/test_layers.sh).

python3 tests/layers.py ROOT: prints each folder of ROOT/src and the folders
it includes; exits 1, naming each fault, when a library folder includes a
harness folder, a folder is neither, or folders include each other round a
circle.
"""
import os, re, sys
root = sys.argv[1]
library = {"common", "mx", "gemm", "comm", "op", "api", "mpi"}
harness = {"util", "io", "gen", "ref", "verify", "cli"}
src = os.path.join(root, "src")
edges = {}
for d in sorted(os.listdir(src)):
    if not os.path.isdir(os.path.join(src, d)):
        continue
    edges.setdefault(d, set())
    for f in os.listdir(os.path.join(src, d)):
        if not f.endswith((".c", ".h")):
            continue
        for m in re.finditer(r'^\s*#\s*include\s+"([a-z_0-9]+)/', open(os.path.join(src, d, f)).read(), re.M):
            if m.group(1) != d:
                edges[d].add(m.group(1))
bad = 0
for d in sorted(edges):
    print(f"{d} -> {' '.join(sorted(edges[d])) or '(nothing)'}")
    if d not in library | harness:
        print(f"FOLDER {d}: neither library nor harness (say which in this test and the Makefile)"); bad += 1
    if d in library:
        for t in sorted(edges[d] & harness):
            print(f"LAYER: library folder {d} includes harness folder {t}"); bad += 1
# circles: a depth-first search over the folder graph
state = {}
def visit(d, path):
    global bad
    state[d] = 1
    for t in sorted(edges.get(d, ())):
        if state.get(t) == 1:
            print("CIRCLE: " + " -> ".join(path[path.index(t):] + [t])); bad += 1
        elif t not in state:
            visit(t, path + [t])
    state[d] = 2
for d in sorted(edges):
    if d not in state:
        visit(d, [d])
sys.exit(1 if bad else 0)
