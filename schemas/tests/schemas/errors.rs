//! Bad files give errors that name the file (and column and row), never a panic.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use tokentrace_schemas::Error;
use tokentrace_schemas::manifest::{Manifest, read_json};
use tokentrace_schemas::raw::{RawReader, RawWriter};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::table::Table;
use tokentrace_schemas::tables::*;
use tokentrace_schemas::writer::TableWriter;
use tokentrace_schemas::{SCHEMA_VERSION_KEY, TABLE_KEY};
use tokentrace_testkit::synth;

use crate::common::*;

fn write_events(path: &Path) {
    let mut w = TableWriter::<Events>::create(path).expect("create");
    for r in event_rows(200) {
        w.push(r).expect("push");
    }
    w.finish().expect("finish");
}

/// A Parquet file with an arbitrary batch and key-value metadata.
fn write_foreign(path: &Path, batch: &RecordBatch, kv: Option<Vec<(&str, &str)>>) {
    let props = WriterProperties::builder()
        .set_key_value_metadata(kv.map(|kv| {
            kv.into_iter()
                .map(|(k, v)| KeyValue::new(k.to_string(), v.to_string()))
                .collect()
        }))
        .build();
    let file = std::fs::File::create(path).expect("create");
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("writer");
    w.write(batch).expect("write");
    w.close().expect("close");
}

fn events_batch() -> RecordBatch {
    Events::to_batch(&event_rows(5)).expect("batch")
}

fn assert_names(err: &Error, path: &Path) {
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "error does not name the file: {msg}"
    );
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    let err = read_table::<Events>(&path).expect_err("missing");
    assert!(matches!(err, Error::Missing { .. }), "{err:?}");
    assert_names(&err, &path);
}

#[test]
fn truncated_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    write_events(&path);
    let bytes = std::fs::read(&path).expect("read");
    for keep in [0, 3, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..keep]).expect("truncate");
        let err = read_table::<Events>(&path).expect_err("truncated");
        assert!(matches!(err, Error::Corrupt { .. }), "keep {keep}: {err:?}");
        assert_names(&err, &path);
    }
}

#[test]
fn corrupt_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    write_events(&path);
    let bytes = std::fs::read(&path).expect("read");
    // Garbage in the footer.
    let mut bad = bytes.clone();
    let n = bad.len();
    for b in &mut bad[n - 40..n - 8] {
        *b ^= 0x5A;
    }
    std::fs::write(&path, &bad).expect("write");
    let err = read_table::<Events>(&path).expect_err("corrupt footer");
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert_names(&err, &path);
    // Not Parquet at all.
    std::fs::write(&path, b"this is not parquet, just text that is long enough").expect("write");
    let err = read_table::<Events>(&path).expect_err("not parquet");
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    // Garbage in the data pages: an error or (if the damage hits only values) rows, never a panic.
    let mut bad = bytes.clone();
    for b in &mut bad[8..bytes.len() / 2] {
        *b = b.wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&path, &bad).expect("write");
    if let Err(err) = read_table::<Events>(&path) {
        assert_names(&err, &path);
    }
}

