#!/usr/bin/env python3
"""Reads the `heapwatch` lines a recorder built with heapwatch.patch prints each second
(live heap bytes counted by a global allocator, their high-water mark, the writer
queue's and the stash's bytes by estimated weight, live bytes by size class) and prints
per-window figures, then live bytes by size class at two moments.

    git apply bench/heapwatch/heapwatch.patch      # an experiment: never commit it applied
    WORK=DIR bash bench/long_cell.sh 1000 15m 16
    python3 bench/heapwatch/heapwatch.py DIR/record.log [WINDOW_S=60] [FROM_S TO_S]
"""
import re
import sys

LINE = re.compile(
    r"heapwatch t=([\d.]+) live=(-?\d+) livemax=(-?\d+) queuemax=(\d+) "
    r"stash=(\d+) stashrecs=(\d+) classes=(.*)"
)


def rows(path):
    out = []
    for line in open(path):
        m = LINE.match(line)
        if m:
            classes = [tuple(map(int, c.split(":"))) for c in m.group(7).split(",")]
            out.append([float(m.group(1))] + [int(x) for x in m.groups()[1:6]] + [classes])
    return out


def main():
    data = rows(sys.argv[1])
    if not data:
        sys.exit(f"{sys.argv[1]}: no heapwatch lines (was the recorder built with the patch?)")
    window = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    t0 = data[0][0] - 1
    mib = 2**20
    print("window_s  live_min_MiB  live_max_MiB  queue_max_MiB  stash_records")
    wins = {}
    for t, live, livemax, queue, _stash, recs, _ in data:
        k = int((t - t0) // window * window)
        w = wins.setdefault(k, [float("inf"), 0, 0, 0])
        w[0], w[1], w[2], w[3] = min(w[0], live), max(w[1], livemax), max(w[2], queue), recs
    for k in sorted(wins):
        lo, hi, q, recs = wins[k]
        print(f"{k:8d}  {lo / mib:12.1f}  {hi / mib:12.1f}  {q / mib:13.2f}  {recs:13d}")
    if len(sys.argv) > 4:
        a, b = float(sys.argv[3]), float(sys.argv[4])

        def mean(t):
            sel = [r for r in data if abs((r[0] - t0) - t) <= window / 2]
            if not sel:
                sys.exit(f"no samples within {window / 2:.0f} s of {t:.0f} s")
            return [
                (sum(r[6][i][0] for r in sel) / len(sel), sum(r[6][i][1] for r in sel) / len(sel))
                for i in range(len(sel[0][6]))
            ]

        ma, mb = mean(a), mean(b)
        print(f"\nlive bytes by block size, mean over {window:.0f} s around {a:.0f} s and {b:.0f} s")
        for i, ((ba, na), (bb, nb)) in enumerate(zip(ma, mb)):
            if abs(bb - ba) > 20_000 or ba > mib:
                lo = 2 ** (i - 1) if i else 0
                print(f"{lo:>10d}..{2**i:<10d} {ba / mib:8.2f} -> {bb / mib:8.2f} MiB "
                      f"({(bb - ba) / mib:+.2f}), blocks {na:.0f} -> {nb:.0f}")


main()
