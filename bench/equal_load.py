"""One tool's accuracy and cost under one open-loop load, request by request, against the
simulator's ground truth (bench/equal_load.sh runs it after each tool's run). Prints one
Markdown table row; how the match went (and whether it is sound) goes to stderr.

    python3 bench/equal_load.py --tool tokentrace --rate R --truth DIR --cpu CPU_LOG \
        --rss-kb KB --run RUN
    python3 bench/equal_load.py --tool vllm-bench --rate R --truth DIR --cpu CPU_LOG \
        --rss-kb KB --result RESULT.json [--schedule DELAYS.txt]

Matching:
- tokentrace: by the server's response id (requests.parquet server_request_id = truth
  server_request_id), measured requests of the rate cell.
- vllm-bench keeps no response id (its result JSON holds per-request arrays in request
  order: ttfts, itls, start_times, output_lens, errors): its successful requests sorted
  by start_time are matched with the truth's requests sorted by their arrival: the
  kernel's receive stamp (kernel_rx_ns) where the simulator has it, else read_ns (the
  connection's read of the request, which the server's own queue can reorder).
  Soundness checks printed: equal counts, and the spread of (truth arrival − tool send)
  after removing its median, which a swapped pair would widen by the gap between the two
  sends.

Figures (ns kept until printed; p50 / p99 nearest rank; errors signed, tool − truth):
- TTFT error = tool TTFT − (truth first token-event write − truth read_ns); also
  against the kernel's receive of the request (kernel_rx_ns: what the simulator's socket
  queue held it for is the server's time, not the client's error), against the
  simulator's handler start (arrived_ns), as bench/accuracy.sh does; and,
  needing no pairing at all, the tool's TTFT p50 (p99) − the truth's p50 (p99) over
  the same requests.
- inter-token error = |tool gap − truth written gap| between consecutive token events,
  matched by position (vllm-bench: its `itls`; tokentrace: chunks with tokens > 0).
- schedule lag = send − due: tokentrace sent_ns − scheduled_ns (after the request's
  write); vllm-bench start_time − its schedule (DELAYS.txt: one cumulative delay in s per
  request, its compute_schedule; start_time is taken just before it builds and sends).
- CPU s per 100K events: the tool process's user + system time between its first and
  last CPU sample inside the load window (first truth read to last truth end), divided
  by the token events the simulator wrote between those two samples (the same count for
  any client: every token event written is one the client receives).
"""

import argparse
import json
import math
import os
import sys

import pyarrow.parquet as pq

TICKS_PER_S = 100.0  # USER_HZ of /proc/PID/stat


def pct(sorted_ns, q):
    if not sorted_ns:
        return math.nan
    rank = min(max(math.ceil(q * len(sorted_ns)), 1), len(sorted_ns))
    return sorted_ns[rank - 1] / 1e6


def trio(v):
    v = sorted(v)
    return f"{pct(v, 0.5):.2f} / {pct(v, 0.99):.2f} / {pct(v, 1.0):.2f}"


def duo(v, fmt="{:.3f} / {:.2f}"):
    v = sorted(v)
    return fmt.format(pct(v, 0.5), pct(v, 0.99)) if v else "n/a"


def note(*a):
    print(*a, file=sys.stderr)


FIRST_WRITE = {}


def first_write(t):
    return FIRST_WRITE.get(t["request_id"])


def arrival(t):
    """When the request reached the server: the kernel's receive stamp where the
    simulator has one, else its read of the request, else the handler's start."""
    return t.get("kernel_rx_ns") or t["read_ns"] or t["arrived_ns"]


def read_truth(truth):
    req = pq.read_table(os.path.join(truth, "truth_requests.parquet")).to_pylist()
    chunks = pq.read_table(os.path.join(truth, "truth_chunks.parquet")).to_pylist()
    written = {}
    for c in chunks:
        if (c["tokens"] or 0) > 0:
            written.setdefault(c["request_id"], []).append((c["seq"], c["written_ns"]))
    for k, v in written.items():
        v.sort()
        FIRST_WRITE[k] = v[0][1]
    return req, written


