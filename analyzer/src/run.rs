//! A run folder opened for analysis: the manifest (version-checked) and every cell
//! folder as the scorer sees it (complete, or incomplete with the reason), each cell's
//! commit mark, checksums and table footers checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use tokentrace_schemas::digest::Sha256;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellMeta, Manifest};
use tokentrace_schemas::reader::open_table_file;
use tokentrace_schemas::tables::{Chunks, Events, Metrics, Requests};
use tokentrace_schemas::verify::{verify_commit_mark, verify_files};
use tokentrace_schemas::{CellKey, Table};

pub use tokentrace_score::judge::Cell;
use tokentrace_score::stages::{self, Stage};

use crate::error::Result;

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
    pub cells: Vec<Cell>,
    /// Each cell's folder.
    dirs: BTreeMap<CellKey, PathBuf>,
    /// Whether the cells' files were checked against their checksums.
    pub verify: Verify,
}

/// Opens the cell in `dir`; with `verify`, first checks its commit mark against the
/// manifest's checksum of it (`recorded`), then its files against the commit mark's.
/// Each table's footer is checked (version, table, columns); its pages are checked as
/// scoring reads them (a cell whose pages fail is then listed as incomplete).
fn check_cell(
    dir: &Path,
    verify: Verify,
    recorded: Option<Sha256>,
) -> tokentrace_schemas::Result<()> {
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
        return Ok(());
    }
    /// Each file's footer, the table's later parts included.
    fn footer<T: Table>(dir: &Path, file: &str) -> tokentrace_schemas::Result<()> {
        let first = dir.join(file);
        let later = tokentrace_schemas::layout::later_parts(&first);
        for path in std::iter::once(first).chain(later) {
            stages::time(Stage::Open, || open_table_file::<T>(&path))?;
        }
        Ok(())
    }
    footer::<Requests>(dir, "requests.parquet")?;
    footer::<Chunks>(dir, "chunks.parquet")?;
    footer::<Metrics>(dir, "metrics.parquet")?;
    footer::<Events>(dir, "events.parquet")
}

impl Run {
    /// Opens `dir`: reads the manifest and checks every cell folder against its
    /// checksums (see [`check_cell`]). A bad cell does not fail the run; it is listed as
    /// incomplete with the error that explains it.
    pub fn open(dir: &Path) -> Result<Run> {
        Run::open_with(dir, Verify::Checksums)
    }

    /// Opens `dir` as [`Run::open`] does, checking the cells' checksums or not.
    pub fn open_with(dir: &Path, verify: Verify) -> Result<Run> {
        let manifest = stages::time(Stage::Open, || Manifest::read(dir))?;
        // Cells in parallel, in order.
        let checked: Vec<(Cell, PathBuf)> = list_cells(dir)?
            .into_par_iter()
            .map(|(key, cell_dir)| {
                let cell = match check_cell(&cell_dir, verify, manifest.cell_sha256(key)) {
                    Ok(()) => Cell::Complete(key),
                    Err(e) => Cell::Incomplete(key, e.to_string()),
                };
                (cell, cell_dir)
            })
            .collect();
        let dirs = checked.iter().map(|(c, d)| (c.key(), d.clone())).collect();
        Ok(Run {
            dir: dir.to_path_buf(),
            manifest,
            cells: checked.into_iter().map(|(c, _)| c).collect(),
            dirs,
            verify,
        })
    }

    /// The folder of the cell `key` (one of [`Run::cells`]).
    pub fn cell_dir(&self, key: CellKey) -> Option<&Path> {
        self.dirs.get(&key).map(PathBuf::as_path)
    }

    /// Cells that can be scored, with their folders.
    pub fn complete_cells(&self) -> impl Iterator<Item = (CellKey, &Path)> {
        self.cells.iter().filter_map(|c| match c {
            Cell::Complete(key) => Some((*key, self.cell_dir(*key)?)),
            Cell::Incomplete(..) => None,
        })
    }
}
