#!/usr/bin/env python3
"""The recorder's RSS over a soak, from what bench/long_cell.sh prints (a line of
seconds and RSS MiB every 10 s): the RSS at each minute, the growth over the cell's last
10 minutes (the first sample at or after its end less the first at or after 600 s
before), and a text plot of the cell from its second minute.

    python3 bench/rss_plot.py OUT [CELL_S=900] [MIB_PER_ROW=1]
"""
import sys


def at(samples, s):
    """The first sample at or after `s` seconds."""
    return next((x for x in samples if x[0] >= s), None)


def main():
    path = sys.argv[1]
    cell = int(sys.argv[2]) if len(sys.argv) > 2 else 900
    step = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    samples = []
    for line in open(path):
        parts = line.split()
        if len(parts) == 2:
            try:
                samples.append((int(parts[0]), float(parts[1])))
            except ValueError:
                pass
    if not samples:
        sys.exit(f"{path}: no samples (lines of seconds and RSS MiB)")
    by_minute = []
    for m in range(60, cell + 1, 60):
        x = at(samples, m)
        if x and (not by_minute or x[0] != by_minute[-1][0]):
            by_minute.append(x)
    print("| s | " + " | ".join(str(s) for s, _ in by_minute) + " |")
    print("|---|" + "---:|" * len(by_minute))
    print("| RSS MiB | " + " | ".join(f"{r:.1f}" for _, r in by_minute) + " |")
    start, end = at(samples, cell - 600), at(samples, cell)
    if start and end:
        print(
            f"\nlast 10 minutes: {start[1]:.1f} MiB at {start[0]} s -> {end[1]:.1f} at {end[0]} s:"
            f" {end[1] - start[1]:+.1f} MiB"
        )
    shown = [(s, r) for s, r in samples if 60 <= s <= (end or samples[-1])[0]]
    if not shown:
        return
    lo = int(min(r for _, r in shown) // step)
    hi = int(max(r for _, r in shown) // step)
    print(f"\nRSS MiB (a sample every 10 s from 60 s on; one row is {step:g} MiB)")
    for row in range(hi, lo - 1, -1):
        line = "".join("*" if int(r // step) == row else " " for _, r in shown)
        print(f"{row * step:7.1f} | {line.rstrip()}")
    width = len(shown)
    first, last = f"{shown[0][0]} s", f"{shown[-1][0]} s"
    print("        +" + "-" * (width + 1))
    print("         " + first + " " * max(width - len(first) - len(last) + 1, 1) + last)


if __name__ == "__main__":
    main()
