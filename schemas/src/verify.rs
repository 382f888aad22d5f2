//! Verification of a committed cell against its commit mark: each file's size and
//! SHA-256 ([`verify_files`], what `report` does before reading), then every row of every
//! table and every frame of the raw capture decoded and counted ([`verify_cell`], what
//! `tokentrace check` does; a batch at a time, bounded memory).

use std::path::Path;

use crate::digest::Sha256;
use crate::error::{Error, Result};
use crate::layout::{RAW_FILE, later_parts, part_file, split_part, table_file};
use crate::manifest::{CellMeta, FileStat};
use crate::raw::RawReader;
use crate::reader::open_table_file;
use crate::table::Table;
use crate::tables::{Chunks, Events, Gpu, Metrics, Replay, Requests, Turns};

/// What a cell's checksums proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksums {
    /// Every file the commit mark lists has its recorded size and SHA-256.
    Verified,
    /// Sizes match, but the commit mark records no checksums: the cell was written
    /// before them (or by a writer that did not hash).
    NotRecorded,
}

impl Checksums {
    /// As `check` prints it.
    pub fn label(self) -> &'static str {
        match self {
            Checksums::Verified => "checksums verified",
            Checksums::NotRecorded => "not verified: written before checksums",
        }
    }
}

/// The files every committed cell holds (the optional tables are checked where listed).
fn required_files() -> [String; 5] {
    [
        table_file::<Requests>(),
        table_file::<Chunks>(),
        table_file::<Metrics>(),
        table_file::<Events>(),
        RAW_FILE.to_string(),
    ]
}

/// The error for a file the commit mark of the cell in `dir` should list and does not.
fn unlisted(dir: &Path, name: &str) -> Error {
    Error::Damaged {
        path: dir.join(crate::layout::CELL_FILE),
        reason: format!("the commit mark does not list {name}"),
    }
}

/// Checks every file `meta` lists in `dir`: present, of the recorded size, and of the
/// recorded SHA-256 where one is recorded. The first file that differs is the error,
/// named with its path; sizes are checked before any file is hashed, so a truncated
/// copy is named without reading the rest.
pub fn verify_files(dir: &Path, meta: &CellMeta) -> Result<Checksums> {
    // An imported cell holds the other tool's figures, no tables.
    let required = if meta.is_imported() {
        vec![crate::layout::FIGURES_FILE.to_string()]
    } else {
        required_files().to_vec()
    };
    if let Some(name) = required
        .into_iter()
        .find(|name| !meta.files.contains_key(name))
    {
        return Err(unlisted(dir, &name));
    }
    check_parts(dir, meta)?;
    for (name, stat) in &meta.files {
        let path = dir.join(name);
        let size = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Damaged {
                    path,
                    reason: "cell.json lists it, but the file is absent".to_string(),
                });
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        if size != stat.bytes {
            return Err(Error::Damaged {
                path,
                reason: format!(
                    "{size} bytes, cell.json records {}: truncated or replaced",
                    stat.bytes
                ),
            });
        }
    }
    let mut all = true;
    for (name, stat) in &meta.files {
        let Some(recorded) = stat.sha256 else {
            all = false;
            continue;
        };
        let path = dir.join(name);
        let found = Sha256::of_file(&path)?;
        if found != recorded {
            return Err(Error::Damaged {
                path,
                reason: format!(
                    "SHA-256 {found}, cell.json records {recorded}: changed after it was committed"
                ),
            });
        }
    }
    Ok(if all {
        Checksums::Verified
    } else {
        Checksums::NotRecorded
    })
}

