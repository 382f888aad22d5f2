//! Writes a synthetic run folder through the real writers and prints its size per
//! streamed token, per file kind. Used by `.ci/interop` (a run for pyarrow and DuckDB)
//! and to measure the format's size (see README).
//!
//! usage: synth_run OUT_DIR TOKENS_PER_CELL CONTEXT:CONCURRENCY...

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::CellMeta;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::Chunks;
use tokentrace_testkit::synth;

fn parse_cell(s: &str) -> Result<CellKey, String> {
    let (ctx, conc) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected CONTEXT:CONCURRENCY, e.g. 8192:32"))?;
    let num = |v: &str| v.parse::<u32>().map_err(|e| format!("`{s}`: {e}"));
    Ok(CellKey::new(Phase::Decode, num(ctx)?, num(conc)?))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, tokens, cells @ ..] = &args[..] else {
        return Err("usage: synth_run OUT_DIR TOKENS_PER_CELL CONTEXT:CONCURRENCY...".to_string());
    };
    if cells.is_empty() {
        return Err("give at least one CONTEXT:CONCURRENCY cell".to_string());
    }
    let tokens: u64 = tokens
        .parse()
        .map_err(|e| format!("TOKENS_PER_CELL `{tokens}`: {e}"))?;
    let keys = cells
        .iter()
        .map(|c| parse_cell(c))
        .collect::<Result<Vec<_>, _>>()?;
    let out = Path::new(out);
    if out.exists() {
        return Err(format!(
            "{}: already exists; give a new folder",
            out.display()
        ));
    }
    synth::write_run(out, "synthetic", &keys, tokens).map_err(|e| e.to_string())?;

    let mut bytes: BTreeMap<String, u64> = BTreeMap::new();
    let mut streamed = 0i64;
    let mut chunk_rows = 0usize;
    for key in &keys {
        let dir = key.dir(out);
        let meta = CellMeta::read_complete(&dir).map_err(|e| e.to_string())?;
        for (name, stat) in &meta.files {
            *bytes.entry(name.clone()).or_default() += stat.bytes;
        }
        let chunks =
            read_table::<Chunks>(&dir.join("chunks.parquet")).map_err(|e| e.to_string())?;
        chunk_rows += chunks.len();
        streamed += chunks
            .iter()
            .filter_map(|c| c.tokens)
            .map(i64::from)
            .sum::<i64>();
    }
    let per = |b: u64| b as f64 / streamed as f64;
    let tables: u64 = bytes
        .iter()
        .filter(|(n, _)| n.ends_with(".parquet"))
        .map(|(_, b)| b)
        .sum();
    let all: u64 = bytes.values().sum();
    println!("run folder: {}", out.display());
    println!(
        "cells: {}, streamed tokens: {streamed}, chunk rows: {chunk_rows}",
        keys.len()
    );
    println!("{:<18} {:>12} {:>10}", "file", "bytes", "B/token");
    for (name, b) in &bytes {
        println!("{name:<18} {b:>12} {:>10.3}", per(*b));
    }
    println!(
        "{:<18} {tables:>12} {:>10.3}",
        "tables (parquet)",
        per(tables)
    );
    println!("{:<18} {all:>12} {:>10.3}", "cells total", per(all));
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synth_run: {e}");
            ExitCode::FAILURE
        }
    }
}
