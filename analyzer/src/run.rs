//! A run folder opened for analysis: the manifest (version-checked), the state of every
//! cell folder (complete, or incomplete with the reason), and lazy polars scans of a
//! table across all complete cells with the key columns `phase`, `context`,
//! `concurrency` and `rate`.

use std::path::{Path, PathBuf};

use polars::prelude::*;
use rayon::prelude::*;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::digest::Sha256;
use tokentrace_schemas::layout::{CELLS_DIR, list_cells};
use tokentrace_schemas::manifest::{CellMeta, Manifest};
use tokentrace_schemas::reader::open_table;
use tokentrace_schemas::tables::{Chunks, Events, Metrics, Requests, TABLE_NAMES};
use tokentrace_schemas::verify::{verify_commit_mark, verify_files};
use tokentrace_schemas::{CellKey, Table};

use tokentrace_score::stages::{self, Stage};

use crate::error::{Error, Result};

/// One cell folder of the run and whether it can be scored.
#[derive(Debug, Clone)]
pub enum CellState {
    /// Committed, its commit mark and every table's stamp and schema checked.
    Complete {
        key: CellKey,
        dir: PathBuf,
        meta: CellMeta,
    },
    /// Present but not scorable; `reason` says why (no commit mark, a bad file, ...).
    Incomplete {
        key: CellKey,
        dir: PathBuf,
        reason: String,
    },
}

impl CellState {
    pub fn key(&self) -> CellKey {
        match self {
            CellState::Complete { key, .. } | CellState::Incomplete { key, .. } => *key,
        }
    }
}

/// Whether opening a run checks each committed file against the size and SHA-256 its
/// cell's commit mark records (cells written before checksums: sizes only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Check them: a file that differs makes its cell incomplete, with the file named.
    Checksums,
    /// Read the files as they are (`--no-verify`); the scoring says so.
    Skip,
}

/// A run folder, opened.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Every cell folder under `cells/`, sorted by key.
    pub cells: Vec<CellState>,
    /// Whether the cells' files were checked against their checksums.
    pub verify: Verify,
}

/// Opens the cell in `dir`; with `verify`, first checks its commit mark against the
/// manifest's checksum of it (`recorded`), then its files against the commit mark's.
fn check_cell(
    dir: &Path,
    pages: bool,
    verify: Verify,
    recorded: Option<Sha256>,
) -> tokentrace_schemas::Result<CellMeta> {
    if verify == Verify::Checksums {
        stages::time(Stage::Verify, || verify_commit_mark(dir, recorded))?;
    }
    let meta = stages::time(Stage::Open, || CellMeta::read_complete(dir))?;
    if verify == Verify::Checksums {
        stages::time(Stage::Verify, || verify_files(dir, &meta))?;
    }
    // An imported cell holds its figures, no tables (read when the run is scored).
    if meta
        .files
        .contains_key(tokentrace_score::imported::FIGURES_FILE)
    {
        return Ok(meta);
    }
    if !pages {
        fn footer<T: Table>(dir: &Path, file: &str) -> tokentrace_schemas::Result<()> {
            stages::time(Stage::Open, || open_table::<T>(&dir.join(file))).map(drop)
        }
        footer::<Requests>(dir, "requests.parquet")?;
        footer::<Chunks>(dir, "chunks.parquet")?;
        footer::<Metrics>(dir, "metrics.parquet")?;
        footer::<Events>(dir, "events.parquet")?;
        return Ok(meta);
    }
    // Version, table and columns from the footer, then every page decoded by the trace's
    // own reader: polars, which reads the tables next, aborts the process on some damaged
    // pages (found by the damaged-run fuzz target), so it only sees files that decode.
    fn check<T: Table>(dir: &Path, file: &str) -> tokentrace_schemas::Result<u64> {
        let table = stages::time(Stage::Open, || open_table::<T>(&dir.join(file)))?;
        stages::time(Stage::Verify, || table.verify())
    }
    check::<Requests>(dir, "requests.parquet")?;
    check::<Chunks>(dir, "chunks.parquet")?;
    check::<Metrics>(dir, "metrics.parquet")?;
    check::<Events>(dir, "events.parquet")?;
    Ok(meta)
}

impl Run {
    /// Opens `dir`: reads the manifest and checks every cell folder, every page of its
    /// tables decoded (for polars, which must only see files that decode). A bad cell
    /// does not fail the run; it is listed as incomplete with the error that explains it.
    pub fn open(dir: &Path) -> Result<Run> {
        Run::open_checking(dir, true, Verify::Checksums)
    }

