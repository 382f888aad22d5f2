#!/usr/bin/env python3
"""The connections a rate cell opened after its first minute, in bursts (opened within
2 s of each other), with the largest median time to first token of the requests
scheduled in any 200 ms of the second before each burst ended: a server stall shows as a burst of new connections
and a jump in TTFT. Reads every part of the cell's `requests` table.

    python3 bench/heapwatch/connections.py RUN   # e.g. WORK/run of bench/long_cell.sh
"""
import glob
import statistics
import sys

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = ["connection_id", "connect_start_ns", "scheduled_ns", "first_token_ns"]


def main():
    for cell in sorted(glob.glob(sys.argv[1] + "/cells/*/*/*/")):
        parts = sorted(glob.glob(cell + "requests*.parquet"))
        t = pa.concat_tables([pq.read_table(p, columns=COLUMNS) for p in parts]).to_pydict()
        opened = sorted(c / 1e9 for c in t["connect_start_ns"] if c is not None and c > 60e9)
        bursts = []
        for s in opened:
            if bursts and s - bursts[-1][1] < 2:
                bursts[-1][1], bursts[-1][2] = s, bursts[-1][2] + 1
            else:
                bursts.append([s, s, 1])
        print(f"{cell}: {len(set(t['connection_id']))} connections")
        for first, last, n in bursts:
            bins = {}
            for s, f in zip(t["scheduled_ns"], t["first_token_ns"]):
                if f is not None and last - 1 <= s / 1e9 <= last:
                    bins.setdefault(int(s / 2e8), []).append((f - s) / 1e6)
            worst = max((statistics.median(v) for v in bins.values()), default=None)
            ttft = "-" if worst is None else f"{worst:.0f} ms"
            print(f"  {n:5d} opened at {first:8.1f}-{last:8.1f} s; TTFT median up to {ttft}")


main()
