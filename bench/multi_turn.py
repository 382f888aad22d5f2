"""Prints bench/multi_turn.sh's comparison from its work folder: each tool's TTFT by
turn (p50, ms), the prompt tokens each says the server served from cache, and the
server's own figures over each tool's run (mean TTFT from its histogram; prefix-cache
hits over queried tokens from its counters), as a Markdown table.

    python3 bench/multi_turn.py WORK    (a python with pyarrow: it reads the run's trace)
"""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def counters(path: Path) -> dict:
    """Sums each sample name's values over its label sets."""
    out = defaultdict(float)
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        try:
            out[name] += float(line.rsplit(" ", 1)[1])
        except ValueError:
            pass
    return out


def server(work: Path, tool: str) -> dict:
    before = counters(work / f"{tool}.before")
    after = counters(work / f"{tool}.after")
    delta = lambda name: after.get(name, 0.0) - before.get(name, 0.0)
    n = delta("vllm:time_to_first_token_seconds_count")
    hits = delta("vllm:prefix_cache_hits_total")
    queries = delta("vllm:prefix_cache_queries_total")
    return {
        "requests": int(n),
        "ttft_mean_ms": 1e3 * delta("vllm:time_to_first_token_seconds_sum") / n if n else None,
        "hit": hits / queries if queries else None,
        "prompt_tokens": int(delta("vllm:prompt_tokens_total")),
    }


def peer(work: Path) -> dict:
    rows = json.loads((work / "peer.json").read_text())
    by_turn = defaultdict(list)
    for r in rows:
        # input_num_turns counts the messages sent: 1, 3, 5, … for user turns 1, 2, 3, …
        by_turn[(int(r["input_num_turns"]) + 1) // 2].append(float(r["ttft_ms"]))
    return {
        "requests": len(rows),
        "ttft_mean_ms": statistics.fmean(float(r["ttft_ms"]) for r in rows) if rows else None,
        "by_turn": {t: statistics.median(v) for t, v in sorted(by_turn.items())},
        "counts": {t: len(v) for t, v in sorted(by_turn.items())},
        # Its client-side estimate: history over history + new message, by its own counts.
        "approx_cached": sum(float(r["approx_cached_percent"]) * int(r["input_num_tokens"]) for r in rows)
        / max(1, sum(int(r["input_num_tokens"]) for r in rows)),
    }


def our_ttfts(work: Path) -> list:
    """TTFT (ms) of every request of the run that got a first token (the run's probe
    included), from its trace (send to first token), as the server's histogram counts
    them: the means compare."""
    import pyarrow.parquet as pq

    out, cached, prompt = [], 0, 0
    columns = ["sent_ns", "first_token_ns", "prompt_tokens_server", "cached_tokens_server"]
    for path in sorted((work / "run" / "cells").glob("phase=conversation/*/*/requests.parquet")):
        for r in pq.read_table(path, columns=columns).to_pylist():
            if r["sent_ns"] is not None and r["first_token_ns"] is not None:
                out.append((r["first_token_ns"] - r["sent_ns"]) / 1e6)
            if r["prompt_tokens_server"] is not None and r["cached_tokens_server"] is not None:
                prompt += r["prompt_tokens_server"]
                cached += r["cached_tokens_server"]
    return out, (cached / prompt if prompt else None)


def ours(work: Path) -> dict:
    scoring = json.loads((work / "ours.json").read_text())
    ttfts, cached_share = our_ttfts(work)
    cell = next(c for c in scoring["cells"] if c["phase"] == "conversation")
    f = cell["figures"]
    talk = f["conversation"]
    return {
        "requests": sum(t["sent"] for t in talk["by_turn"]),
        "first_tokens": len(ttfts),
        "ttft_mean_ms": statistics.fmean(ttfts) if ttfts else None,
        "by_turn": {t["turn"]: t["ttft_ms"]["median"] for t in talk["by_turn"]},
        "counts": {t["turn"]: t["answered"] for t in talk["by_turn"]},
        "cached": talk["cache_hit_ratio"],
        "cached_share": cached_share,
        "server_hit": talk["server_cache_hit_ratio"],
        "warnings": [w["kind"] for w in cell["warnings"]],
    }


def fmt(x, digits=0):
    return "—" if x is None else f"{x:,.{digits}f}"


def main() -> int:
    work = Path(sys.argv[1])
    p, o = peer(work), ours(work)
    sp, so = server(work, "peer"), server(work, "ours")
    turns = sorted(set(p["by_turn"]) | set(o["by_turn"]))
    print("| turn | TTFT p50 ms, vLLM's benchmark (requests) | TTFT p50 ms, tokentrace (requests) | ratio |")
    print("|---:|---|---|---|")
    for t in turns:
        a, b = p["by_turn"].get(t), o["by_turn"].get(t)
        ratio = f"{b / a:.2f}" if a and b else "—"
        print(
            f"| {t} | {fmt(a)} ({p['counts'].get(t, 0)}) | {fmt(b)} ({o['counts'].get(t, 0)}) | {ratio} |"
        )
    print()
    print("| run | requests (server) | server's mean TTFT ms | server's prefix-cache hit | prompt tokens (server) | the tool's own cache figure |")
    print("|---|---|---|---|---|---|")
    print(
        f"| vLLM's benchmark | {p['requests']} ({sp['requests']}) | {fmt(sp['ttft_mean_ms'])} "
        f"(its own mean {fmt(p['ttft_mean_ms'])}) | {fmt(100 * sp['hit'] if sp['hit'] is not None else None, 1)}% "
        f"| {sp['prompt_tokens']:,} | none measured; its estimate `approx_cached_percent`, weighted by prompt: {fmt(p['approx_cached'], 1)}% |"
    )
    print(
        f"| tokentrace | {o['requests']}, {o['first_tokens']} with a first token ({so['requests']}) | {fmt(so['ttft_mean_ms'])} "
        f"(its own mean {fmt(o['ttft_mean_ms'])}) "
        f"| {fmt(100 * so['hit'] if so['hit'] is not None else None, 1)}% | {so['prompt_tokens']:,} "
        f"| cached over prompt tokens by the server's usage {fmt(100 * o['cached_share'] if o['cached_share'] is not None else None, 1)}%; "
        f"history served from cache {fmt(100 * o['cached'] if o['cached'] is not None else None, 1)}%, "
        f"server counters in the window {fmt(100 * o['server_hit'] if o['server_hit'] is not None else None, 1)}%; "
        f"warnings {', '.join(o['warnings']) or 'none'} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
