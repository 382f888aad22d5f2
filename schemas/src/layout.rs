//! Where things live in a run folder: the Hive-style cell paths
//! (`cells/phase=<p>/context=<n>/concurrency=<n>/`) and the fixed file names.
//! Both the recorder (writing) and the analyzer (reading) take paths from here.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::str_enum;
use crate::table::Table;

/// Run metadata, at the top of the run folder.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Folder holding the committed cells.
pub const CELLS_DIR: &str = "cells";
/// Folder where cells are built before their atomic rename into `cells/`.
pub const STAGING_DIR: &str = ".staging";
/// Folder of analyzer scorings (`<rules>@<version>.json`); never part of the trace.
pub const RESULTS_DIR: &str = "results";
/// A cell's commit mark, written last.
pub const CELL_FILE: &str = "cell.json";
/// A cell's raw capture of response bytes.
pub const RAW_FILE: &str = "raw.sse.zst";

str_enum! {
    /// The two kinds of cell in the matrix.
    pub enum Phase {
        /// One cold scout request per context; measures prompt processing.
        Prefill = "prefill",
        /// N closed-loop streams for a fixed window; measures sustained decode.
        Decode = "decode",
    }
}

/// Identifies one cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CellKey {
    pub phase: Phase,
    /// Prompt length in tokens.
    pub context: u32,
    /// Simultaneous requests (1 for prefill cells).
    pub concurrency: u32,
}

impl CellKey {
    pub fn new(phase: Phase, context: u32, concurrency: u32) -> Self {
        CellKey {
            phase,
            context,
            concurrency,
        }
    }

    /// The cell's folder relative to the run folder.
    pub fn rel_dir(&self) -> PathBuf {
        Path::new(CELLS_DIR).join(self.partition_path())
    }

    /// The cell's folder relative to `cells/` (or to the staging folder).
    pub fn partition_path(&self) -> PathBuf {
        PathBuf::from(format!("phase={}", self.phase))
            .join(format!("context={}", self.context))
            .join(format!("concurrency={}", self.concurrency))
    }

    /// The cell's folder inside `run`.
    pub fn dir(&self, run: &Path) -> PathBuf {
        run.join(self.rel_dir())
    }

    /// Where the cell is written before its commit renames it to [`CellKey::dir`].
    pub fn staging_dir(&self, run: &Path) -> PathBuf {
        run.join(STAGING_DIR).join(self.partition_path())
    }

    /// Parses a path that ends in `phase=<p>/context=<n>/concurrency=<n>`.
    pub fn from_path(path: &Path) -> Result<Self> {
        let bad = || Error::BadCellPath {
            path: path.to_path_buf(),
        };
        let parts: Vec<&str> = path
            .components()
            .rev()
            .take(3)
            .map(|c| c.as_os_str().to_str().ok_or_else(bad))
            .collect::<Result<_>>()?;
        let [conc, ctx, phase] = parts[..] else {
            return Err(bad());
        };
        let value = |part: &'_ str, key: &str| -> Result<String> {
            part.strip_prefix(key)
                .and_then(|p| p.strip_prefix('='))
                .map(str::to_string)
                .ok_or_else(bad)
        };
        use crate::column::StrEnum;
        Ok(CellKey {
            phase: Phase::parse(&value(phase, "phase")?).ok_or_else(bad)?,
            context: value(ctx, "context")?.parse().map_err(|_| bad())?,
            concurrency: value(conc, "concurrency")?.parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for CellKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} context={} concurrency={}",
            self.phase, self.context, self.concurrency
        )
    }
}

/// The file name of a table: `<name>.parquet`.
pub fn table_file<T: Table>() -> String {
    format!("{}.parquet", T::NAME)
}

/// Every committed cell folder under `run/cells`, sorted by key (deterministic order).
/// A folder without a cell.json is still listed: the caller decides what incomplete means.
/// A run without a `cells` folder has no cells (every cell skipped, or none recorded yet).
pub fn list_cells(run: &Path) -> Result<Vec<(CellKey, PathBuf)>> {
    let cells = run.join(CELLS_DIR);
    if !cells.exists() {
        return Ok(Vec::new());
    }
    if !cells.is_dir() {
        return Err(Error::Missing {
            path: cells,
            what: "cells folder",
        });
    }
    let mut out = Vec::new();
    for phase in read_dir_sorted(&cells)? {
        for ctx in read_dir_sorted(&phase)? {
            for conc in read_dir_sorted(&ctx)? {
                out.push((CellKey::from_path(&conc)?, conc));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if path.is_dir() {
            v.push(path);
        }
    }
    v.sort();
    Ok(v)
}
