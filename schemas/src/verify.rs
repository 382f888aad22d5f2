//! Full verification of a committed cell: decodes every row of every table and every
//! frame of the raw capture (a batch at a time, bounded memory) and checks the counts
//! against the commit mark. Slower than opening footers; meant for `tokentrace check`.

use std::path::Path;

use crate::error::{Error, Result};
use crate::layout::{RAW_FILE, table_file};
use crate::manifest::{CellMeta, FileStat};
use crate::raw::RawReader;
use crate::reader::open_table;
use crate::table::Table;
use crate::tables::{Chunks, Events, Gpu, Metrics, Replay, Requests};

fn count_rows<T: Table>(dir: &Path) -> Result<u64> {
    let mut n = 0u64;
    for rows in open_table::<T>(&dir.join(table_file::<T>()))? {
        n += rows?.len() as u64;
    }
    Ok(n)
}

fn expect_count(dir: &Path, meta: &CellMeta, name: &str, found: u64) -> Result<()> {
    let path = dir.join(name);
    let Some(FileStat { rows, bytes }) = meta.files.get(name).copied() else {
        return Err(Error::Incomplete {
            path: dir.to_path_buf(),
            reason: format!("cell.json does not list {name}"),
        });
    };
    let size = std::fs::metadata(&path)
        .map_err(|e| Error::io(&path, e))?
        .len();
    if size != bytes || found != rows {
        return Err(Error::Incomplete {
            path: path.clone(),
            reason: format!(
                "cell.json records {rows} rows in {bytes} bytes, the file has {found} rows in {size} bytes"
            ),
        });
    }
    Ok(())
}

/// Rows (or frames) per file of a verified cell, in file-name order.
pub type CellCounts = Vec<(String, u64)>;

/// Verifies the cell in `dir` completely; returns its commit mark and per-file counts.
pub fn verify_cell(dir: &Path) -> Result<(CellMeta, CellCounts)> {
    let meta = CellMeta::read_complete(dir)?;
    let mut counts = vec![
        (table_file::<Requests>(), count_rows::<Requests>(dir)?),
        (table_file::<Chunks>(), count_rows::<Chunks>(dir)?),
        (table_file::<Metrics>(), count_rows::<Metrics>(dir)?),
        (table_file::<Events>(), count_rows::<Events>(dir)?),
    ];
    // Optional tables: checked when the commit mark lists them or the file is there.
    let gpu = table_file::<Gpu>();
    if meta.files.contains_key(&gpu) || dir.join(&gpu).exists() {
        counts.push((gpu, count_rows::<Gpu>(dir)?));
    }
    let replay = table_file::<Replay>();
    if meta.files.contains_key(&replay) || dir.join(&replay).exists() {
        counts.push((replay, count_rows::<Replay>(dir)?));
    }
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
    Ok((meta, counts))
}