#[test]
fn newer_schema_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    write_foreign(
        &path,
        &events_batch(),
        Some(vec![(SCHEMA_VERSION_KEY, "2"), (TABLE_KEY, "events")]),
    );
    let err = read_table::<Events>(&path).expect_err("newer");
    assert!(
        matches!(
            err,
            Error::NewerVersion {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names(&err, &path);
    assert!(err.to_string().contains("upgrade"), "{err}");
}

#[test]
fn unreadable_or_absent_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    write_foreign(&path, &events_batch(), None);
    let err = read_table::<Events>(&path).expect_err("no stamp");
    assert!(matches!(err, Error::NotTokentrace { .. }), "{err:?}");
    assert_names(&err, &path);
    for v in ["one", "0", "-1"] {
        write_foreign(&path, &events_batch(), Some(vec![(SCHEMA_VERSION_KEY, v)]));
        let err = read_table::<Events>(&path).expect_err("bad version");
        assert!(matches!(err, Error::BadVersion { .. }), "{v}: {err:?}");
    }
}

#[test]
fn schema_mismatch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    // A column missing.
    let schema = Arc::new(Schema::new(vec![Field::new(
        "time_ns",
        DataType::Int64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from(vec![1i64])) as ArrayRef],
    )
    .expect("batch");
    write_foreign(
        &path,
        &batch,
        Some(vec![(SCHEMA_VERSION_KEY, "1"), (TABLE_KEY, "events")]),
    );
    let err = read_table::<Events>(&path).expect_err("mismatch");
    assert!(matches!(err, Error::SchemaMismatch { .. }), "{err:?}");
    assert_names(&err, &path);
    assert!(
        err.to_string().contains("kind: Utf8"),
        "both schemas shown: {err}"
    );
    // Another table's file under this table's name.
    write_foreign(
        &path,
        &events_batch(),
        Some(vec![(SCHEMA_VERSION_KEY, "1"), (TABLE_KEY, "chunks")]),
    );
    let err = read_table::<Events>(&path).expect_err("wrong table");
    assert!(matches!(err, Error::SchemaMismatch { .. }), "{err:?}");
    // The writer refuses a batch of another schema instead of corrupting its file.
    let mut w = TableWriter::<Events>::create(&path).expect("create");
    let err = w.write_batch(&batch).expect_err("guarded");
    assert!(matches!(err, Error::SchemaMismatch { .. }), "{err:?}");
}

#[test]
fn bad_values_name_column_and_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    let mut columns: Vec<ArrayRef> = events_batch().columns().to_vec();
    columns[1] = Arc::new(StringArray::from(vec![
        "run_start",
        "cell_start",
        "window_open",
        "explode",
        "note",
    ]));
    let batch = RecordBatch::try_new(Events::schema(), columns).expect("batch");
    write_foreign(
        &path,
        &batch,
        Some(vec![(SCHEMA_VERSION_KEY, "1"), (TABLE_KEY, "events")]),
    );
    let err = read_table::<Events>(&path).expect_err("bad enum");
    match &err {
        Error::BadValue {
            column,
            row,
            message,
            ..
        } => {
            assert_eq!((*column, *row), ("kind", 3));
            assert!(message.contains("explode"), "{message}");
        }
        other => panic!("expected BadValue, got {other:?}"),
    }
    assert_names(&err, &path);
}

#[test]
fn json_files_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    let err = Manifest::read(run).expect_err("missing");
    assert!(matches!(err, Error::Missing { .. }), "{err:?}");
    let path = run.join("manifest.json");
    let mut v = serde_json::to_value(synth::manifest("r", &[])).expect("json");
    v["schema_version"] = 6.into();
    std::fs::write(&path, v.to_string()).expect("write");
    let err = Manifest::read(run).expect_err("newer");
    assert!(
        matches!(err, Error::NewerVersion { found: 6, .. }),
        "{err:?}"
    );
    assert_names(&err, &path);
    // Version 5 (a run with conversation cells), 4 (an imported run), 3 (a run with
    // replay cells) and 2 (burst or rate cells) are read.
    v["schema_version"] = 5.into();
    std::fs::write(&path, v.to_string()).expect("write");
    Manifest::read(run).expect("version 5 is read");
    v["schema_version"] = 4.into();
    std::fs::write(&path, v.to_string()).expect("write");
    Manifest::read(run).expect("version 4 is read");
    v["schema_version"] = 3.into();
    std::fs::write(&path, v.to_string()).expect("write");
    Manifest::read(run).expect("version 3 is read");
    v["schema_version"] = 2.into();
    std::fs::write(&path, v.to_string()).expect("write");
    assert_eq!(Manifest::read(run).expect("v2").schema_version, 2);
    v["schema_version"] = 1.into();
    v["surprise"] = true.into();
    std::fs::write(&path, v.to_string()).expect("write");
    let err = Manifest::read(run).expect_err("unknown field");
    assert!(matches!(err, Error::Json { .. }), "{err:?}");
    assert!(err.to_string().contains("surprise"), "{err}");
    std::fs::write(&path, "{\"schema_version\": 1, \"tool\": ").expect("write");
    let err = read_json::<Manifest>(&path, "manifest").expect_err("truncated json");
    assert!(matches!(err, Error::Json { .. }), "{err:?}");
}

