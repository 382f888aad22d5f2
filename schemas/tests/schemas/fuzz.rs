//! Property tests (proptest) of every reader of trace files copied across machines:
//! Parquet tables, `raw.sse.zst`, `manifest.json` and `cell.json`, each read back after
//! bytes were flipped, cut, or spliced from another file, or replaced by random bytes.
//! The promise: never a panic and never an allocation a length field asks for beyond
//! the format's bounds; either the rows (or frames) or an error that names the file.
//! Cases: `PROPTEST_CASES` (256 in CI; `bench/fuzz.sh` runs 10 million); failing cases
//! are kept in `proptest-regressions/` and replayed first.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use tokentrace_schemas::manifest::{CellMeta, Manifest};
use tokentrace_schemas::raw::{RawReader, RawWriter};
use tokentrace_schemas::reader::open_table;
use tokentrace_schemas::tables::*;
use tokentrace_schemas::writer::TableWriter;

use crate::common::*;

/// Valid files to damage, written once: two tables, a raw capture, a manifest and a
/// commit mark.
struct Seeds {
    _dir: tempfile::TempDir,
    chunks: Vec<u8>,
    requests: Vec<u8>,
    raw: Vec<u8>,
    manifest: Vec<u8>,
    cell: Vec<u8>,
}

fn seeds() -> &'static Seeds {
    static SEEDS: OnceLock<Seeds> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = |n: &str| dir.path().join(n);
        let mut w = TableWriter::<Chunks>::create(&p("chunks.parquet")).expect("chunks");
        for r in chunk_rows(200) {
            w.push(r).expect("row");
        }
        w.finish().expect("finish");
        let mut w = TableWriter::<Requests>::create(&p("requests.parquet")).expect("requests");
        for r in request_rows(20) {
            w.push(r).expect("row");
        }
        w.finish().expect("finish");
        let mut raw = RawWriter::create(&p("raw.sse.zst")).expect("raw");
        for i in 0..50 {
            raw.write(
                i % 7,
                i * 1000,
                format!("data: {{\"i\":{i}}}\n\n").as_bytes(),
            )
            .expect("frame");
        }
        raw.finish().expect("finish");
        let key = tokentrace_schemas::layout::CellKey::new(
            tokentrace_schemas::layout::Phase::Decode,
            512,
            2,
        );
        let meta = tokentrace_schemas::writer::CellWriter::create(dir.path(), key)
            .expect("cell")
            .commit()
            .expect("commit");
        let read = |path: PathBuf| std::fs::read(path).expect("seed");
        Seeds {
            chunks: read(p("chunks.parquet")),
            requests: read(p("requests.parquet")),
            raw: read(p("raw.sse.zst")),
            manifest: serde_json::to_vec_pretty(&manifest_json()).expect("manifest"),
            cell: serde_json::to_vec(&meta).expect("cell.json"),
            _dir: dir,
        }
    })
}

/// A complete manifest, written the way the recorder writes one.
fn manifest_json() -> serde_json::Value {
    serde_json::json!({
        "schema_version": 1,
        "tool": {"name": "tokentrace", "version": "0.1.0"},
        "run_id": "run-x",
        "clock": {"utc_at_zero": "2026-11-30T00:00:00.000000000Z", "monotonic_at_zero_ns": 5},
        "target": {"url": "http://127.0.0.1:8000", "api_key": false},
        "model": "m",
        "engine": {"name": "vllm", "version": "0.11", "details": {}},
        "hardware": null,
        "launch_command": null,
        "facts": [{"key": "host.cpus", "value": "2", "source": "/proc/cpuinfo"}],
        "capabilities": {"continuous_usage_stats": true, "return_token_ids": false, "metrics": true,
                         "tokenize": "vllm", "max_model_len": 4096, "token_counting": "usage"},
        "config": {"endpoint": "chat", "contexts": [512], "concurrency": [1, 2], "window_ns": 1000000000,
                   "max_tokens": 64, "ignore_eos": true, "scrape_interval_ns": 1000000000,
                   "warmup_timeout_ns": 1, "drain_timeout_ns": 1, "stall_timeout_ns": 1,
                   "prompt_tolerance_tokens": 8},
        "cells": [{"phase": "decode", "context": 512, "concurrency": 2, "status": "complete", "reason": null}]
    })
}

