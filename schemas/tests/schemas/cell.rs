//! A cell appears under `cells/` whole or not at all.

use tokentrace_schemas::Error;
use tokentrace_schemas::layout::{CellKey, Phase, list_cells};
use tokentrace_schemas::manifest::CellMeta;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::*;
use tokentrace_schemas::writer::CellWriter;

use crate::common::*;

#[test]
fn cell_commits_atomically() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    let key = CellKey::new(Phase::Decode, 8192, 32);
    let mut w = CellWriter::create(run, key).expect("create");
    for r in chunk_rows(300) {
        w.raw
            .write(r.request_id, r.arrival_ns, b"data: {}\n\n")
            .expect("raw");
        w.push_chunk(r).expect("chunk");
    }
    for r in request_rows(30) {
        w.push_request(r).expect("request");
    }
    assert!(
        !key.dir(run).exists(),
        "nothing under cells/ before the commit"
    );
    let meta = w.commit().expect("commit");
    let cell = key.dir(run);
    assert_eq!(
        cell,
        run.join("cells/phase=decode/context=8192/concurrency=32"),
        "Hive layout"
    );
    assert!(meta.complete);
    assert_eq!(meta.files["chunks.parquet"].rows, 300);
    assert_eq!(meta.files["raw.sse.zst"].rows, 300);
    assert_eq!(meta.files["metrics.parquet"].rows, 0);
    for (name, stat) in &meta.files {
        assert_eq!(
            std::fs::metadata(cell.join(name)).expect(name).len(),
            stat.bytes,
            "{name}"
        );
    }
    assert_eq!(CellMeta::read_complete(&cell).expect("cell.json"), meta);
    assert_eq!(
        read_table::<Chunks>(&cell.join("chunks.parquet")).expect("chunks"),
        chunk_rows(300)
    );
    assert!(
        !run.join(".staging/phase=decode/context=8192/concurrency=32")
            .exists()
    );
    assert_eq!(list_cells(run).expect("list"), vec![(key, cell)]);
    let err = CellWriter::create(run, key).expect_err("exists");
    assert!(matches!(err, Error::CellExists { .. }), "{err:?}");
}

#[test]
fn abandoned_cell_leaves_no_trace_in_cells() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    let key = CellKey::new(Phase::Prefill, 1024, 1);
    let mut w = CellWriter::create(run, key).expect("create");
    w.push_event(event_rows(1).remove(0)).expect("event");
    drop(w); // a crash, as far as the files are concerned
    assert!(!key.dir(run).exists());
    assert!(
        run.join(".staging/phase=prefill/context=1024/concurrency=1")
            .exists()
    );
    // Recording the cell again clears the stale staging folder and commits.
    let w = CellWriter::create(run, key).expect("again");
    let meta = w.commit().expect("commit");
    assert_eq!(meta.files["events.parquet"].rows, 0);
    assert!(key.dir(run).join("cell.json").exists());
}

#[test]
fn incomplete_cell_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cell = dir
        .path()
        .join("cells/phase=decode/context=1/concurrency=1");
    std::fs::create_dir_all(&cell).expect("mkdir");
    let err = CellMeta::read_complete(&cell).expect_err("no mark");
    assert!(matches!(err, Error::Missing { .. }), "{err:?}");
    let key = CellKey::new(Phase::Decode, 1, 1);
    let mut meta = tokentrace_testkit::synth::manifest("r", &[key]);
    meta.cells.clear();
    let mark = CellMeta {
        schema_version: 1,
        created_by: "tokentrace test".to_string(),
        phase: Phase::Decode,
        context: 1,
        concurrency: 1,
        rate: None,
        replay: None,
        complete: false,
        files: Default::default(),
    };
    tokentrace_schemas::manifest::write_json(&cell.join("cell.json"), &mark).expect("write");
    let err = CellMeta::read_complete(&cell).expect_err("not complete");
    assert!(matches!(err, Error::Incomplete { .. }), "{err:?}");
}

#[test]
fn cell_paths_parse() {
    let rate = |r| tokentrace_schemas::Rate::parse(r).expect("rate");
    for key in [
        CellKey::new(Phase::Decode, 131072, 128),
        CellKey::new(Phase::Burst, 8192, 4),
        CellKey::rate(8192, rate("0.5")),
        CellKey::rate(8192, tokentrace_schemas::Rate::INF),
    ] {
        assert_eq!(CellKey::from_path(&key.rel_dir()).expect("parse"), key);
    }
    assert_eq!(
        CellKey::rate(1024, rate("2.5")).rel_dir(),
        std::path::Path::new("cells/phase=rate/context=1024/rate=2.5")
    );
    for bad in [
        "cells/phase=decode/context=8K/concurrency=1",
        "cells/phase=rate/context=1/concurrency=1",
        "cells/phase=rate/context=1/rate=2.50",
        "cells/phase=rate/context=1/rate=0",
        "cells/phase=decode/context=1/rate=2",
        "cells/phase=train/context=1/concurrency=1",
        "cells/context=1/concurrency=1",
        "concurrency=1",
    ] {
        let err = CellKey::from_path(std::path::Path::new(bad)).expect_err(bad);
        assert!(matches!(err, Error::BadCellPath { .. }), "{err:?}");
    }
}