def tokentrace_requests(run, by_sid):
    """(truth row, sent ns, ttft ns, [token arrival ns], lag ns) per matched request."""
    zero = json.load(open(os.path.join(run, "manifest.json")))["clock"]["monotonic_at_zero_ns"]
    cells = []
    for root, _, files in os.walk(os.path.join(run, "cells")):
        if "requests.parquet" in files and "phase=rate" in root:
            cells.append(root)
    if len(cells) != 1:
        raise SystemExit(f"equal_load: want one rate cell in {run}, found {cells}")
    cell = cells[0]
    reqs = pq.read_table(os.path.join(cell, "requests.parquet")).to_pylist()
    arrivals = {}
    for c in pq.read_table(os.path.join(cell, "chunks.parquet")).to_pylist():
        if (c["tokens"] or 0) > 0:
            arrivals.setdefault(c["request_id"], []).append((c["seq"], c["arrival_ns"]))
    roles = {}
    for r in reqs:
        roles[r["role"]] = roles.get(r["role"], 0) + 1
    note(f"  tokentrace rate cell {os.path.relpath(cell, run)}: roles {roles}")
    out, measured = [], 0
    for r in reqs:
        if r["role"] != "measured":
            continue
        measured += 1
        t = by_sid.get(r["server_request_id"])
        if t is None or r["sent_ns"] is None or r["first_token_ns"] is None:
            continue
        a = [x[1] for x in sorted(arrivals.get(r["request_id"], []))]
        lag = r["sent_ns"] - r["scheduled_ns"] if r["scheduled_ns"] is not None else None
        out.append((t, r["sent_ns"] + zero, r["first_token_ns"] - r["sent_ns"], a, lag))
    order_match_check(out)
    return out, measured


def order_match_check(matched):
    """What matching by send order (vllm-bench's only way) would have done to the same
    requests: how many it pairs with the wrong truth row, and the TTFT error it gives."""
    by_send = sorted(matched, key=lambda m: m[1])
    by_read = sorted((m[0] for m in matched), key=arrival)
    wrong, err = 0, []
    for m, t in zip(by_send, by_read):
        wrong += t is not m[0]
        first = first_write(t)
        if first is not None and t["read_ns"] is not None:
            err.append(m[2] - (first - t["read_ns"]))
    note(f"  send-order match of these requests: {wrong}/{len(matched)} paired with another"
         f" request's truth; its TTFT error ms p50 / p99 / max {trio(err)}")


