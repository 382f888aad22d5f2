"""The reference tool's figures beside tokentrace's (`--rules reference`), cell by cell, with
their ratios (tokentrace / reference). bench/parity.sh runs both tools and then this.

    python3 bench/parity.py --reference REFERENCE.json --tokentrace SCORING.json

From the reference tool's JSON: results[] per (context_tokens, concurrency):
aggregate_tps (total tok/s), per_request_avg_tps, ttft_p50 (s), capacity_limited,
warmup_timed_out, num_errors; prefill[context]: tok_per_sec. From tokentrace's scoring:
decode cells' total_tok_s, per_request_tok_s median, ttft_ms median and verdict; prefill
cells' prompt_tok_s. A verdict "agrees" when both call the cell queued (the reference's
capacity_limited or warmup_timed_out, tokentrace's Requests queued) or neither does.
"""

import argparse
import json
import os
import sys


def truth_cells(truth):
    """The simulator's own TTFT (ms) of the reference tool's decode requests, per (context,
    concurrency): requests of more than 32 completion tokens (not scouts or primes),
    grouped by prompt length (the nearest power of two: chat templates add a few
    tokens), split into cells where the server went quiet, each cell's concurrency the
    most requests it held at once. TTFT = first token written − the kernel's receive of
    the request (its read where the kernel gave no stamp)."""
    import pyarrow.parquet as pq
    rows = pq.read_table(os.path.join(truth, "truth_requests.parquet")).to_pylist()
    out = {}
    groups = {}
    for r in rows:
        if r["completion_tokens"] <= 32 or r["first_token_ns"] is None:
            continue
        ctx = 1 << max(0, round(r["prompt_tokens"]).bit_length() - 1)
        if r["prompt_tokens"] > ctx * 1.5:
            ctx *= 2
        groups.setdefault(ctx, []).append(r)
    for ctx, rs in groups.items():
        rs.sort(key=lambda r: r["arrived_ns"])
        cells, cur, end = [], [], None
        for r in rs:
            if cur and r["arrived_ns"] > end + 1_000_000_000:
                cells.append(cur)
                cur = []
            cur.append(r)
            end = max(end or 0, r["ended_ns"]) if cur[1:] else r["ended_ns"]
        if cur:
            cells.append(cur)
        for cell in cells:
            marks = sorted([(r["arrived_ns"], 1) for r in cell] + [(r["ended_ns"], -1) for r in cell])
            held = most = 0
            for _, d in marks:
                held += d
                most = max(most, held)
            start = [r.get("kernel_rx_ns") or r["read_ns"] or r["arrived_ns"] for r in cell]
            ttft = sorted((r["first_token_ns"] - s) / 1e6 for r, s in zip(cell, start))
            out[(ctx, most)] = median(ttft)
    return out


def truth_by_run(truth, run):
    """The simulator's own TTFT (ms) of tokentrace's decode requests per (context,
    concurrency), each request placed in its cell by the server's response id (its
    warm-up and measured requests: the reference rule set's population)."""
    import glob
    import pyarrow.parquet as pq
    rows = pq.read_table(os.path.join(truth, "truth_requests.parquet")).to_pylist()
    by_sid = {r["server_request_id"]: r for r in rows}
    out = {}
    for path in glob.glob(os.path.join(run, "cells", "phase=decode", "*", "*", "requests.parquet")):
        parts = dict(p.split("=", 1) for p in path.split(os.sep) if "=" in p)
        ttft = []
        for q in pq.read_table(path).to_pylist():
            t = by_sid.get(q["server_request_id"])
            if q["role"] in ("warmup", "measured") and t and t["first_token_ns"] is not None:
                start = t.get("kernel_rx_ns") or t["read_ns"] or t["arrived_ns"]
                ttft.append((t["first_token_ns"] - start) / 1e6)
        out[(int(parts["context"]), int(parts["concurrency"]))] = median(ttft)
    return out


def median(v):
    v = sorted(v)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def ratio(ours, theirs):
    if ours is None or theirs in (None, 0):
        return "—"
    return f"{ours / theirs:.3f}"