/// Burst and rate cells write version 2 where they appear (cell.json, and the manifest
/// of a run holding one); a matrix-only run stays at version 1 for older readers.
#[test]
fn new_cell_kinds_write_version_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    let rate = CellKey::rate(1024, tokentrace_schemas::Rate::parse("4").expect("rate"));
    let decode = CellKey::new(Phase::Decode, 1024, 2);
    for key in [rate, decode] {
        CellWriter::create(run, key)
            .expect("create")
            .commit()
            .expect("commit");
    }
    let meta = CellMeta::read_complete(&rate.dir(run)).expect("rate cell");
    assert_eq!((meta.schema_version, meta.key()), (2, rate));
    let meta = CellMeta::read_complete(&decode.dir(run)).expect("decode cell");
    assert_eq!(meta.schema_version, 1);
    let listed: Vec<CellKey> = list_cells(run)
        .expect("list")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(listed, vec![decode, rate]);
    let mut m = tokentrace_testkit::synth::manifest("r", &[decode]);
    m.write(run).expect("write");
    assert_eq!(
        tokentrace_schemas::manifest::Manifest::read(run)
            .expect("read")
            .schema_version,
        1
    );
    m = tokentrace_testkit::synth::manifest("r", &[decode, rate]);
    m.write(run).expect("write");
    let back = tokentrace_schemas::manifest::Manifest::read(run).expect("read");
    assert_eq!(back.schema_version, 2);
    assert_eq!(back.cells[1].key(), rate);
}

#[test]
fn labels_are_canonical() {
    assert_eq!(canonical_labels::<&str, &str>(&[]), "");
    assert_eq!(
        canonical_labels(&[("model_name", "a\"b\\c\nd"), ("engine", "0")]),
        "engine=\"0\",model_name=\"a\\\"b\\\\c\\nd\""
    );
}

/// GPU telemetry is an optional table: a cell without it has no `gpu.parquet` and its
/// commit mark does not list one; a cell with it round-trips, nulls included, and the
/// full verification counts it.
#[test]
fn the_gpu_table_is_written_only_when_there_is_telemetry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    let without = CellKey::new(Phase::Decode, 1024, 1);
    let meta = CellWriter::create(run, without)
        .expect("create")
        .commit()
        .expect("commit");
    assert!(!meta.files.contains_key("gpu.parquet"));
    assert!(!without.dir(run).join("gpu.parquet").exists());
    let counts = tokentrace_schemas::verify::verify_cell(&without.dir(run))
        .expect("verify")
        .counts;
    assert!(counts.iter().all(|(name, _)| name != "gpu.parquet"));

    let with = CellKey::new(Phase::Decode, 1024, 2);
    let rows: Vec<GpuRow> = (0..6)
        .map(|i| GpuRow {
            sample_ns: 1_000_000_000 * (i / 2),
            gpu: (i % 2) as i32,
            uuid: Some(format!("GPU-{}", i % 2)),
            utilization_pct: (i != 3).then_some(97.5),
            memory_used_bytes: Some(130 << 30),
            power_w: Some(612.25 + i as f64),
            energy_mj: (i != 0).then_some(5_000_000 + 600_000 * i),
            sm_clock_mhz: Some(1980),
            temperature_c: Some(61),
            throttle_reasons: Some(if i == 5 { 0x4 } else { 0 }),
        })
        .collect();
    let mut w = CellWriter::create(run, with).expect("create");
    for r in rows.clone() {
        w.push_gpu(r).expect("gpu row");
    }
    let meta = w.commit().expect("commit");
    assert_eq!(meta.files["gpu.parquet"].rows, 6);
    assert_eq!(
        read_table::<Gpu>(&with.dir(run).join("gpu.parquet")).expect("gpu"),
        rows
    );
    let counts = tokentrace_schemas::verify::verify_cell(&with.dir(run))
        .expect("verify")
        .counts;
    assert!(
        counts.contains(&("gpu.parquet".to_string(), 6)),
        "{counts:?}"
    );
}

/// A cell whose `chunks` table went on in parts: 2,000 rows in row groups of 100 and
/// files of 3 row groups.
fn parted_cell(run: &std::path::Path) -> (CellKey, CellMeta) {
    use tokentrace_schemas::writer::WriterLimits;
    let key = CellKey::new(Phase::Decode, 1024, 4);
    let limits = WriterLimits {
        batch_rows: 50,
        max_row_group_rows: 100,
        part_row_groups: 3,
        ..WriterLimits::default()
    };
    let mut w = CellWriter::with_limits(run, key, limits).expect("create");
    for r in chunk_rows(2_000) {
        w.raw
            .write(r.request_id, r.arrival_ns, b"data: {}\n\n")
            .expect("raw");
        w.push_chunk(r).expect("chunk");
    }
    for r in request_rows(30) {
        w.push_request(r).expect("request");
    }
    (key, w.commit().expect("commit"))
}

