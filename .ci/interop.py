"""Interop check: a run folder written by tokentrace reads, with Hive partitioning, in
pyarrow and DuckDB, and both agree with the cells' commit marks (cell.json).

usage: python interop.py RUN_DIR
"""

import json
import sys
from pathlib import Path

import duckdb
import pyarrow.dataset as ds
import pyarrow.parquet as pq

TABLES = ["requests", "chunks", "metrics", "events"]
HIVE = ["phase", "context", "concurrency"]


def fail(msg):
    print(f"interop: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def expected_rows(run):
    """{table: {(phase, context, concurrency): rows}} from every cell.json."""
    out = {t: {} for t in TABLES}
    for mark in sorted((run / "cells").glob("phase=*/context=*/concurrency=*/cell.json")):
        meta = json.loads(mark.read_text())
        if not meta["complete"]:
            fail(f"{mark}: not complete")
        key = (meta["phase"], meta["context"], meta["concurrency"])
        for t in TABLES:
            out[t][key] = meta["files"][f"{t}.parquet"]["rows"]
    if not out["chunks"]:
        fail(f"{run}: no committed cells")
    return out


def check_pyarrow(run, expected):
    cells = run / "cells"
    for t in TABLES:
        files = sorted(str(p) for p in cells.glob(f"**/{t}.parquet"))
        for f in files:
            md = pq.ParquetFile(f).metadata
            kv = md.metadata or {}
            if kv.get(b"tokentrace.schema_version") != b"1":
                fail(f"{f}: schema version stamp {kv.get(b'tokentrace.schema_version')!r}")
            if kv.get(b"tokentrace.table") != t.encode():
                fail(f"{f}: table stamp {kv.get(b'tokentrace.table')!r}")
            if not md.created_by.startswith("tokentrace "):
                fail(f"{f}: created_by {md.created_by!r}")
        dataset = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=str(cells))
        table = dataset.to_table()
        for h in HIVE:
            if h not in table.column_names:
                fail(f"pyarrow {t}: no Hive column {h}: {table.column_names}")
        got = {}
        for row in table.group_by(HIVE).aggregate([([], "count_all")]).to_pylist():
            got[(row["phase"], row["context"], row["concurrency"])] = row["count_all"]
        want = {k: v for k, v in expected[t].items() if v > 0}
        if got != want:
            fail(f"pyarrow {t}: rows per cell {got} != cell.json {want}")
        print(f"pyarrow  {t:<9} {table.num_rows:>8} rows, {len(files)} files, columns: {', '.join(table.column_names)}")


def check_duckdb(run, expected):
    con = duckdb.connect()
    for t in TABLES:
        glob = str(run / "cells" / "**" / f"{t}.parquet")
        rows = con.execute(
            f"SELECT phase, context, concurrency, count(*) FROM read_parquet('{glob}', hive_partitioning = true) "
            "GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        got = {(p, int(c), int(n)): k for p, c, n, k in rows}
        want = {k: v for k, v in expected[t].items() if v > 0}
        if got != want:
            fail(f"duckdb {t}: rows per cell {got} != cell.json {want}")
        print(f"duckdb   {t:<9} {sum(got.values()):>8} rows in {len(got)} cells")
    # A real query across tables: tokens streamed per cell equal the server-reported usage.
    chunks = str(run / "cells" / "**" / "chunks.parquet")
    requests = str(run / "cells" / "**" / "requests.parquet")
    mismatch = con.execute(
        f"""
        WITH s AS (SELECT request_id, sum(tokens) AS streamed
                   FROM read_parquet('{chunks}', hive_partitioning = true) GROUP BY request_id),
             r AS (SELECT request_id, completion_tokens_server AS reported
                   FROM read_parquet('{requests}', hive_partitioning = true))
        SELECT count(*) FROM r LEFT JOIN s USING (request_id)
        WHERE coalesce(s.streamed, 0) <> coalesce(r.reported, 0)
        """
    ).fetchone()[0]
    if mismatch:
        fail(f"duckdb: {mismatch} requests whose streamed tokens differ from usage")
    print("duckdb   join     streamed tokens = server usage for every request")


def main():
    if len(sys.argv) != 2:
        fail("usage: interop.py RUN_DIR")
    run = Path(sys.argv[1])
    expected = expected_rows(run)
    check_pyarrow(run, expected)
    check_duckdb(run, expected)
    print("interop: ok")


if __name__ == "__main__":
    main()
