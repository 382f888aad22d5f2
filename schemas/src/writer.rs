//! Streaming Parquet writers: `TableWriter` turns rows into bounded record batches,
//! bounded row groups (zstd, dictionary-encoded strings, delta-encoded times) and files
//! of bounded footers (a long table goes on in parts), and `CellWriter` builds a whole
//! cell in a staging folder and commits it atomically.

use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::digest::HashingWriter;
use crate::error::{Error, Result};
use crate::layout::{CELL_FILE, CellKey, RAW_FILE, part_file, table_file};
use crate::manifest::{CellMeta, FileStat, write_json};
use crate::raw::RawWriter;
use crate::table::Table;
use crate::tables::{
    ChunkRow, Chunks, EventRow, Events, Gpu, GpuRow, MetricRow, Metrics, Replay, ReplayRow,
    RequestRow, Requests, TurnRow, Turns,
};
use crate::{CREATED_BY, SCHEMA_VERSION, SCHEMA_VERSION_KEY, TABLE_KEY, fsutil};

/// Rows buffered before they become one record batch.
pub const DEFAULT_BATCH_ROWS: usize = 8 * 1024;
/// Most rows in one row group.
pub const DEFAULT_MAX_ROW_GROUP_ROWS: usize = 128 * 1024;
/// Most rows in one row group of every table but `chunks` (`requests`, `metrics`,
/// `events`...). A recorder holds a row group's pages, and its dictionaries, until the
/// group is written. A request's row is written when it ends, so at 1,000 requests/s a
/// `requests` group of 128 Ki rows was built over 131 s, and the recorder's heap rose by
/// its pages (about 9 MB) and fell at each flush; each such top could set a new
/// high-water mark of its resident memory. A scrape adds about a hundred `metrics` rows
/// a second: a group of 128 Ki rows was never written in a 15-minute cell, and the
/// recorder's live heap grew with it the whole cell (BENCHMARKS.md, "Cells of any
/// length"). 16 Ki rows are 16 s of requests and under three minutes of scrapes.
pub const SMALL_ROW_GROUP_ROWS: usize = 16 * 1024;
/// A row group is flushed once its encoded, buffered size passes this many bytes.
pub const DEFAULT_MAX_ROW_GROUP_BYTES: usize = 32 * 1024 * 1024;
/// Row groups in one file of a table before the table goes on in its next part
/// (`chunks.1.parquet`...). The Parquet writer holds each written row group's footer
/// entry until its file closes: about 11 KB for a `chunks` row group of 128 Ki rows,
/// 9.5 KB for a `requests` one (BENCHMARKS.md, "The recorder on a 15-minute cell"), so
/// one file per table grew the recorder's memory with the cell's length. 32 row groups
/// bound it near 0.4 MB a table; a part is 4 Mi `chunks` rows, 512 Ki `requests` rows.
pub const DEFAULT_PART_ROW_GROUPS: usize = 32;
/// zstd level for the tables (3: zstd's default, a good size/speed point for traces).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// Columns of free text (stream deltas, error messages, details).
const TEXT_COLUMNS: [&str; 4] = ["content", "reasoning", "error", "detail"];

/// Limits that bound a writer's memory.
#[derive(Debug, Clone, Copy)]
pub struct WriterLimits {
    pub batch_rows: usize,
    pub max_row_group_rows: usize,
    pub max_row_group_bytes: usize,
    /// Row groups in one file before the table goes on in its next part.
    pub part_row_groups: usize,
}

impl Default for WriterLimits {
    fn default() -> Self {
        WriterLimits {
            batch_rows: DEFAULT_BATCH_ROWS,
            max_row_group_rows: DEFAULT_MAX_ROW_GROUP_ROWS,
            max_row_group_bytes: DEFAULT_MAX_ROW_GROUP_BYTES,
            part_row_groups: DEFAULT_PART_ROW_GROUPS,
        }
    }
}

