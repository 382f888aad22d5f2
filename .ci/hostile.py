"""Copies a run folder and makes its text hostile to an HTML page: the served model's
name, and every answer of one decode cell, a cycle of `<!--<script>`, `</script>` and
`]]>` (so the loop finder quotes it). The cell's `cell.json` is updated for the new
file's size, so the run stays sound. The report of the copy must still be one page that
shows the text as text (checked by browser.py).

usage: hostile.py RUN_IN RUN_OUT  (prints the model name it set)
"""

import json
import pathlib
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq

MODEL = "org/<!--<script>alert(1)</script>]]>&amp;"
CYCLE = [" <!--<script>", " </script>", " ]]> &lt;"]


def main(src, dst):
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    manifest = dst / "manifest.json"
    m = json.loads(manifest.read_text())
    m["model"] = MODEL
    manifest.write_text(json.dumps(m, indent=2) + "\n")
    cell = sorted((dst / "cells").glob("phase=decode/context=*/concurrency=*"))[0]
    chunks = cell / "chunks.parquet"
    t = pq.read_table(chunks)
    content = t.column("content").to_pylist()
    seq = t.column("seq").to_pylist()
    new = [None if c is None else CYCLE[s % len(CYCLE)] for c, s in zip(content, seq)]
    i = t.schema.get_field_index("content")
    # The format's key-value metadata (table name, schema version) is the file's, which
    # pyarrow writes from the schema's.
    meta = {
        k: v
        for k, v in (pq.ParquetFile(chunks).metadata.metadata or {}).items()
        if not k.startswith(b"ARROW:")
    }
    t = t.set_column(i, t.schema.field(i), pa.array(new, type=pa.string()))
    pq.write_table(t.replace_schema_metadata(meta), chunks, compression="zstd")
    cell_json = cell / "cell.json"
    c = json.loads(cell_json.read_text())
    c["files"]["chunks.parquet"]["bytes"] = chunks.stat().st_size
    cell_json.write_text(json.dumps(c, indent=2) + "\n")
    print(MODEL)


if __name__ == "__main__":
    main(*sys.argv[1:3])
