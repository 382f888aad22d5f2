//! Lazy polars scans of one table over every complete cell of a run, with the cell's key
//! as columns: `phase`, `context`, `concurrency` and, in a run with rate or replay cells,
//! `rate` (a rate cell's rate in thousandths of a request per second, minus a replay
//! cell's number, 0 for the rest: see [`level`]).

use std::sync::Arc;

use polars::prelude::*;
use tokentrace_analyzer::Run;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::CELLS_DIR;
use tokentrace_schemas::tables::{Chunks, Events, Metrics, Requests, TABLE_NAMES};
use tokentrace_schemas::{CellKey, Table};

use super::Result;

/// Whether any complete cell is a rate or replay cell (whose scans carry a `rate` key
/// column).
pub fn has_rate_cells(run: &Run) -> bool {
    run.complete_cells().any(|(key, _)| has_level(&key))
}

/// A lazy scan of `table` over every complete cell of `run` (see the module's doc).
/// Cells of the `concurrency=` layout are read in one scan with Hive partitioning; rate
/// and replay cells (a third level other than `concurrency=`, which one Hive scan cannot
/// mix in) one scan each with their key as literals. `None` when no cell is complete.
pub fn scan(run: &Run, table: &str) -> Result<Option<LazyFrame>> {
    if !TABLE_NAMES.contains(&table) {
        return Err(format!("unknown table `{table}`"));
    }
    let cells_dir = run.dir.join(CELLS_DIR);
    let perr = |e: PolarsError| format!("{}: {e}", cells_dir.display());
    let prefix = format!("{}/", cells_dir.display());
    let (rated, others): (Vec<_>, Vec<_>) =
        run.complete_cells().partition(|(key, _)| has_level(key));
    // A table's files: the first, then its later parts (`chunks.1.parquet`...).
    let files = |key: &CellKey| -> Vec<PlRefPath> {
        let first = format!("{prefix}{}/{table}.parquet", key.partition_path().display());
        let later = tokentrace_schemas::layout::later_parts(std::path::Path::new(&first));
        std::iter::once(PlRefPath::new(first.clone()))
            .chain(
                later
                    .iter()
                    .map(|p| PlRefPath::new(p.display().to_string())),
            )
            .collect()
    };
    let mut frames = Vec::new();
    if !others.is_empty() {
        let hive_schema = Schema::from_iter([
            Field::new("phase".into(), DataType::String),
            Field::new("context".into(), DataType::Int64),
            Field::new("concurrency".into(), DataType::Int64),
        ]);
        let args = ScanArgsParquet {
            hive_options: HiveOptions {
                enabled: Some(true),
                hive_start_idx: prefix.len(),
                schema: Some(Arc::new(hive_schema)),
                try_parse_dates: false,
            },
            glob: false,
            ..Default::default()
        };
        let paths: Vec<PlRefPath> = others.iter().flat_map(|(key, _)| files(key)).collect();
        let frame = LazyFrame::scan_parquet_files(paths.into(), args).map_err(perr)?;
        // The `rate` key column only where a rate cell needs it: a run without one
        // keeps its three-key scans and joins.
        frames.push(if rated.is_empty() {
            frame
        } else {
            frame.with_column(lit(0i64).cast(DataType::Int64).alias("rate"))
        });
    }
    for (key, _) in rated {
        let args = ScanArgsParquet {
            hive_options: HiveOptions {
                enabled: Some(false),
                ..HiveOptions::default()
            },
            glob: false,
            ..Default::default()
        };
        let frame = LazyFrame::scan_parquet_files(files(&key).into(), args).map_err(perr)?;
        frames.push(
            frame.with_columns([
                lit(key.phase.as_str()).alias("phase"),
                lit(i64::from(key.context))
                    .cast(DataType::Int64)
                    .alias("context"),
                lit(i64::from(key.concurrency))
                    .cast(DataType::Int64)
                    .alias("concurrency"),
                lit(level(&key)).cast(DataType::Int64).alias("rate"),
            ]),
        );
    }
    if frames.len() < 2 {
        return Ok(frames.pop());
    }
    // One column order for every frame of the union: the table's, then the key. (A run
    // with rate cells was written with every column of the current format.)
    let order: Vec<Expr> = table_columns(table)
        .iter()
        .map(|c| col(c.as_str()))
        .chain(["phase", "context", "concurrency", "rate"].map(col))
        .collect();
    let frames: Vec<LazyFrame> = frames
        .into_iter()
        .map(|f| f.select(order.clone()))
        .collect();
    concat(frames, UnionArgs::default()).map(Some).map_err(perr)
}

/// Collects a scan (see [`scan`]) into a data frame.
pub fn collect(run: &Run, table: &str) -> Result<Option<DataFrame>> {
    let Some(lf) = scan(run, table)? else {
        return Ok(None);
    };
    lf.collect()
        .map(Some)
        .map_err(|e| format!("{}: {e}", run.dir.join(CELLS_DIR).display()))
}

/// The columns of the table named `table` (one of [`TABLE_NAMES`]), in file order.
fn table_columns(table: &str) -> Vec<String> {
    match table {
        "requests" => Requests::column_names(),
        "chunks" => Chunks::column_names(),
        "metrics" => Metrics::column_names(),
        _ => Events::column_names(),
    }
}

/// Whether a cell's path has a third level other than `concurrency=` (rate, replay).
fn has_level(key: &CellKey) -> bool {
    key.rate.is_some() || key.replay.is_some()
}

/// The value of a scan's fourth key column (`rate`) for a cell: a rate cell's rate in
/// thousandths of a request per second, minus a replay cell's number, 0 for the rest.
/// [`from_level`] reads it back.
pub fn level(key: &CellKey) -> i64 {
    match (key.rate, key.replay) {
        (Some(r), _) => i64::from(r.milli()),
        (None, Some(i)) => -i64::from(i),
        (None, None) => 0,
    }
}

/// The key whose fourth key column is `level` (see [`level`]); `None` for a value no
/// cell has.
pub fn from_level(key: CellKey, level: i64) -> Option<CellKey> {
    match level {
        0 => Some(key),
        l if l > 0 => Some(CellKey {
            rate: Some(tokentrace_schemas::Rate::from_milli(
                u32::try_from(l).ok()?,
            )?),
            ..key
        }),
        l => Some(CellKey {
            replay: Some(u32::try_from(-l).ok()?),
            ..key
        }),
    }
}