    /// Opens `dir` as [`Run::open`] does, but checks only each table's footer (version,
    /// table, columns): for the trace's own reader, which checks every page as it reads
    /// it ([`crate::score::score_run`] lists a cell whose pages fail as incomplete).
    pub fn open_footers(dir: &Path) -> Result<Run> {
        Run::open_checking(dir, false, Verify::Checksums)
    }

    /// Opens `dir` as [`Run::open_footers`] does, checking the cells' checksums or not.
    pub fn open_footers_with(dir: &Path, verify: Verify) -> Result<Run> {
        Run::open_checking(dir, false, verify)
    }

    fn open_checking(dir: &Path, pages: bool, verify: Verify) -> Result<Run> {
        let manifest = stages::time(Stage::Open, || Manifest::read(dir))?;
        // Each cell's pages are decoded to check them: cells in parallel, in order.
        let cells = list_cells(dir)?
            .into_par_iter()
            .map(|(key, cell_dir)| {
                match check_cell(&cell_dir, pages, verify, manifest.cell_sha256(key)) {
                    Ok(meta) => CellState::Complete {
                        key,
                        dir: cell_dir,
                        meta,
                    },
                    Err(e) => CellState::Incomplete {
                        key,
                        dir: cell_dir,
                        reason: e.to_string(),
                    },
                }
            })
            .collect();
        Ok(Run {
            dir: dir.to_path_buf(),
            manifest,
            cells,
            verify,
        })
    }

    /// Whether any complete cell is a rate or replay cell (whose scans carry a `rate`
    /// key column: see [`level`]).
    pub fn has_rate_cells(&self) -> bool {
        self.complete_cells().any(|(key, _)| has_level(key))
    }

    /// Cells that can be scored.
    pub fn complete_cells(&self) -> impl Iterator<Item = (&CellKey, &Path)> {
        self.cells.iter().filter_map(|c| match c {
            CellState::Complete { key, dir, .. } => Some((key, dir.as_path())),
            CellState::Incomplete { .. } => None,
        })
    }

    /// A lazy scan of `table` over every complete cell, with the cell's key appended as
    /// columns: `phase` (string), `context`, `concurrency` and, in a run with rate cells
    /// ([`Run::has_rate_cells`]), `rate` (int64; a rate cell's rate in thousandths of a
    /// request per second, 0 for other cells). Cells of
    /// the `concurrency=` layout are read in one scan with Hive partitioning; rate cells
    /// (`rate=` as the last level, which one Hive scan cannot mix in) one scan each with
    /// their key as literals. `None` when no cell is complete.
    pub fn scan(&self, table: &str) -> Result<Option<LazyFrame>> {
        if !TABLE_NAMES.contains(&table) {
            return Err(Error::UnknownTable(table.to_string()));
        }
        let cells_dir = self.dir.join(CELLS_DIR);
        let perr = |source| Error::Polars {
            path: cells_dir.clone(),
            source,
        };
        let prefix = format!("{}/", cells_dir.display());
        let (rated, others): (Vec<_>, Vec<_>) =
            self.complete_cells().partition(|(key, _)| has_level(key));
        let file = |key: &CellKey| {
            PlRefPath::new(format!(
                "{prefix}{}/{table}.parquet",
                key.partition_path().display()
            ))
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
            let paths: Vec<PlRefPath> = others.iter().map(|(key, _)| file(key)).collect();
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
            let frame = LazyFrame::scan_parquet(file(key), args).map_err(perr)?;
            frames.push(
                frame.with_columns([
                    lit(key.phase.as_str()).alias("phase"),
                    lit(i64::from(key.context))
                        .cast(DataType::Int64)
                        .alias("context"),
                    lit(i64::from(key.concurrency))
                        .cast(DataType::Int64)
                        .alias("concurrency"),
                    lit(level(key)).cast(DataType::Int64).alias("rate"),
                ]),
            );
        }
        if frames.len() < 2 {
            return Ok(frames.pop());
        }
        // One column order for every frame of the union: the table's, then the key. (A
        // run with rate cells was written with every column of the current format.)
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

    /// Collects a scan (see [`Run::scan`]) into a data frame.
    pub fn collect(&self, table: &str) -> Result<Option<DataFrame>> {
        let Some(lf) = self.scan(table)? else {
            return Ok(None);
        };
        lf.collect().map(Some).map_err(|source| Error::Polars {
            path: self.dir.join(CELLS_DIR),
            source,
        })
    }
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
/// Internal to the analyzer's scans (never written); [`from_level`] reads it back.
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