/// One way to damage a file.
#[derive(Debug, Clone)]
enum Damage {
    Flip(prop::sample::Index, u8),
    Cut(prop::sample::Index),
    Remove(prop::sample::Index, prop::sample::Index),
    Splice(prop::sample::Index, prop::sample::Index, usize),
    Random(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Vec<Damage>> {
    let one = prop_oneof![
        4 => (any::<prop::sample::Index>(), 1..=255u8).prop_map(|(i, b)| Damage::Flip(i, b)),
        2 => any::<prop::sample::Index>().prop_map(Damage::Cut),
        2 => (any::<prop::sample::Index>(), any::<prop::sample::Index>()).prop_map(|(a, b)| Damage::Remove(a, b)),
        2 => (any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0..5usize)
            .prop_map(|(a, b, from)| Damage::Splice(a, b, from)),
        1 => prop::collection::vec(any::<u8>(), 0..256).prop_map(Damage::Random),
    ];
    prop::collection::vec(one, 1..4)
}

/// `bytes` after `edits`; a splice takes a stretch of another seed file.
fn damaged(mut bytes: Vec<u8>, edits: &[Damage]) -> Vec<u8> {
    let s = seeds();
    let others = [&s.chunks, &s.requests, &s.raw, &s.manifest, &s.cell];
    for e in edits {
        match e {
            Damage::Flip(i, b) if !bytes.is_empty() => {
                let at = i.index(bytes.len());
                bytes[at] ^= b;
            }
            Damage::Cut(i) => bytes.truncate(i.index(bytes.len() + 1)),
            Damage::Remove(a, b) if !bytes.is_empty() => {
                let (a, b) = (a.index(bytes.len()), b.index(bytes.len()));
                bytes.drain(a.min(b)..a.max(b));
            }
            Damage::Splice(at, from, which) => {
                let other = others[*which % others.len()];
                let at = at.index(bytes.len() + 1);
                let from = from.index(other.len());
                let len = (other.len() - from).min(4096);
                bytes.splice(at..at, other[from..from + len].iter().copied());
            }
            Damage::Random(r) => bytes = r.clone(),
            _ => {}
        }
    }
    bytes
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

/// Reads a table to its end: rows or an error naming the file.
fn read_all<T: tokentrace_schemas::table::Table>(path: &Path) -> Result<usize, String> {
    let reader = open_table::<T>(path).map_err(|e| e.to_string())?;
    let mut n = 0;
    for rows in reader {
        n += rows.map_err(|e| e.to_string())?.len();
    }
    Ok(n)
}

fn names(err: &str, path: &Path) -> bool {
    err.contains(&path.display().to_string())
}

proptest! {
    /// A damaged Parquet table reads to its rows or to an error naming the file.
    #[test]
    fn damaged_tables_read_or_say_where(edits in damage(), which in 0..2usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = seeds();
        let (seed, name) = [(&s.chunks, "chunks.parquet"), (&s.requests, "requests.parquet")][which];
        let path = write(dir.path(), name, &damaged(seed.clone(), &edits));
        let got = if which == 0 { read_all::<Chunks>(&path) } else { read_all::<Requests>(&path) };
        if let Err(e) = got {
            prop_assert!(names(&e, &path), "{}", e);
        }
    }

    /// A damaged raw capture yields frames, then at most one error naming the file; no
    /// frame is longer than the format's bound.
    #[test]
    fn damaged_raw_captures_read_or_say_where(edits in damage()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "raw.sse.zst", &damaged(seeds().raw.clone(), &edits));
        match RawReader::open(&path) {
            Err(e) => prop_assert!(names(&e.to_string(), &path), "{}", e),
            Ok(reader) => {
                for frame in reader.take(10_000) {
                    match frame {
                        Ok(f) => prop_assert!(f.bytes.len() <= tokentrace_schemas::raw::MAX_FRAME_BYTES),
                        Err(e) => {
                            prop_assert!(names(&e.to_string(), &path), "{}", e);
                            break;
                        }
                    }
                }
            }
        }
    }

    /// A damaged manifest or commit mark decodes or is refused with its path.
    #[test]
    fn damaged_json_reads_or_says_where(edits in damage(), which in 0..2usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = seeds();
        if which == 0 {
            let path = write(dir.path(), "manifest.json", &damaged(s.manifest.clone(), &edits));
            if let Err(e) = Manifest::read(dir.path()) {
                prop_assert!(names(&e.to_string(), &path), "{}", e);
            }
        } else {
            let path = write(dir.path(), "cell.json", &damaged(s.cell.clone(), &edits));
            if let Err(e) = CellMeta::read_complete(dir.path()) {
                let e = e.to_string();
                prop_assert!(names(&e, &path) || names(&e, dir.path()), "{}", e);
            }
        }
    }
}

/// The seeds themselves read whole (so the damage above starts from valid files).
#[test]
fn the_seeds_are_valid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = seeds();
    assert_eq!(
        read_all::<Chunks>(&write(dir.path(), "c.parquet", &s.chunks)),
        Ok(200)
    );
    assert_eq!(
        read_all::<Requests>(&write(dir.path(), "r.parquet", &s.requests)),
        Ok(20)
    );
    let raw = write(dir.path(), "raw.sse.zst", &s.raw);
    assert_eq!(RawReader::open(&raw).expect("raw").count(), 50);
    write(dir.path(), "manifest.json", &s.manifest);
    Manifest::read(dir.path()).expect("manifest");
    write(dir.path(), "cell.json", &s.cell);
    CellMeta::read_complete(dir.path()).expect("cell.json");
}
