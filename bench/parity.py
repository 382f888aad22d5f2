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
import sys


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
    print(f"largest ratio either way: total tok/s {worst['total']:.3f}, TTFT {worst['ttft']:.3f}; "
          f"verdicts agree in {agree} of {n} cells")
    if n == 0:
        sys.exit("parity: the reference tool reported no decode cells")


if __name__ == "__main__":
    main()