def vllm_bench_requests(result, truth_rows, schedule):
    """Matched by send order; times on the tool's clock (start_time offsets, s)."""
    d = json.load(open(result))
    n = len(d["start_times"])
    delays = None
    if schedule:
        delays = [float(x) for x in open(schedule).read().split()]
        if len(delays) != n:
            note(f"  schedule has {len(delays)} entries, result {n}: lag not reported")
            delays = None
    ok = [i for i in range(n) if not d["errors"][i] and d["ttfts"][i] > 0]
    note(f"  vllm-bench: {n} requests, {len(ok)} successful, completed={d.get('completed')}"
         f" failed={d.get('failed')}, input_lens {sorted(set(d['input_lens']))}"
         f", output_lens {sorted(set(d['output_lens']))}")
    ok.sort(key=lambda i: d["start_times"][i])
    gen = sorted(truth_rows, key=arrival)
    if len(gen) != len(ok):
        note(f"  MISMATCH: truth has {len(gen)} requests, vllm-bench {len(ok)} successful:"
             " the order match is not sound")
    pairs = list(zip(gen, ok))
    # Send → read on two clocks: constant offset + latency; the residual around the
    # median shows swapped pairs (a swap moves both by the gap between their sends).
    skew = sorted(arrival(t) - round(d["start_times"][i] * 1e9) for t, i in pairs)
    med = skew[len(skew) // 2]
    res = sorted(abs(s - med) for s in skew)
    starts = sorted(d["start_times"][i] for i in ok)
    gaps = sorted(round((b - a) * 1e9) for a, b in zip(starts, starts[1:]))
    close = sum(1 for g in gaps if g < pct(res, 0.99) * 1e6)
    note(f"  order match: |truth arrival - send - median| ms p50 {pct(res, .5):.3f} p99 "
         f"{pct(res, .99):.3f} max {pct(res, 1):.3f}; send gaps ms p1 {pct(gaps, .01):.3f}"
         f" p50 {pct(gaps, .5):.3f}; {close} consecutive sends closer than that p99")
    out = []
    for t, i in pairs:
        ttft = round(d["ttfts"][i] * 1e9)
        # Token arrivals on the tool's clock: first token, then each inter-token latency.
        tok = [d["start_times"][i] + d["ttfts"][i]]
        for g in d["itls"][i]:
            tok.append(tok[-1] + g)
        a = [round(x * 1e9) for x in tok]
        lag = round((d["start_times"][i] - delays[i]) * 1e9) if delays else None
        out.append((t, None, ttft, a, lag))
    return out, n


def cpu_window(cpu_log, start, end, written_all):
    samples = []
    for line in open(cpu_log):
        p = line.split()
        if len(p) >= 2:
            t, ticks = int(p[0]), int(p[1]) / TICKS_PER_S
            if start <= t <= end:
                samples.append((t, ticks))
    if len(samples) < 2:
        return math.nan, 0, math.nan
    (t0, c0), (t1, c1) = samples[0], samples[-1]
    events = sum(1 for w in written_all if t0 < w <= t1)
    s = c1 - c0
    return s, events, s / max(events, 1) * 1e5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, choices=["tokentrace", "vllm-bench"])
    ap.add_argument("--rate", required=True)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--cpu", required=True)
    ap.add_argument("--rss-kb", type=int, required=True)
    ap.add_argument("--run")
    ap.add_argument("--result")
    ap.add_argument("--schedule")
    a = ap.parse_args()

    truth_rows, written = read_truth(a.truth)
    by_sid = {r["server_request_id"]: r for r in truth_rows}
    pt = sorted({r["prompt_tokens"] for r in truth_rows})
    ct = sorted({r["completion_tokens"] for r in truth_rows})
    outc = {}
    for r in truth_rows:
        outc[r["outcome"]] = outc.get(r["outcome"], 0) + 1
    note(f"[{a.tool} @ {a.rate} req/s] truth: {len(truth_rows)} requests, prompt_tokens "
         f"{pt[:6]}, completion_tokens {ct[:6]}, outcomes {outc}")
    if a.tool == "tokentrace":
        matched, sent = tokentrace_requests(a.run, by_sid)
    else:
        matched, sent = vllm_bench_requests(a.result, truth_rows, a.schedule)

    ttft_read, ttft_kernel, ttft_arr, gap, lag, n_tok_mismatch = [], [], [], [], [], 0
    for t, _, ttft, arr, lg in matched:
        w = [x[1] for x in written.get(t["request_id"], [])]
        if not w:
            continue
        if t["read_ns"] is not None:
            ttft_read.append(ttft - (w[0] - t["read_ns"]))
        if t.get("kernel_rx_ns") is not None:
            ttft_kernel.append(ttft - (w[0] - t["kernel_rx_ns"]))
        ttft_arr.append(ttft - (w[0] - t["arrived_ns"]))
        if len(arr) != len(w):
            n_tok_mismatch += 1
        for k in range(1, min(len(arr), len(w))):
            gap.append(abs((arr[k] - arr[k - 1]) - (w[k] - w[k - 1])))
        if lg is not None:
            lag.append(lg)
    if n_tok_mismatch:
        note(f"  {n_tok_mismatch} requests with a token-event count unlike the truth's")
    # Distribution against distribution, no pairing: what any matching leaves alone.
    tool_q = sorted(x[2] for x in matched)
    truth_q = sorted(first_write(x[0]) - x[0]["read_ns"] for x in matched
                     if first_write(x[0]) is not None and x[0]["read_ns"] is not None)
    q_err = (f"{pct(tool_q, .5) - pct(truth_q, .5):.2f} / "
             f"{pct(tool_q, .99) - pct(truth_q, .99):.2f}")
    plausible = tool_q
    slow = sum(1 for x in tool_q if truth_q and x > truth_q[-1] + 100_000_000)
    note(f"  {slow} requests with a TTFT over the truth's slowest ({pct(truth_q, 1):.1f} ms)"
         " + 100 ms (wrong however they are paired)")
    note(f"  tool TTFT ms p1 {pct(plausible, .01):.2f} p50 {pct(plausible, .5):.2f} "
         f"max {pct(plausible, 1):.2f} (simulator: 50 ms unloaded)")

    mine = [x[0] for x in matched]
    start = min(t["read_ns"] or t["arrived_ns"] for t in mine)
    end = max(t["ended_ns"] for t in mine if t["ended_ns"] is not None)
    written_all = [x[1] for v in written.values() for x in v]
    cpu_s, events, per_100k = cpu_window(a.cpu, start, end, written_all)
    lag_s = trio(lag) if lag else "n/a"
    kernel = trio(ttft_kernel) if ttft_kernel else "n/a"
    print(f"| {a.tool} | {a.rate} | {len(matched)}/{sent} | {trio(ttft_read)} | {kernel} | "
          f"{duo(ttft_arr, '{:.2f} / {:.2f}')} | {q_err} | {duo(gap)} | {lag_s} | {events} | "
          f"{cpu_s:.2f} | {per_100k:.2f} | {a.rss_kb / 1024:.0f} |")


if __name__ == "__main__":
    main()