def fmt(x, digits=1):
    return "—" if x is None else f"{x:,.{digits}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True)
    ap.add_argument("--tokentrace", required=True)
    ap.add_argument("--truth-reference", help="the ground truth of the reference's simulator")
    ap.add_argument("--truth-tokentrace", help="the ground truth of tokentrace's simulator")
    ap.add_argument("--run", help="tokentrace's run folder (places its requests in cells)")
    a = ap.parse_args()
    ref = json.load(open(a.reference))
    tt = json.load(open(a.tokentrace))
    ours = {}
    prefill = {}
    for c in tt["cells"]:
        f = c.get("figures") or {}
        if c["phase"] == "decode":
            ours[(c["context"], c["concurrency"])] = (c, f)
        elif c["phase"] == "prefill":
            prefill[c["context"]] = f.get("prompt_tok_s")
    print(f"reference tool {ref.get('metadata', {}).get('version', '?')} beside tokentrace "
          f"{tt['scored_by']} under {tt['rules']['name']}@{tt['rules']['version']}")
    print()
    print("| context | concurrency | total tok/s (ref / ours / ratio) | per request tok/s "
          "(ref / ours / ratio) | TTFT ms p50 (ref / ours / ratio) | reference prompt tokens "
          "| verdict (ref / ours) |")
    print("|---:|---:|---|---|---|---|---|")
    worst = {"total": 1.0, "ttft": 1.0}
    agree = n = 0
    for r in sorted(ref["results"], key=lambda r: (r["context_tokens"], r["concurrency"])):
        key = (r["context_tokens"], r["concurrency"])
        cell, f = ours.get(key, (None, {}))
        total = f.get("total_tok_s")
        per = (f.get("per_request_tok_s") or {}).get("median")
        ttft = (f.get("ttft_ms") or {}).get("median")
        ref_ttft = r.get("ttft_p50") * 1e3 if r.get("ttft_p50") is not None else None
        queued_ref = bool(r.get("capacity_limited") or r.get("warmup_timed_out"))
        if r.get("num_errors"):
            ref_verdict = f"error ({r['num_errors']})"
        else:
            ref_verdict = "capacity-limited" if queued_ref else "valid"
        our_verdict = (cell or {}).get("verdict") or "missing"
        n += 1
        agree += (our_verdict == "requests_queued") == queued_ref and our_verdict != "missing"
        for k, o, t in (("total", total, r.get("aggregate_tps")), ("ttft", ttft, ref_ttft)):
            if o is not None and t:
                q = o / t
                worst[k] = max(worst[k], q, 1 / q) if q > 0 else worst[k]
        print(f"| {key[0]} | {key[1]} | {fmt(r.get('aggregate_tps'))} / {fmt(total)} / "
              f"{ratio(total, r.get('aggregate_tps'))} | {fmt(r.get('per_request_avg_tps'))} / "
              f"{fmt(per)} / {ratio(per, r.get('per_request_avg_tps'))} | {fmt(ref_ttft)} / "
              f"{fmt(ttft)} / {ratio(ttft, ref_ttft)} | {fmt(r.get('input_seq_len_avg'), 0)} "
              f"| {ref_verdict} / {our_verdict} |")
    print()
    print("| context | prefill tok/s (ref / ours / ratio) |")
    print("|---:|---|")
    for ctx, p in sorted((int(k), v) for k, v in (ref.get("prefill") or {}).items()):
        theirs = p.get("tok_per_sec")
        print(f"| {ctx} | {fmt(theirs)} / {fmt(prefill.get(ctx))} / {ratio(prefill.get(ctx), theirs)} |")
    print()
    if a.truth_reference and a.truth_tokentrace:
        tr = truth_cells(a.truth_reference)
        tt_truth = (truth_by_run(a.truth_tokentrace, a.run) if a.run
                    else truth_cells(a.truth_tokentrace))
        print("The server's own TTFT of each tool's requests (simulator ground truth: first "
              "token written − kernel receive), median ms, beside what each tool reported:")
        print()
        print("| context | concurrency | reference: truth / reported / ratio | tokentrace: "
              "truth / reported / ratio |")
        print("|---:|---:|---|---|")
        for r in sorted(ref["results"], key=lambda r: (r["context_tokens"], r["concurrency"])):
            key = (r["context_tokens"], r["concurrency"])
            ref_ttft = r["ttft_p50"] * 1e3 if r.get("ttft_p50") is not None else None
            ours_ttft = (ours.get(key, (None, {}))[1].get("ttft_ms") or {}).get("median")
            t1, t2 = tr.get(key), tt_truth.get(key)
            print(f"| {key[0]} | {key[1]} | {fmt(t1)} / {fmt(ref_ttft)} / {ratio(ref_ttft, t1)} "
                  f"| {fmt(t2)} / {fmt(ours_ttft)} / {ratio(ours_ttft, t2)} |")
        print()
    print(f"largest ratio either way: total tok/s {worst['total']:.3f}, TTFT {worst['ttft']:.3f}; "
          f"verdicts agree in {agree} of {n} cells")
    if n == 0:
        sys.exit("parity: the reference tool reported no decode cells")


if __name__ == "__main__":
    main()
