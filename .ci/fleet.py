"""Answers the README's two fleet queries and checks the answers against pyarrow.

usage: fleet.py RUNS.parquet FLEET_DIR

- DuckDB over the catalog (`tokentrace catalog FLEET_DIR --out RUNS.parquet`): the best
  Valid total tok/s per engine and context, and the concurrency that reached it; and,
  the fleet holding a matrix imported from the reference tool (`tokentrace import`),
  its cells and runs by where their figures came from.
- Spark SQL (pyspark, local mode) over the Hive layout of every run's raw `chunks`
  tables (phase=/context=/concurrency= partitions): per decode cell, the gaps between a
  request's consecutive token events and their p99.
Prints both answers; exits non-zero when either disagrees with pyarrow's reading of the
same files.
"""

import collections
import pathlib
import sys

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq

DUCKDB_QUERY = """
SELECT engine, context,
       max(total_tok_s) AS best_tok_s,
       arg_max(concurrency, total_tok_s) AS at_concurrency,
       count(DISTINCT run_id) AS runs
FROM read_parquet(?)
WHERE phase = 'decode' AND verdict = 'valid'
GROUP BY engine, context
ORDER BY engine, context
"""

MIXED_QUERY = """
SELECT figures_from, count(*) AS cells, count(DISTINCT run_id) AS runs,
       max(total_tok_s) FILTER (WHERE phase = 'decode') AS best_decode_tok_s
FROM read_parquet(?)
GROUP BY figures_from
ORDER BY figures_from
"""

SPARK_QUERY = """
WITH g AS (
  SELECT run, context, concurrency,
         (arrival_ns - LAG(arrival_ns) OVER (PARTITION BY run, request_id ORDER BY seq)) / 1e6 AS gap_ms
  FROM chunks
  WHERE phase = 'decode' AND tokens > 0
)
SELECT run, context, concurrency, count(gap_ms) AS gaps,
       round(percentile_approx(gap_ms, 0.99), 3) AS p99_gap_ms
FROM g
GROUP BY run, context, concurrency
ORDER BY run, context, concurrency
"""


def runs_under(fleet):
    return sorted(p.parent for p in fleet.rglob("manifest.json") if "cells" not in p.parts)


def traced_runs_under(fleet):
    """The runs with traces: an imported run's cells hold figures, no chunks."""
    return [r for r in runs_under(fleet) if any((r / "cells").glob("phase=*/*/*/chunks.parquet"))]


def duckdb_answer(query, catalog):
    """Runs `query` over the catalog and prints it with its answer."""
    got = duckdb.execute(query, [str(catalog)]).fetchall()
    print("DuckDB:", query.strip().replace("?", f"'{catalog.name}'"), sep="\n")
    for row in got:
        print("  ", row)
    return got


def check_mixed(catalog):
    got = duckdb_answer(MIXED_QUERY, catalog)
    t = pq.read_table(catalog).to_pylist()
    want = {}
    for r in t:
        cells, runs, best = want.get(r["figures_from"], (0, set(), None))
        if r["phase"] == "decode" and r["total_tok_s"] is not None:
            best = r["total_tok_s"] if best is None else max(best, r["total_tok_s"])
        want[r["figures_from"]] = (cells + 1, runs | {r["run_id"]}, best)
    want = sorted((k, c, len(r), b) for k, (c, r, b) in want.items())
    if [tuple(g) for g in got] != want:
        return [f"DuckDB answered {got}, pyarrow reads {want}"]
    if not any(k.startswith("llm-inference-bench ") for k, *_ in want) or "tokentrace" not in {k for k, *_ in want}:
        return ["the fleet should hold recorded and imported runs"]
    return []


def check_duckdb(catalog):
    got = duckdb_answer(DUCKDB_QUERY, catalog)
    t = pq.read_table(catalog).to_pylist()
    best = {}
    for r in t:
        if r["phase"] != "decode" or r["verdict"] != "valid":
            continue
        k = (r["engine"], r["context"])
        if k not in best or r["total_tok_s"] > best[k][0]:
            best[k] = (r["total_tok_s"], r["concurrency"])
    want = sorted((k[0], k[1], v[0], v[1]) for k, v in best.items())
    have = [(e, c, b, a) for e, c, b, a, _ in got]
    if have != want:
        return [f"DuckDB answered {have}, pyarrow reads {want}"]
    if len({e for e, *_ in got}) < 2:
        return ["the fleet should hold two engines"]
    return []


def check_spark(fleet):
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tokentrace-fleet")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frames = []
        for run in traced_runs_under(fleet):
            cells = run / "cells"
            df = (
                spark.read.option("basePath", str(cells))
                .parquet(str(cells / "phase=*" / "context=*" / "concurrency=*" / "chunks.parquet"))
                .withColumn("run", F.lit(run.relative_to(fleet).as_posix()))
            )
            frames.append(df)
        chunks = frames[0]
        for f in frames[1:]:
            chunks = chunks.unionByName(f)
        chunks.createOrReplaceTempView("chunks")
        got = [tuple(r) for r in spark.sql(SPARK_QUERY).collect()]
    finally:
        spark.stop()
    print("Spark SQL:", SPARK_QUERY.strip(), sep="\n")
    for row in got:
        print("  ", row)
    # pyarrow: the same gaps counted from each cell's file.
    want = collections.Counter()
    for run in traced_runs_under(fleet):
        for f in sorted((run / "cells").glob("phase=decode/context=*/concurrency=*/chunks.parquet")):
            context = int(f.parent.parent.name.split("=")[1])
            concurrency = int(f.parent.name.split("=")[1])
            t = pq.read_table(f, columns=["request_id", "tokens"])
            t = t.filter(pc.greater(t["tokens"], 0))
            per_request = collections.Counter(t["request_id"].to_pylist())
            want[(run.relative_to(fleet).as_posix(), context, concurrency)] += sum(
                n - 1 for n in per_request.values()
            )
    have = {(r, c, n): gaps for r, c, n, gaps, _ in got}
    if have != dict(want):
        return [f"Spark counted {have}, pyarrow {dict(want)}"]
    if any(p is None or p <= 0 for *_, p in got):
        return ["a p99 gap is missing or not positive"]
    return []


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    catalog, fleet = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    problems = check_duckdb(catalog) + check_mixed(catalog) + check_spark(fleet)
    for p in problems:
        print(f"fleet: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