/// The Parquet writer properties of a table: stamped, zstd, and per-column encodings.
pub fn writer_properties<T: Table>(limits: &WriterLimits) -> WriterProperties {
    let zstd = ZstdLevel::try_new(DEFAULT_ZSTD_LEVEL).unwrap_or_default();
    let mut b = WriterProperties::builder()
        .set_created_by(CREATED_BY.to_string())
        .set_key_value_metadata(Some(vec![
            KeyValue::new(SCHEMA_VERSION_KEY.to_string(), SCHEMA_VERSION.to_string()),
            KeyValue::new(TABLE_KEY.to_string(), T::NAME.to_string()),
        ]))
        .set_compression(Compression::ZSTD(zstd))
        // Statistics per row group, not per page: the page-level ones (the column
        // index) are held until the file closes, a few allocations per page, and
        // no reader of ours uses them.
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_dictionary_enabled(true)
        .set_max_row_group_row_count(Some(max_row_group_rows::<T>(limits)));
    for field in T::fields() {
        let name = field.name();
        let col = ColumnPath::from(name.as_str());
        // Times and positions grow steadily: delta encoding stores the small steps.
        if name.ends_with("_ns") || name == "seq" || name == "completion_tokens" {
            b = b
                .set_column_dictionary_enabled(col.clone(), false)
                .set_column_encoding(col, Encoding::DELTA_BINARY_PACKED);
        } else if TEXT_COLUMNS.contains(&name.as_str()) {
            // Free text rarely repeats whole: lengths delta-packed, bytes back to back for zstd.
            b = b
                .set_column_dictionary_enabled(col.clone(), false)
                .set_column_encoding(col, Encoding::DELTA_LENGTH_BYTE_ARRAY);
        }
    }
    b.build()
}

/// Most rows in one row group of table `T` under `limits`.
pub fn max_row_group_rows<T: Table>(limits: &WriterLimits) -> usize {
    if T::NAME == Chunks::NAME {
        limits.max_row_group_rows
    } else {
        limits.max_row_group_rows.min(SMALL_ROW_GROUP_ROWS)
    }
}

/// Streams rows of one table into Parquet with bounded memory: the file it was created
/// with, then, past [`WriterLimits::part_row_groups`] row groups, the next part
/// ([`part_file`]), each file closed whole before the next begins.
#[derive(Debug)]
pub struct TableWriter<T: Table> {
    /// The file being written.
    path: PathBuf,
    /// The first part's file name, which the later parts' names follow.
    first: String,
    writer: ArrowWriter<HashingWriter<File>>,
    schema: SchemaRef,
    buf: Vec<T::Row>,
    limits: WriterLimits,
    /// Rows written as batches, in every part.
    rows: u64,
    /// Rows written as batches into the file being written.
    part_rows: u64,
    /// The parts already closed: file name and what was written.
    done: Vec<(String, FileStat)>,
    _table: PhantomData<T>,
}

