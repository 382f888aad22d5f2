//! Write → read gives back equal values, for every table, the raw capture and the JSON files.

use std::fs::File;

use parquet::file::reader::{FileReader, SerializedFileReader};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::{CellMeta, Manifest};
use tokentrace_schemas::raw::{RawReader, RawWriter};
use tokentrace_schemas::reader::{open_table, read_table};
use tokentrace_schemas::table::Table;
use tokentrace_schemas::tables::*;
use tokentrace_schemas::writer::{TableWriter, WriterLimits};
use tokentrace_schemas::{CREATED_BY, SCHEMA_VERSION_KEY, TABLE_KEY};
use tokentrace_testkit::synth;

use crate::common::*;

/// Small limits so that a few thousand rows span several batches and row groups.
fn small() -> WriterLimits {
    WriterLimits {
        batch_rows: 100,
        max_row_group_rows: 1000,
        max_row_group_bytes: 1 << 20,
        ..WriterLimits::default()
    }
}

/// `rows` written as table `T` with the default limits, and the file opened for its
/// footer.
fn written<T: Table>(rows: Vec<T::Row>) -> SerializedFileReader<File> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{}.parquet", T::NAME));
    let mut w = TableWriter::<T>::create(&path).expect("create");
    for r in rows {
        w.push(r).expect("push");
    }
    w.finish().expect("finish");
    SerializedFileReader::new(File::open(&path).expect("open")).expect("parquet")
}

fn roundtrip<T: Table>(rows: Vec<T::Row>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{}.parquet", T::NAME));
    let mut w = TableWriter::<T>::with_limits(&path, small()).expect("create");
    for r in &rows {
        w.push(r.clone()).expect("push");
    }
    let parts = w.finish().expect("finish");
    assert_eq!(parts.len(), 1, "one file: {parts:?}");
    let stat = &parts[0].1;
    assert_eq!(stat.rows, rows.len() as u64);
    assert_eq!(stat.bytes, std::fs::metadata(&path).expect("stat").len());
    let back = read_table::<T>(&path).expect("read");
    assert_eq!(back.len(), rows.len());
    for (i, (a, b)) in back.iter().zip(&rows).enumerate() {
        // -0.0 == 0.0 and NaN != NaN aside, PartialEq is the contract.
        assert_eq!(a, b, "{} row {i}", T::NAME);
    }
    let reader = SerializedFileReader::new(File::open(&path).expect("open")).expect("parquet");
    let meta = reader.metadata();
    if rows.len() > 1000 {
        assert!(meta.num_row_groups() > 1, "row groups must be bounded");
    }
    for rg in meta.row_groups() {
        assert!(rg.num_rows() <= 1000);
    }
}

#[test]
fn requests_roundtrip() {
    roundtrip::<Requests>(request_rows(2_345));
}

/// Row groups of the default limits: a group of every table but `chunks` holds at most
/// 16 Ki rows (the recorder builds a `requests` one over 16 s at 1,000 requests/s, not
/// over two minutes, and a `metrics` one within three minutes of scrapes, not never in
/// a long cell), a `chunks` group up to 128 Ki.
#[test]
fn row_groups_of_tables_but_chunks_are_smaller() {
    use tokentrace_schemas::writer::{DEFAULT_MAX_ROW_GROUP_ROWS, SMALL_ROW_GROUP_ROWS};
    fn groups<T: Table>(rows: Vec<T::Row>) -> Vec<i64> {
        written::<T>(rows)
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows())
            .collect()
    }
    let r = SMALL_ROW_GROUP_ROWS as i64;
    assert_eq!(
        groups::<Requests>(request_rows(40_000)),
        [r, r, 40_000 - 2 * r]
    );
    assert_eq!(
        groups::<Metrics>(metric_rows(40_000)),
        [r, r, 40_000 - 2 * r]
    );
    assert_eq!(groups::<Chunks>(chunk_rows(40_000)), [40_000]);
    assert_eq!(DEFAULT_MAX_ROW_GROUP_ROWS, 128 * 1024);
}

/// Statistics per row group, none per page: the writer holds no column index until the
/// file closes (a long cell's recorder grew by it), and the footer has none.
#[test]
fn tables_keep_row_group_statistics_and_no_column_index() {
    let reader = written::<Chunks>(chunk_rows(45_000));
    let meta = reader.metadata();
    assert!(meta.num_row_groups() > 0);
    let arrival = Chunks::schema()
        .index_of("arrival_ns")
        .expect("an arrival column");
    for rg in meta.row_groups() {
        assert!(
            rg.column(arrival).statistics().is_some(),
            "row-group statistics"
        );
        for c in rg.columns() {
            assert_eq!(c.column_index_offset(), None, "{}", c.column_path());
        }
    }
}

#[test]
fn chunks_roundtrip() {
    roundtrip::<Chunks>(chunk_rows(5_001));
}

#[test]
fn metrics_roundtrip() {
    roundtrip::<Metrics>(metric_rows(1_203));
}

#[test]
fn events_roundtrip() {
    roundtrip::<Events>(event_rows(57));
}

#[test]
fn empty_table_roundtrip() {
    roundtrip::<Chunks>(Vec::new());
}

