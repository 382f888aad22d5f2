//! polars (an outside reader, and the tests' oracle) reads what the schemas crate's
//! arrow-rs writer wrote, and opening a run lists incomplete cells rather than reading
//! them.

use polars::prelude::*;
use tokentrace_analyzer::{Cell, Run};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Chunks, Events, Metrics, Requests};
use tokentrace_testkit::synth;

use crate::oracle::{collect, scan};

fn keys() -> Vec<CellKey> {
    vec![
        CellKey::new(Phase::Decode, 1024, 2),
        CellKey::new(Phase::Decode, 1024, 8),
        CellKey::new(Phase::Decode, 4096, 2),
    ]
}

fn count<T: tokentrace_schemas::Table>(run: &std::path::Path, key: &CellKey) -> usize {
    read_table::<T>(&key.dir(run).join(format!("{}.parquet", T::NAME)))
        .expect("arrow-rs read")
        .len()
}

#[test]
fn polars_reads_every_table_with_hive_columns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run_dir = dir.path();
    synth::write_run(run_dir, "interop", &keys(), 5_000).expect("synthetic run");
    let run = Run::open(run_dir).expect("open");
    assert_eq!(run.cells.len(), 3);
    assert_eq!(run.complete_cells().count(), 3);

    for (table, per_cell) in [
        (
            "requests",
            count::<Requests> as fn(&std::path::Path, &CellKey) -> usize,
        ),
        ("chunks", count::<Chunks>),
        ("metrics", count::<Metrics>),
        ("events", count::<Events>),
    ] {
        let df = collect(&run, table)
            .expect("collect")
            .expect("cells present");
        let expected: usize = keys().iter().map(|k| per_cell(run_dir, k)).sum();
        assert!(expected > 0, "{table}: synthetic cells have rows");
        assert_eq!(df.height(), expected, "{table}: rows");
        for hive in ["phase", "context", "concurrency"] {
            assert!(df.column(hive).is_ok(), "{table}: Hive column {hive}");
        }
        // Rows per cell, from the Hive columns, match what arrow-rs reads per file.
        let per = df
            .clone()
            .lazy()
            .group_by([col("phase"), col("context"), col("concurrency")])
            .agg([len().alias("n")])
            .sort(["context", "concurrency"], Default::default())
            .collect()
            .expect("group");
        let contexts: Vec<i64> = per
            .column("context")
            .expect("c")
            .i64()
            .expect("i64")
            .iter()
            .flatten()
            .collect();
        let concs: Vec<i64> = per
            .column("concurrency")
            .expect("n")
            .i64()
            .expect("i64")
            .iter()
            .flatten()
            .collect();
        let ns: Vec<u32> = per
            .column("n")
            .expect("n")
            .u32()
            .expect("u32")
            .iter()
            .flatten()
            .collect();
        let phases: Vec<String> = per
            .column("phase")
            .expect("p")
            .str()
            .expect("str")
            .iter()
            .flatten()
            .map(str::to_string)
            .collect();
        assert_eq!(contexts, vec![1024, 1024, 4096], "{table}");
        assert_eq!(concs, vec![2, 8, 2], "{table}");
        assert!(phases.iter().all(|p| p == "decode"), "{table}");
        for ((c, n), k) in contexts.iter().zip(&ns).zip(keys()) {
            assert_eq!(*c, i64::from(k.context));
            assert_eq!(*n as usize, per_cell(run_dir, &k), "{table} {k}");
        }
    }

    // Values and types survive: tokens summed by polars equal the server-reported usage.
    let chunks = collect(&run, "chunks").expect("chunks").expect("some");
    assert_eq!(
        chunks.column("arrival_ns").expect("a").dtype(),
        &DataType::Int64
    );
    assert_eq!(
        chunks.column("content").expect("c").dtype(),
        &DataType::String
    );
    let streamed: i64 = chunks
        .column("tokens")
        .expect("t")
        .i32()
        .expect("i32")
        .iter()
        .flatten()
        .map(i64::from)
        .sum();
    let requests = collect(&run, "requests").expect("requests").expect("some");
    let reported: i64 = requests
        .column("completion_tokens_server")
        .expect("c")
        .i32()
        .expect("i32")
        .iter()
        .flatten()
        .map(i64::from)
        .sum();
    assert_eq!(streamed, reported);
    assert!(streamed >= 15_000);
}

#[test]
fn incomplete_cells_are_listed_not_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run_dir = dir.path();
    synth::write_run(run_dir, "partial", &keys()[..2], 2_000).expect("synthetic run");
    // A cell folder with files but no commit mark (copied by hand, say).
    let good = keys()[0].dir(run_dir);
    let bad = CellKey::new(Phase::Decode, 4096, 2).dir(run_dir);
    std::fs::create_dir_all(&bad).expect("mkdir");
    std::fs::copy(good.join("chunks.parquet"), bad.join("chunks.parquet")).expect("copy");
    // A committed cell whose chunks file was truncated afterwards.
    let broken = keys()[1].dir(run_dir).join("chunks.parquet");
    let bytes = std::fs::read(&broken).expect("read");
    std::fs::write(&broken, &bytes[..bytes.len() / 2]).expect("truncate");

    let run = Run::open(run_dir).expect("open");
    let states: Vec<(CellKey, bool, String)> = run
        .cells
        .iter()
        .map(|c| match c {
            Cell::Complete(key) => (*key, true, String::new()),
            Cell::Incomplete(key, reason) => (*key, false, reason.clone()),
        })
        .collect();
    assert_eq!(states.len(), 3);
    assert!(states[0].1, "{states:?}");
    assert!(
        !states[1].1 && states[1].2.contains("chunks.parquet") && states[1].2.contains("truncated"),
        "{states:?}"
    );
    assert!(
        !states[2].1 && states[2].2.contains("cell.json"),
        "{states:?}"
    );
    let df = collect(&run, "chunks").expect("collect").expect("one cell");
    assert_eq!(df.height(), count::<Chunks>(run_dir, &keys()[0]));
    let unknown = scan(&run, "nope").err().expect("an unknown table");
    assert!(unknown.contains("unknown table `nope`"), "{unknown}");
}
