"""Samples a process's CPU time for bench/accuracy.sh: every 100 ms, one line
`CLOCK_MONOTONIC_ns user+system_ticks view_ns` from /proc/PID/stat, until the process
ends; view_ns is the CPU time of its drawing thread (`tokentrace-screen`, from
/proc/PID/task/TID/schedstat, in ns), 0 when it has none.

    python3 bench/cpu_sampler.py PID > cpu.log
"""

import os
import sys
import time

# Thread names are cut to 15 bytes in /proc.
VIEW_THREAD = "tokentrace-screen"[:15]


def view_ns(pid):
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != VIEW_THREAD:
                    continue
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


pid = sys.argv[1]
while True:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # Fields after the command name (which may hold spaces) start at `state`.
            fields = f.read().rsplit(")", 1)[-1].split()
    except OSError:
        break
    if len(fields) < 13:
        break
    # utime and stime are fields 14 and 15 of the whole line: 12 and 13 after `)`.
    ticks = int(fields[11]) + int(fields[12])
    print(time.monotonic_ns(), ticks, view_ns(pid), flush=True)
    time.sleep(0.1)
