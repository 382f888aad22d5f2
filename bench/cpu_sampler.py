"""Samples a process's CPU time for bench/accuracy.sh: every 100 ms, one line
`CLOCK_MONOTONIC_ns user+system_ticks` from /proc/PID/stat, until the process ends.

    python3 bench/cpu_sampler.py PID > cpu.log
"""

import sys
import time

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
    print(time.monotonic_ns(), int(fields[11]) + int(fields[12]), flush=True)
    time.sleep(0.1)