#[test]
fn a_long_table_goes_on_in_parts_that_read_as_one() {
    use tokentrace_schemas::reader::{open_columns, open_table_file};
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, meta) = parted_cell(dir.path());
    let cell = key.dir(dir.path());
    // 2,000 rows: 7 parts of 3 row groups (300 rows), no more.
    let parts: Vec<String> = (0..7)
        .map(|n| tokentrace_schemas::layout::part_file("chunks.parquet", n))
        .collect();
    assert_eq!(parts[1], "chunks.1.parquet");
    for (n, name) in parts.iter().enumerate() {
        let rows = open_table_file::<Chunks>(&cell.join(name))
            .expect(name)
            .stamp()
            .rows;
        assert_eq!(rows, if n < 6 { 300 } else { 200 }, "{name}");
        assert_eq!(meta.files[name].rows, rows as u64, "{name}");
        // Hashed and counted as written: the same as read back.
        let path = cell.join(name);
        let on_disk = tokentrace_schemas::digest::Sha256::of_file(&path).expect(name);
        assert_eq!(meta.files[name].sha256, Some(on_disk), "{name}");
        let len = std::fs::metadata(&path).expect(name).len();
        assert_eq!(meta.files[name].bytes, len, "{name}");
    }
    assert!(!cell.join("chunks.7.parquet").exists());
    assert_eq!(meta.table_rows("chunks.parquet"), 2_000);
    assert_eq!(meta.files["requests.parquet"].rows, 30);
    assert!(!meta.files.contains_key("requests.1.parquet"));
    // Read from the first file, the table is every part in order.
    assert_eq!(
        read_table::<Chunks>(&cell.join("chunks.parquet")).expect("chunks"),
        chunk_rows(2_000)
    );
    let mut ids = Vec::new();
    for columns in
        open_columns::<Chunks>(&cell.join("chunks.parquet"), &["request_id"]).expect("columns")
    {
        let columns = columns.expect("batch");
        let a = columns[0]
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .expect("i64");
        ids.extend(a.values().iter().copied());
    }
    let expected: Vec<i64> = chunk_rows(2_000).iter().map(|r| r.request_id).collect();
    assert_eq!(ids, expected);
    // `check` counts each part against the commit mark.
    let verified = tokentrace_schemas::verify::verify_cell(&cell).expect("verifies");
    assert!(
        verified
            .counts
            .contains(&("chunks.6.parquet".to_string(), 200))
    );
}

#[test]
fn a_missing_or_unlisted_part_is_named() {
    use tokentrace_schemas::verify::{verify_cell, verify_files};
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, meta) = parted_cell(dir.path());
    let cell = key.dir(dir.path());
    // A part removed: named as absent.
    let moved = dir.path().join("moved.parquet");
    std::fs::rename(cell.join("chunks.3.parquet"), &moved).expect("move");
    let err = verify_files(&cell, &meta).expect_err("a part is missing");
    assert!(
        err.to_string().contains("chunks.3.parquet") && err.to_string().contains("absent"),
        "{err}"
    );
    // The commit mark no longer lists it either: the part after the gap is named.
    let mut gap = meta.clone();
    gap.files.remove("chunks.3.parquet");
    let err = verify_files(&cell, &gap).expect_err("a gap in the parts");
    assert!(
        err.to_string().contains("chunks.4.parquet")
            && err.to_string().contains("chunks.3.parquet"),
        "{err}"
    );
    std::fs::rename(&moved, cell.join("chunks.3.parquet")).expect("back");
    verify_cell(&cell).expect("whole again");
    // A part on disk the commit mark does not list.
    std::fs::copy(cell.join("chunks.6.parquet"), cell.join("chunks.7.parquet")).expect("copy");
    let err = verify_files(&cell, &meta).expect_err("an extra part");
    assert!(
        err.to_string().contains("chunks.7.parquet") && err.to_string().contains("does not list"),
        "{err}"
    );
}

#[test]
fn part_names_split_back() {
    use tokentrace_schemas::layout::{part_file, split_part};
    assert_eq!(part_file("chunks.parquet", 0), "chunks.parquet");
    assert_eq!(part_file("chunks.parquet", 12), "chunks.12.parquet");
    assert_eq!(
        split_part("chunks.12.parquet"),
        Some(("chunks.parquet".to_string(), 12))
    );
    for name in [
        "chunks.parquet",
        "raw.sse.zst",
        "chunks.0.parquet",
        "chunks.01.parquet",
        "chunks..parquet",
        "cell.json",
    ] {
        assert_eq!(split_part(name), None, "{name}");
    }
}