#[test]
fn files_are_stamped_and_compressed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chunks.parquet");
    let mut w = TableWriter::<Chunks>::create(&path).expect("create");
    for r in chunk_rows(3000) {
        w.push(r).expect("push");
    }
    w.finish().expect("finish");
    let reader = SerializedFileReader::new(File::open(&path).expect("open")).expect("parquet");
    let fm = reader.metadata().file_metadata();
    assert_eq!(fm.created_by(), Some(CREATED_BY));
    assert!(CREATED_BY.starts_with("tokentrace "));
    let kv = fm.key_value_metadata().expect("kv metadata");
    let get = |k: &str| kv.iter().find(|e| e.key == k).and_then(|e| e.value.clone());
    assert_eq!(get(SCHEMA_VERSION_KEY).as_deref(), Some("1"));
    assert_eq!(get(TABLE_KEY).as_deref(), Some("chunks"));
    let rg = reader.metadata().row_group(0);
    for col in rg.columns() {
        assert!(
            matches!(col.compression(), parquet::basic::Compression::ZSTD(_)),
            "{} not zstd",
            col.column_path()
        );
    }
    let kind = rg
        .columns()
        .iter()
        .find(|c| c.column_path().string() == "kind")
        .expect("kind");
    assert!(
        kind.dictionary_page_offset().is_some(),
        "string columns are dictionary-encoded"
    );
    let arrival = rg
        .columns()
        .iter()
        .find(|c| c.column_path().string() == "arrival_ns")
        .expect("arrival");
    assert!(
        arrival
            .encodings()
            .any(|e| e == parquet::basic::Encoding::DELTA_BINARY_PACKED),
        "times are delta-encoded"
    );
    let r = open_table::<Chunks>(&path).expect("open");
    assert_eq!(r.stamp().rows, 3000);
    assert_eq!(r.stamp().created_by.as_deref(), Some(CREATED_BY));
}

#[test]
fn raw_capture_roundtrip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("raw.sse.zst");
    let mut w = RawWriter::create(&path).expect("create");
    let frames: Vec<(i64, i64, Vec<u8>)> = (0..500)
        .map(|i| {
            (
                i % 7,
                i * 1000,
                format!("data: {{\"n\":{i}}}\n\n").into_bytes(),
            )
        })
        .collect();
    for (id, t, b) in &frames {
        w.write(*id, *t, b).expect("write");
    }
    w.write(99, 5, &[]).expect("empty read writes nothing");
    let stat = w.finish().expect("finish");
    assert_eq!(stat.rows, 500);
    let back: Vec<_> = RawReader::open(&path)
        .expect("open")
        .collect::<Result<Vec<_>, _>>()
        .expect("frames");
    assert_eq!(back.len(), 500);
    for (f, (id, t, b)) in back.iter().zip(&frames) {
        assert_eq!((f.request_id, f.arrival_ns, &f.bytes), (*id, *t, b));
    }
}

#[test]
fn manifest_and_cell_json_roundtrip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = [
        CellKey::new(Phase::Decode, 1024, 2),
        CellKey::new(Phase::Prefill, 1024, 1),
    ];
    let m = synth::manifest("run-1", &keys);
    m.write(dir.path()).expect("write");
    assert_eq!(Manifest::read(dir.path()).expect("read"), m);
    let text = std::fs::read_to_string(dir.path().join("manifest.json")).expect("text");
    assert!(text.contains("\"status\": \"complete\""), "{text}");
}

#[test]
fn synthetic_cell_reads_back_consistent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = CellKey::new(Phase::Decode, 2048, 4);
    let meta =
        synth::write_decode_cell(dir.path(), &synth::DecodeSpec::new(key, 20_000)).expect("cell");
    let cell = key.dir(dir.path());
    assert_eq!(CellMeta::read_complete(&cell).expect("cell.json"), meta);
    let chunks = read_table::<Chunks>(&cell.join("chunks.parquet")).expect("chunks");
    let requests = read_table::<Requests>(&cell.join("requests.parquet")).expect("requests");
    let streamed: i64 = chunks.iter().filter_map(|c| c.tokens).map(i64::from).sum();
    let reported: i64 = requests
        .iter()
        .filter_map(|r| r.completion_tokens_server)
        .map(i64::from)
        .sum();
    assert_eq!(streamed, reported);
    assert!(streamed >= 20_000);
    for w in chunks
        .windows(2)
        .filter(|w| w[0].request_id == w[1].request_id)
    {
        assert!(
            w[0].seq < w[1].seq && w[0].arrival_ns <= w[1].arrival_ns,
            "{w:?}"
        );
    }
    let frames = RawReader::open(&cell.join("raw.sse.zst"))
        .expect("raw")
        .count();
    assert_eq!(frames, chunks.len());
    assert_eq!(meta.files["chunks.parquet"].rows, chunks.len() as u64);
}

#[test]
fn chunks_are_stored_grouped_by_request_within_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chunks.parquet");
    // Three interleaved streams, as they arrive.
    let mut rows = Vec::new();
    for step in 0..50 {
        for id in [7i64, 3, 5] {
            let mut r = chunk_rows(1).remove(0);
            (r.request_id, r.seq, r.arrival_ns) = (id, step, i64::from(step) * 1000 + id);
            rows.push(r);
        }
    }
    let limits = WriterLimits {
        batch_rows: 60,
        ..small()
    };
    let mut w = TableWriter::<Chunks>::with_limits(&path, limits).expect("create");
    for r in &rows {
        w.push(r.clone()).expect("push");
    }
    w.finish().expect("finish");
    let back = read_table::<Chunks>(&path).expect("read");
    let mut expected = Vec::new();
    for block in rows.chunks(60) {
        let mut b = block.to_vec();
        b.sort_by_key(|r| (r.request_id, r.seq));
        expected.extend(b);
    }
    assert_eq!(back, expected);
    assert_ne!(back, rows, "storage order differs from arrival order");
}