/// Creates (truncates) one Parquet file of table `T` and a writer into it, which hashes
/// what it writes.
fn create_file<T: Table>(
    path: &Path,
    limits: &WriterLimits,
) -> Result<ArrowWriter<HashingWriter<File>>> {
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let props = writer_properties::<T>(limits);
    ArrowWriter::try_new(HashingWriter::new(file), T::schema(), Some(props)).map_err(|source| {
        Error::ParquetWrite {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Writes a file's footer, fsyncs it and says what it holds (`rows` rows): its digest is
/// of the bytes written, without reading the file back.
fn close_file(
    path: &Path,
    writer: ArrowWriter<HashingWriter<File>>,
    rows: u64,
) -> Result<FileStat> {
    let hashed = writer.into_inner().map_err(|source| Error::ParquetWrite {
        path: path.to_path_buf(),
        source,
    })?;
    let (file, sha256, bytes) = hashed.finish();
    file.sync_all().map_err(|e| Error::io(path, e))?;
    Ok(FileStat {
        rows,
        bytes,
        sha256: Some(sha256),
    })
}

impl<T: Table> TableWriter<T> {
    /// Creates (truncates) `path` with default limits.
    pub fn create(path: &Path) -> Result<Self> {
        Self::with_limits(path, WriterLimits::default())
    }

    /// Creates (truncates) `path` with the given limits.
    pub fn with_limits(path: &Path, limits: WriterLimits) -> Result<Self> {
        let writer = create_file::<T>(path, &limits)?;
        Ok(TableWriter {
            path: path.to_path_buf(),
            first: path
                .file_name()
                .map_or_else(|| table_file::<T>(), |n| n.to_string_lossy().into_owned()),
            writer,
            schema: T::schema(),
            buf: Vec::with_capacity(limits.batch_rows.min(DEFAULT_BATCH_ROWS)),
            limits,
            rows: 0,
            part_rows: 0,
            done: Vec::new(),
            _table: PhantomData,
        })
    }

    /// Adds one row; a full buffer becomes a record batch.
    pub fn push(&mut self, row: T::Row) -> Result<()> {
        self.buf.push(row);
        if self.buf.len() >= self.limits.batch_rows {
            self.flush_rows()?;
        }
        Ok(())
    }

    /// Writes a ready record batch; its schema must be the table's (metadata aside).
    pub fn write_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        self.flush_rows()?;
        self.write_checked(batch)
    }

    /// Rows accepted so far.
    pub fn rows(&self) -> u64 {
        self.rows + self.buf.len() as u64
    }

    fn flush_rows(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        T::sort_block(&mut self.buf);
        let batch = T::to_batch(&self.buf).map_err(|source| Error::Batch {
            path: self.path.clone(),
            table: T::NAME,
            source,
        })?;
        self.buf.clear();
        self.write_checked(&batch)
    }

    fn write_checked(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(Error::SchemaMismatch {
                path: self.path.clone(),
                table: T::NAME,
                expected: crate::reader::describe_fields(self.schema.fields()),
                found: crate::reader::describe_fields(batch.schema().fields()),
            });
        }
        // A file that holds its row groups goes on in the next part, opened only when a
        // row comes for it: a table never ends in an empty part.
        if self.writer.flushed_row_groups().len() >= self.limits.part_row_groups.max(1) {
            self.next_part()?;
        }
        let failed = |source| Error::ParquetWrite {
            path: self.path.clone(),
            source,
        };
        self.writer.write(batch).map_err(failed)?;
        self.rows += batch.num_rows() as u64;
        self.part_rows += batch.num_rows() as u64;
        if self.writer.in_progress_size() >= self.limits.max_row_group_bytes {
            self.writer.flush().map_err(|source| Error::ParquetWrite {
                path: self.path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// Closes the file being written (its buffered rows become its last row group) and
    /// goes on in the table's next part.
    fn next_part(&mut self) -> Result<()> {
        let path = self
            .path
            .with_file_name(part_file(&self.first, self.done.len() + 1));
        let writer = create_file::<T>(&path, &self.limits)?;
        let path = std::mem::replace(&mut self.path, path);
        let writer = std::mem::replace(&mut self.writer, writer);
        let stat = close_file(&path, writer, std::mem::take(&mut self.part_rows))?;
        self.done
            .push((part_file(&self.first, self.done.len()), stat));
        Ok(())
    }

    /// Writes the last file's footer and fsyncs it: every part's file name, in order, with
    /// what it holds (one part unless the table passed [`WriterLimits::part_row_groups`]
    /// row groups).
    pub fn finish(mut self) -> Result<Vec<(String, FileStat)>> {
        self.flush_rows()?;
        let stat = close_file(&self.path, self.writer, self.part_rows)?;
        self.done
            .push((part_file(&self.first, self.done.len()), stat));
        Ok(self.done)
    }
}

/// Builds one cell in `RUN/.staging/...` and commits it to `RUN/cells/...` atomically:
/// every file is synced, `cell.json` (complete: true) is written last, and the whole
/// folder is renamed into place. An interrupted cell never appears under `cells/`.
#[derive(Debug)]
pub struct CellWriter {
    key: CellKey,
    staging: PathBuf,
    target: PathBuf,
    pub requests: TableWriter<Requests>,
    pub chunks: TableWriter<Chunks>,
    pub metrics: TableWriter<Metrics>,
    pub events: TableWriter<Events>,
    /// GPU telemetry: created with the first row, so a cell without telemetry has no
    /// `gpu.parquet`.
    pub gpu: Option<TableWriter<Gpu>>,
    /// A replay cell's workload: created with the first row.
    pub replay: Option<TableWriter<Replay>>,
    /// A conversation cell's turns: created with the first row.
    pub turns: Option<TableWriter<Turns>>,
    limits: WriterLimits,
    pub raw: RawWriter,
}

/// An optional table's writer, created in `staging` with its first row (a cell without
/// such rows has no file of it).
fn optional<'a, T: Table>(
    slot: &'a mut Option<TableWriter<T>>,
    staging: &Path,
    limits: WriterLimits,
) -> Result<&'a mut TableWriter<T>> {
    match slot {
        Some(w) => Ok(w),
        None => Ok(slot.insert(TableWriter::with_limits(
            &staging.join(table_file::<T>()),
            limits,
        )?)),
    }
}

impl CellWriter {
    /// Starts a cell; a stale staging folder of the same cell (from a crash) is removed.
    pub fn create(run: &Path, key: CellKey) -> Result<Self> {
        Self::with_limits(run, key, WriterLimits::default())
    }

    /// Starts a cell with the given writer limits.
    pub fn with_limits(run: &Path, key: CellKey, limits: WriterLimits) -> Result<Self> {
        let target = key.dir(run);
        if target.exists() {
            return Err(Error::CellExists { path: target });
        }
        let staging = key.staging_dir(run);
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
        }
        std::fs::create_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
        Ok(CellWriter {
            key,
            requests: TableWriter::with_limits(&staging.join(table_file::<Requests>()), limits)?,
            chunks: TableWriter::with_limits(&staging.join(table_file::<Chunks>()), limits)?,
            metrics: TableWriter::with_limits(&staging.join(table_file::<Metrics>()), limits)?,
            events: TableWriter::with_limits(&staging.join(table_file::<Events>()), limits)?,
            gpu: None,
            replay: None,
            turns: None,
            limits,
            raw: RawWriter::create(&staging.join(RAW_FILE))?,
            staging,
            target,
        })
    }

    pub fn key(&self) -> CellKey {
        self.key
    }

    pub fn push_request(&mut self, row: RequestRow) -> Result<()> {
        self.requests.push(row)
    }

    pub fn push_chunk(&mut self, row: ChunkRow) -> Result<()> {
        self.chunks.push(row)
    }

    pub fn push_metric(&mut self, row: MetricRow) -> Result<()> {
        self.metrics.push(row)
    }

    pub fn push_event(&mut self, row: EventRow) -> Result<()> {
        self.events.push(row)
    }

    pub fn push_gpu(&mut self, row: GpuRow) -> Result<()> {
        optional(&mut self.gpu, &self.staging, self.limits)?.push(row)
    }

    pub fn push_replay(&mut self, row: ReplayRow) -> Result<()> {
        optional(&mut self.replay, &self.staging, self.limits)?.push(row)
    }

    pub fn push_turn(&mut self, row: TurnRow) -> Result<()> {
        optional(&mut self.turns, &self.staging, self.limits)?.push(row)
    }

    /// Finishes every file, writes the commit mark and renames the cell into place.
    pub fn commit(self) -> Result<CellMeta> {
        let CellWriter {
            key,
            staging,
            target,
            requests,
            chunks,
            metrics,
            events,
            gpu,
            replay,
            turns,
            limits: _,
            raw,
        } = self;
        let mut files = std::collections::BTreeMap::new();
        files.extend(requests.finish()?);
        files.extend(chunks.finish()?);
        files.extend(metrics.finish()?);
        files.extend(events.finish()?);
        if let Some(gpu) = gpu {
            files.extend(gpu.finish()?);
        }
        if let Some(replay) = replay {
            files.extend(replay.finish()?);
        }
        if let Some(turns) = turns {
            files.extend(turns.finish()?);
        }
        files.insert(RAW_FILE.to_string(), raw.finish()?);
        let meta = CellMeta {
            schema_version: crate::manifest::json_version([key.phase]),
            created_by: CREATED_BY.to_string(),
            phase: key.phase,
            context: key.context,
            concurrency: key.concurrency,
            rate: key.rate,
            replay: key.replay,
            complete: true,
            files,
        };
        write_json(&staging.join(CELL_FILE), &meta)?;
        fsutil::sync_dir(&staging)?;
        // Fault injection for the interrupt tests: hold the commit between its commit
        // mark and its rename, so that a signal can be sent inside it.
        if let Some(ms) = std::env::var("TOKENTRACE_TEST_COMMIT_DELAY_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        let parent = target.parent().ok_or_else(|| Error::BadCellPath {
            path: target.clone(),
        })?;
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        if target.exists() {
            return Err(Error::CellExists { path: target });
        }
        std::fs::rename(&staging, &target).map_err(|e| Error::io(&target, e))?;
        fsutil::sync_dir(parent)?;
        // Tidy the now-empty staging parents (context=, phase=, .staging); a folder still
        // holding another cell's files is not empty and stays.
        for dir in staging.ancestors().skip(1).take(3) {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
        Ok(meta)
    }
}