#[test]
fn raw_capture_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("raw.sse.zst");
    let err = RawReader::open(&path).expect_err("missing");
    assert!(matches!(err, Error::Missing { .. }), "{err:?}");
    let mut w = RawWriter::create(&path).expect("create");
    for i in 0..2000 {
        w.write(
            i,
            i,
            format!(
                "data: {{\"i\":{i},\"pad\":\"{}\"}}\n\n",
                "x".repeat(i as usize % 97)
            )
            .as_bytes(),
        )
        .expect("write");
    }
    w.finish().expect("finish");
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() * 2 / 3]).expect("truncate");
    let result: Result<Vec<_>, _> = RawReader::open(&path).and_then(|r| r.collect());
    let err = result.expect_err("truncated raw");
    assert_names(&err, &path);
    // A newer version in the header.
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("enc");
    std::io::Write::write_all(&mut enc, b"TTRAWSSE\x02\x00\x00\x00").expect("hdr");
    std::fs::write(&path, enc.finish().expect("finish")).expect("write");
    let err = RawReader::open(&path).expect_err("newer");
    assert!(
        matches!(err, Error::NewerVersion { found: 2, .. }),
        "{err:?}"
    );
    // Not zstd.
    std::fs::write(&path, b"plain text").expect("write");
    let err = RawReader::open(&path).expect_err("not zstd");
    assert_names(&err, &path);
}

/// A `requests` file written before the columns added to format v1 reads with nulls in
/// their place; one missing a column that was always there is still refused.
#[test]
fn older_requests_files_read_with_the_added_columns_null() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("requests.parquet");
    let rows = request_rows(12);
    let full = Requests::to_batch(&rows).expect("batch");
    let kv = || Some(vec![(SCHEMA_VERSION_KEY, "1"), (TABLE_KEY, "requests")]);
    let keep = full.num_columns() - Requests::ADDED_COLUMNS;
    let older = full
        .project(&(0..keep).collect::<Vec<_>>())
        .expect("project");
    write_foreign(&path, &older, kv());
    let back = read_table::<Requests>(&path).expect("older file reads");
    let expected: Vec<RequestRow> = rows
        .into_iter()
        .map(|r| RequestRow {
            connection_id: None,
            connect_start_ns: None,
            connection_ns: None,
            retries: None,
            ..r
        })
        .collect();
    assert_eq!(back, expected);
    let cut = full
        .project(&(0..keep - 1).collect::<Vec<_>>())
        .expect("project");
    write_foreign(&path, &cut, kv());
    let err = read_table::<Requests>(&path).expect_err("a v1 column missing");
    assert!(matches!(err, Error::SchemaMismatch { .. }), "{err:?}");
}

/// Damage in the data pages leaves the footer readable, so opening the file succeeds;
/// `verify` decodes every page and names the file.
#[test]
fn verify_finds_damaged_pages_that_opening_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.parquet");
    write_events(&path);
    let rows = tokentrace_schemas::reader::open_table::<Events>(&path)
        .expect("open")
        .verify()
        .expect("a sound file verifies");
    assert_eq!(rows, 200);
    let mut bad = std::fs::read(&path).expect("read");
    for b in &mut bad[8..40] {
        *b ^= 0xA5;
    }
    std::fs::write(&path, &bad).expect("write");
    let reader = tokentrace_schemas::reader::open_table::<Events>(&path)
        .expect("the footer is intact: opening succeeds");
    let err = reader.verify().expect_err("a damaged page");
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert_names(&err, &path);
}
