"""Several passes of bench/parity.sh against one running server (TARGET=…), side by side:
each cell's figures from every pass for both tools, the spread of their ratios
(tokentrace / reference), how often the verdicts agree, each client's CPU seconds and the
server's own mean TTFT of each tool's run.
    python3 bench/parity_passes.py WORK PASSES
WORK holds reference-N.json, tokentrace-N.json, cpu-{reference,tokentrace}-N (user and
system seconds from /usr/bin/time) and ttft-{reference,tokentrace}-N (the server's TTFT
histogram sum and count before and after the run) for N = 1 … PASSES.
"""
import json
import os
import sys


# The evidence rules of "Requests queued" (score/src/contract.rs).
QUEUE_RULES = {"running_never_reached_n", "running_mean_below", "waiting_mean_above",
               "waiting_sample_above"}


def fmt(x, digits=1):
    return "—" if x is None else f"{x:,.{digits}f}"


def spread(values):
    v = [x for x in values if x is not None]
    if not v:
        return "—"
    return f"{min(v):.2f}–{max(v):.2f}" if len(v) > 1 else f"{v[0]:.2f}"


def ratio(ours, theirs):
    return ours / theirs if ours is not None and theirs else None


def load(work, n):
    ref = json.load(open(os.path.join(work, f"reference-{n}.json")))
    tt = json.load(open(os.path.join(work, f"tokentrace-{n}.json")))
    cells, prefill = {}, {}
    for c in tt["cells"]:
        f = c.get("figures") or {}
        if c["phase"] == "decode":
            # Queued by its verdict, or by its evidence under a verdict that outranks it
            # (Looped: the reference tool 0.4.18 has no loop detector).
            queued_evidence = any(e.get("rule") in QUEUE_RULES for e in c.get("evidence") or [])
            verdict = c.get("verdict") or "missing"
            if verdict not in ("requests_queued", "missing") and queued_evidence:
                verdict += " (queued by its evidence)"
            cells[(c["context"], c["concurrency"])] = {
                "total": f.get("total_tok_s"),
                "ttft": (f.get("ttft_ms") or {}).get("median"),
                "queued": c.get("verdict") == "requests_queued" or queued_evidence,
                "verdict": verdict,
            }
        elif c["phase"] == "prefill":
            prefill[c["context"]] = f.get("prompt_tok_s")
    theirs, their_prefill = {}, {}
    for r in ref["results"]:
        queued = bool(r.get("capacity_limited") or r.get("warmup_timed_out"))
        theirs[(r["context_tokens"], r["concurrency"])] = {
            "total": r.get("aggregate_tps"),
            "ttft": r["ttft_p50"] * 1e3 if r.get("ttft_p50") is not None else None,
            "queued": queued,
            "verdict": f"error ({r['num_errors']})" if r.get("num_errors")
            else ("capacity-limited" if queued else "valid"),
        }
    for ctx, p in (ref.get("prefill") or {}).items():
        their_prefill[int(ctx)] = p.get("tok_per_sec")
    return theirs, cells, their_prefill, prefill


def cpu(work, tool, n):
    try:
        user, system = open(os.path.join(work, f"cpu-{tool}-{n}")).read().split()[-2:]
        return float(user) + float(system)
    except (OSError, ValueError):
        return None


def server_ttft(work, tool, n):
    """The server's mean TTFT (ms) over the run and how many first tokens it counted."""
    try:
        s0, n0, s1, n1 = (float(x) for x in open(os.path.join(work, f"ttft-{tool}-{n}")).read().split())
    except (OSError, ValueError):
        return None, 0
    count = n1 - n0
    return ((s1 - s0) / count * 1e3 if count > 0 else None), int(count)


def main():
    work, passes = sys.argv[1], int(sys.argv[2])
    runs = [load(work, n) for n in range(1, passes + 1)]
    keys = sorted(set().union(*(set(r[0]) for r in runs)))
    print(f"{passes} passes, tools alternating (reference first in odd passes); "
          "figures per pass separated by `,`; ratios are tokentrace / reference")
    print()
    print("| context | concurrency | total tok/s ref | total tok/s ours | ratio | TTFT ms p50 ref "
          "| TTFT ms p50 ours | ratio | verdicts (ref / ours) | agree |")
    print("|---:|---:|---|---|---|---|---|---|---|---|")
    agree_all = n_all = 0
    for key in keys:
        ref = [r[0].get(key, {}) for r in runs]
        ours = [r[1].get(key, {}) for r in runs]
        agree = sum(1 for a, b in zip(ref, ours) if a and b and a["queued"] == b["queued"])
        agree_all += agree
        n_all += len(runs)
        print(f"| {key[0]} | {key[1]} "
              f"| {', '.join(fmt(a.get('total')) for a in ref)} "
              f"| {', '.join(fmt(b.get('total')) for b in ours)} "
              f"| {spread(ratio(b.get('total'), a.get('total')) for a, b in zip(ref, ours))} "
              f"| {', '.join(fmt(a.get('ttft'), 0) for a in ref)} "
              f"| {', '.join(fmt(b.get('ttft'), 0) for b in ours)} "
              f"| {spread(ratio(b.get('ttft'), a.get('ttft')) for a, b in zip(ref, ours))} "
              f"| {', '.join(a.get('verdict', 'missing') + ' / ' + b.get('verdict', 'missing') for a, b in zip(ref, ours))} "
              f"| {agree} of {len(runs)} |")
    print()
    print("| context | prefill tok/s ref | prefill tok/s ours | ratio |")
    print("|---:|---|---|---|")
    for ctx in sorted(set().union(*(set(r[2]) for r in runs))):
        ref = [r[2].get(ctx) for r in runs]
        ours = [r[3].get(ctx) for r in runs]
        print(f"| {ctx} | {', '.join(fmt(x) for x in ref)} | {', '.join(fmt(x) for x in ours)} "
              f"| {spread(ratio(b, a) for a, b in zip(ref, ours))} |")
    print()
    print("| pass | order | client CPU s (ref / ours) | server's mean TTFT ms of the run, "
          "first tokens counted (ref / ours) |")
    print("|---:|---|---|---|")
    for n in range(1, passes + 1):
        (t_ref, c_ref), (t_ours, c_ours) = server_ttft(work, "reference", n), server_ttft(work, "tokentrace", n)
        order = "reference, tokentrace" if n % 2 else "tokentrace, reference"
        print(f"| {n} | {order} | {fmt(cpu(work, 'reference', n), 2)} / {fmt(cpu(work, 'tokentrace', n), 2)} "
              f"| {fmt(t_ref, 0)} ({c_ref}) / {fmt(t_ours, 0)} ({c_ours}) |")
    print()
    print(f"verdicts agree in {agree_all} of {n_all} cell-passes")


if __name__ == "__main__":
    main()
