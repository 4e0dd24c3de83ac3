#!/usr/bin/env python3
"""The fused op at scale, from two measured rates (docs/performance.md).

One call, per rank: the matmul  T_mm = 2 M K N / F  (F: one rank's matmul
rate, GFLOP/s); the AllToAll  T_a2a = p (R - p) M (K / R) (1 + 1/32) / B
bytes over the node's link (B: Gbit/s; p ranks per node; the 1/32 is the
E8M0 scales; rows between ranks of one node use memory, taken as free) plus
a per-message cost  alpha  for the (R - p) messages a tile sends per rank.
Fused, tile by tile: max(T_mm, T_a2a + msgs) + one tile of the other (the
pipeline's fill, or its drain); unfused: T_mm + T_a2a + msgs. With K fixed, T_a2a / T_mm
tends to p F 1.03 / (2 N B) as R grows: whether overlap hides the AllToAll
depends on N, the rates and ranks per node, not on R; the message term grows
with R and takes over at large R.

  scaling-model.py --gflops F --gbits B [--alpha-us A] [--check R,MM_MS,A2A_MS,FUSED_MS ...]

--check compares the model's fused time with a measured run (its matmul
alone and AllToAll alone in, its fused out), e.g. the namespace runs.
"""
import argparse

SHAPES = [(2048, 8192, 3584), (512, 8192, 3584), (2048, 8192, 256)]  # the seed's perf shape, a short M (decode-like), a thin N
RANKS = [8, 16, 64, 256, 1024]
PER_NODE = [1, 8]


def model(M, K, N, R, p, F, B, alpha, tile=512):
    ka = K / R
    t_mm = 2 * M * K * N / (F * 1e9)
    t_bytes = p * max(R - p, 0) * M * ka * (1 + 1 / 32) * 8 / (B * 1e9)
    tiles = -(-M // tile)
    t_msgs = tiles * max(R - p, 0) * alpha * 1e-6
    t_a2a = t_bytes + t_msgs
    fused = max(t_mm, t_a2a) + min(t_mm, t_a2a) / tiles  # the pipeline's fill (or drain) of one tile
    unfused = t_mm + t_a2a
    return t_mm, t_a2a, fused, unfused


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gflops", type=float, required=True, help="one rank's matmul rate, GFLOP/s")
    ap.add_argument("--gbits", type=float, nargs="+", required=True, help="link rates per node, Gbit/s")
    ap.add_argument("--alpha-us", type=float, default=5.0, help="cost of one message, microseconds (TCP: ~5)")
    ap.add_argument("--check", nargs="*", default=[], help="R,MM_MS,A2A_MS,FUSED_MS of measured runs")
    a = ap.parse_args()
    for c in a.check:
        R, mm, a2a, fused = (float(x) for x in c.split(","))
        want = max(mm, a2a) + min(mm, a2a) / 4  # 4 tiles of 512 rows at M = 2048
        print(f"check R={int(R)}: measured fused {fused:.1f} ms, model {want:.1f} ms "
              f"(from matmul {mm:.1f} and AllToAll {a2a:.1f}): {fused / want:.2f}x the model")
    for B in a.gbits:
        print(f"\nF = {a.gflops:g} GFLOP/s per rank, link {B:g} Gbit/s per node, {a.alpha_us:g} us a message")
        print(f"{'M K N':>16} {'R':>5} {'p':>2} {'matmul ms':>10} {'a2a ms':>9} {'fused ms':>9} "
              f"{'unfused ms':>10} {'fused/mm':>8}  overlap")
        for (M, K, N) in SHAPES:
            for R in RANKS:
                for p in PER_NODE:
                    if p > R or K % R or (K // R) % 32:
                        continue
                    t_mm, t_a2a, fused, unfused = model(M, K, N, R, p, a.gflops, B, a.alpha_us)
                    verdict = "hides the AllToAll" if t_a2a <= t_mm else "cannot: the link is the bound"
                    print(f"{M:>5} {K:>5} {N:>4} {R:>5} {p:>2} {t_mm * 1e3:>10.2f} {t_a2a * 1e3:>9.2f} "
                          f"{fused * 1e3:>9.2f} {unfused * 1e3:>10.2f} {fused / t_mm:>8.2f}  {verdict}")


if __name__ == "__main__":
    main()
