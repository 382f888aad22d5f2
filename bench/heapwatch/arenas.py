#!/usr/bin/env python3
"""The recorder's heap over a long cell, arena by arena: resident MiB of each 64 MiB-aligned
region of anonymous memory (glibc gives each thread's arena heaps of 64 MiB, so a region
is one arena's heap; `heap` is the main arena) in each saved copy of /proc/PID/smaps.
bench/long_cell.sh saves one a minute as WORK/smaps/smaps.SECONDS. Regions that never
pass 2 MiB are left out of the columns, not out of the total.

    python3 bench/heapwatch/arenas.py WORK/smaps
"""
import collections
import glob
import re
import sys

MAPPING = re.compile(r"^([0-9a-f]+)-[0-9a-f]+ \S+ \S+ \S+ (\d+)\s*(.*)$")


def regions(path):
    """Resident KiB per region of one smaps copy."""
    per = collections.Counter()
    region = None
    with open(path) as f:
        for line in f:
            m = MAPPING.match(line)
            if m:
                name = m.group(3).strip()
                if name == "[heap]":
                    region = "heap"
                elif m.group(2) == "0" and name == "":
                    region = f"{int(m.group(1), 16) >> 26 << 26:x}"
                else:
                    region = None
            elif region is not None and line.startswith("Rss:"):
                per[region] += int(line.split()[1])
    return per


def main():
    copies = glob.glob(sys.argv[1] + "/smaps.*")
    samples = [(int(p.rsplit(".", 1)[1]), regions(p)) for p in copies]
    samples.sort()
    top = collections.Counter()
    for _, per in samples:
        for k, v in per.items():
            top[k] = max(top[k], v)
    shown = sorted(k for k, v in top.items() if v > 2048)
    print("| s | " + " | ".join(shown) + " | all anonymous |")
    print("|---:|" + "---:|" * (len(shown) + 1))
    for t, per in samples:
        cells = " | ".join(f"{per[k] / 1024:.1f}" for k in shown)
        print(f"| {t} | {cells} | {sum(per.values()) / 1024:.1f} |")


if __name__ == "__main__":
    main()