/// Checks that a table's parts in `dir` are what the commit mark lists: each later part
/// listed follows a listed one (a reader stops at the first number missing), and each
/// part on disk after a listed table file is listed.
fn check_parts(dir: &Path, meta: &CellMeta) -> Result<()> {
    for name in meta.files.keys() {
        if let Some((first, n)) = split_part(name) {
            let before = part_file(&first, n - 1);
            if !meta.files.contains_key(&before) {
                return Err(Error::Damaged {
                    path: dir.join(name),
                    reason: format!(
                        "a part of {first} after {before}, which cell.json does not list"
                    ),
                });
            }
        } else if name.ends_with(".parquet") {
            for part in later_parts(&dir.join(name)) {
                let listed = part
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| meta.files.contains_key(n));
                if !listed {
                    return Err(Error::Damaged {
                        path: part,
                        reason: format!("a part of {name} that cell.json does not list"),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Checks that the cell's `cell.json` in `dir` is the one the manifest recorded
/// (`recorded`, its `cell_sha256`; nothing to check without one): a commit mark edited
/// or swapped after the run was written is named here.
pub fn verify_commit_mark(dir: &Path, recorded: Option<Sha256>) -> Result<()> {
    let Some(recorded) = recorded else {
        return Ok(());
    };
    let path = dir.join(crate::layout::CELL_FILE);
    let found = Sha256::of_file(&path)?;
    if found != recorded {
        return Err(Error::Damaged {
            path,
            reason: format!(
                "SHA-256 {found}, manifest.json records {recorded}: the commit mark changed after the run was written"
            ),
        });
    }
    Ok(())
}

/// Adds an optional table's row counts to `counts` when the commit mark lists its file
/// or the file is there.
fn count_optional<T: Table>(
    dir: &Path,
    meta: &CellMeta,
    counts: &mut Vec<(String, u64)>,
) -> Result<()> {
    let name = table_file::<T>();
    if meta.files.contains_key(&name) || dir.join(&name).exists() {
        count_rows::<T>(dir, counts)?;
    }
    Ok(())
}

/// Adds the rows of each file of table `T` (its first file, then each later part) to
/// `counts`.
fn count_rows<T: Table>(dir: &Path, counts: &mut Vec<(String, u64)>) -> Result<()> {
    let first = dir.join(table_file::<T>());
    let later = later_parts(&first);
    for (i, path) in std::iter::once(first).chain(later).enumerate() {
        let mut n = 0u64;
        for rows in open_table_file::<T>(&path)? {
            n += rows?.len() as u64;
        }
        counts.push((part_file(&table_file::<T>(), i), n));
    }
    Ok(())
}

fn expect_count(dir: &Path, meta: &CellMeta, name: &str, found: u64) -> Result<()> {
    let path = dir.join(name);
    let Some(FileStat { rows, .. }) = meta.files.get(name).copied() else {
        return Err(unlisted(dir, name));
    };
    if found != rows {
        return Err(Error::Damaged {
            path,
            reason: format!("{found} rows, cell.json records {rows}"),
        });
    }
    Ok(())
}

/// Rows (or frames) per file of a verified cell, in file-name order.
pub type CellCounts = Vec<(String, u64)>;

/// A cell verified completely: its commit mark, its files' counts and what its
/// checksums proved.
#[derive(Debug, Clone)]
pub struct Verified {
    pub meta: CellMeta,
    pub counts: CellCounts,
    pub checksums: Checksums,
}

/// Verifies the cell in `dir` completely: the files against the commit mark
/// ([`verify_files`]), then every row and frame decoded and counted.
pub fn verify_cell(dir: &Path) -> Result<Verified> {
    let meta = CellMeta::read_complete(dir)?;
    let checksums = verify_files(dir, &meta)?;
    if meta.is_imported() {
        // An imported cell: its figures are one JSON object (the scoring's cell).
        let path = dir.join(crate::layout::FIGURES_FILE);
        let bytes = crate::fsutil::read(&path, "imported figures")?;
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(_)) => {}
            Ok(_) => {
                return Err(Error::Damaged {
                    path,
                    reason: "not a JSON object".to_string(),
                });
            }
            Err(source) => return Err(Error::Json { path, source }),
        }
        return Ok(Verified {
            meta,
            counts: vec![(crate::layout::FIGURES_FILE.to_string(), 1)],
            checksums,
        });
    }
    let mut counts = Vec::new();
    count_rows::<Requests>(dir, &mut counts)?;
    count_rows::<Chunks>(dir, &mut counts)?;
    count_rows::<Metrics>(dir, &mut counts)?;
    count_rows::<Events>(dir, &mut counts)?;
    // Optional tables: checked when the commit mark lists them or the file is there.
    count_optional::<Gpu>(dir, &meta, &mut counts)?;
    count_optional::<Replay>(dir, &meta, &mut counts)?;
    count_optional::<Turns>(dir, &meta, &mut counts)?;
    let mut frames = 0u64;
    for frame in RawReader::open(&dir.join(RAW_FILE))? {
        frame?;
        frames += 1;
    }
    counts.push((RAW_FILE.to_string(), frames));
    for (name, n) in &counts {
        expect_count(dir, &meta, name, *n)?;
    }
    counts.sort();
    Ok(Verified {
        meta,
        counts,
        checksums,
    })
}
