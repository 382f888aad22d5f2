//! Writes a synthetic run folder through the real writers and prints its size per
//! streamed token, per file kind. Used by `.ci/interop` (a run for pyarrow and DuckDB)
//! and to measure the format's size (see README).
//!
//! usage: synth_run OUT_DIR TOKENS_PER_CELL CONTEXT:CONCURRENCY[:MAX_TOKENS]...

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::CellMeta;
use tokentrace_schemas::reader::open_table;
use tokentrace_schemas::tables::Chunks;
use tokentrace_testkit::synth;

/// `CONTEXT:CONCURRENCY[:MAX_TOKENS]`: a decode cell, its requests' `max_tokens`
/// (4,096 unless given: 16 makes a cell of many short requests).
fn parse_cell(s: &str) -> Result<(CellKey, Option<u32>), String> {
    let mut parts = s.split(':');
    let (Some(ctx), Some(conc), max, None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!(
            "`{s}`: expected CONTEXT:CONCURRENCY[:MAX_TOKENS], e.g. 8192:32 or 256:64:16"
        ));
    };
    let num = |v: &str| v.parse::<u32>().map_err(|e| format!("`{s}`: {e}"));
    Ok((
        CellKey::new(Phase::Decode, num(ctx)?, num(conc)?),
        max.map(num).transpose()?,
    ))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, tokens, cells @ ..] = &args[..] else {
        return Err(
            "usage: synth_run OUT_DIR TOKENS_PER_CELL CONTEXT:CONCURRENCY[:MAX_TOKENS]..."
                .to_string(),
        );
    };
    if cells.is_empty() {
        return Err("give at least one CONTEXT:CONCURRENCY cell".to_string());
    }
    let tokens: u64 = tokens
        .parse()
        .map_err(|e| format!("TOKENS_PER_CELL `{tokens}`: {e}"))?;
    let cells = cells
        .iter()
        .map(|c| parse_cell(c))
        .collect::<Result<Vec<_>, _>>()?;
    let keys: Vec<CellKey> = cells.iter().map(|(k, _)| *k).collect();
    let out = Path::new(out);
    if out.exists() {
        return Err(format!(
            "{}: already exists; give a new folder",
            out.display()
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (key, max) in &cells {
        let mut spec = synth::DecodeSpec::new(*key, tokens);
        if let Some(max) = max {
            spec.max_tokens = *max;
        }
        synth::write_decode_cell(out, &spec).map_err(|e| e.to_string())?;
    }
    synth::manifest("synthetic", &keys)
        .write(out)
        .map_err(|e| e.to_string())?;

    let mut bytes: BTreeMap<String, u64> = BTreeMap::new();
    let mut streamed = 0i64;
    let mut chunk_rows = 0usize;
    for key in &keys {
        let dir = key.dir(out);
        let meta = CellMeta::read_complete(&dir).map_err(|e| e.to_string())?;
        for (name, stat) in &meta.files {
            *bytes.entry(name.clone()).or_default() += stat.bytes;
        }
        // Block by block: a cell of any length is counted in bounded memory.
        for block in open_table::<Chunks>(&dir.join("chunks.parquet")).map_err(|e| e.to_string())? {
            let block = block.map_err(|e| e.to_string())?;
            chunk_rows += block.len();
            streamed += block
                .iter()
                .filter_map(|c| c.tokens)
                .map(i64::from)
                .sum::<i64>();
        }
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
