//! Reading trace tables back: opens a Parquet file, checks the stamp (schema version,
//! table name) and the columns against this build's schema, then yields typed rows a
//! batch at a time, going on into the table's later parts (`chunks.1.parquet`...), each
//! checked alike. Every failure is an error naming the file; nothing panics.

use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use arrow_schema::Fields;
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use parquet::file::metadata::ParquetStatisticsPolicy;

use crate::error::{Error, Result};
use crate::table::Table;
use crate::{SCHEMA_VERSION, SCHEMA_VERSION_KEY, TABLE_KEY};

/// Fields as `name: type [null]`, for schema-mismatch messages.
pub fn describe_fields(fields: &Fields) -> String {
    fields
        .iter()
        .map(|f| {
            format!(
                "{}: {}{}",
                f.name(),
                f.data_type(),
                if f.is_nullable() { "?" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a table file says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    pub schema_version: u32,
    pub table: Option<String>,
    pub created_by: Option<String>,
    pub rows: i64,
}

/// Iterates a table file's rows one record batch at a time.
#[derive(Debug)]
pub struct TableReader<T: Table> {
    batches: Batches,
    _table: PhantomData<T>,
}

/// A table file's record batches, counted: past the last, rows that do not add up to
/// the footer's count are an error; after an error, nothing more is read. Calls into
/// the Parquet library are guarded ([`guarded`]).
#[derive(Debug)]
struct Batches {
    path: PathBuf,
    inner: ParquetRecordBatchReader,
    stamp: FileStamp,
    /// Rows read so far.
    row: u64,
    /// The library failed mid-file: nothing more is read.
    broken: bool,
    /// The table's later parts, read in turn once this file ends
    /// ([`crate::layout::later_parts`]).
    rest: std::vec::IntoIter<PathBuf>,
}

impl Batches {
    fn new(path: &Path, inner: ParquetRecordBatchReader, stamp: FileStamp) -> Batches {
        Batches {
            path: path.to_path_buf(),
            inner,
            stamp,
            row: 0,
            broken: false,
            rest: Vec::new().into_iter(),
        }
    }

    /// The next batch, going on into the table's next part (opened by `open`) when this
    /// file has ended whole; `None` at the end of the last (and after an error).
    fn next_across(
        &mut self,
        mut open: impl FnMut(&Path) -> Result<Batches>,
    ) -> Result<Option<arrow_array::RecordBatch>> {
        loop {
            if let Some(batch) = self.next_batch()? {
                return Ok(Some(batch));
            }
            if self.broken {
                return Ok(None);
            }
            let Some(next) = self.rest.next() else {
                return Ok(None);
            };
            let rest = std::mem::take(&mut self.rest);
            // Should the part not open, nothing more is read.
            self.broken = true;
            *self = guarded(&next, || open(&next))?;
            self.rest = rest;
        }
    }

    /// The next batch, `None` at the end (and after an error).
    fn next_batch(&mut self) -> Result<Option<arrow_array::RecordBatch>> {
        if self.broken {
            return Ok(None);
        }
        let path = self.path.clone();
        let got = guarded(&path, || match self.inner.next() {
            None => {
                // Read to the end: the rows add up to the footer's count, as `verify`
                // checks.
                let expected = self.stamp.rows;
                if i64::try_from(self.row).ok() != Some(expected) {
                    return Err(rows_short(&self.path, self.row, expected));
                }
                Ok(None)
            }
            Some(batch) => {
                let batch = batch.map_err(|e| corrupt_batch(&self.path, &e))?;
                self.row += batch.num_rows() as u64;
                Ok(Some(batch))
            }
        });
        self.broken = got.is_err();
        got
    }
}

/// A batch the Parquet library could not decode.
fn corrupt_batch(path: &Path, e: &arrow_schema::ArrowError) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        source: parquet::errors::ParquetError::ArrowError(e.to_string()),
    }
}

/// The message of a caught panic (its `&str` or `String` payload).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string())
}

/// Runs a call into the Parquet library; a panic there (it asserts on some damaged
/// metadata instead of returning an error) becomes a `Corrupt` error naming the file.
fn guarded<R>(path: &Path, f: impl FnOnce() -> Result<R>) -> Result<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic_message(panic.as_ref());
        Err(Error::Corrupt {
            path: path.to_path_buf(),
            source: parquet::errors::ParquetError::General(format!(
                "the Parquet reader gave up on damaged data: {what}"
            )),
        })
    })
}

/// Opens a table, checking version and schema: the file `path`, then each later part of
/// it that exists ([`crate::layout::later_parts`]), opened and checked alike as the one
/// before it ends.
pub fn open_table<T: Table>(path: &Path) -> Result<TableReader<T>> {
    let mut reader = open_table_file::<T>(path)?;
    reader.batches.rest = crate::layout::later_parts(path).into_iter();
    Ok(reader)
}

/// Opens one table file alone, without its later parts (what `verify` counts per file).
pub fn open_table_file<T: Table>(path: &Path) -> Result<TableReader<T>> {
    guarded(path, || {
        Ok(TableReader {
            batches: open_whole::<T>(path)?,
            _table: PhantomData,
        })
    })
}

fn open_whole<T: Table>(path: &Path) -> Result<Batches> {
    let (builder, stamp) = checked::<T>(path)?;
    let inner = builder.build().map_err(|source| Error::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Batches::new(path, inner, stamp))
}

/// A table file's reader builder, its stamp and columns checked against `T`'s schema (a
/// file written before the table's added columns holds the columns before them).
fn checked<T: Table>(path: &Path) -> Result<(ParquetRecordBatchReaderBuilder<File>, FileStamp)> {
    let file = crate::fsutil::open(path, "Parquet table")?;
    let corrupt = |source| Error::Corrupt {
        path: path.to_path_buf(),
        source,
    };
    // No reader of ours prunes by statistics: the footer is decoded without them, which
    // is most of its memory (a long cell's chunks footer: 1.56 MB at 281 row groups).
    let options = ArrowReaderOptions::new()
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll);
    let builder =
        ParquetRecordBatchReaderBuilder::try_new_with_options(file, options).map_err(corrupt)?;
    let stamp = check_stamp::<T>(path, &builder)?;
    let expected = T::schema();
    let found = builder.schema();
    // A file written before the table's added columns holds the columns before them.
    let (n, all) = (found.fields().len(), expected.fields().len());
    let older = n < all
        && n >= all - T::ADDED_COLUMNS
        && found
            .fields()
            .iter()
            .zip(expected.fields().iter())
            .all(|(f, e)| f == e);
    if found.fields() != expected.fields() && !older {
        return Err(Error::SchemaMismatch {
            path: path.to_path_buf(),
            table: T::NAME,
            expected: describe_fields(expected.fields()),
            found: describe_fields(found.fields()),
        });
    }
    Ok((builder, stamp))
}

fn check_stamp<T: Table>(
    path: &Path,
    builder: &ParquetRecordBatchReaderBuilder<File>,
) -> Result<FileStamp> {
    let meta = builder.metadata().file_metadata();
    let kv = meta.key_value_metadata();
    let get = |key: &str| {
        kv.and_then(|kv| kv.iter().find(|e| e.key == key))
            .and_then(|e| e.value.clone())
    };
    let Some(version) = get(SCHEMA_VERSION_KEY) else {
        return Err(Error::NotTokentrace {
            path: path.to_path_buf(),
            key: SCHEMA_VERSION_KEY,
        });
    };
    let bad = || Error::BadVersion {
        path: path.to_path_buf(),
        found: version.clone(),
        supported: SCHEMA_VERSION,
    };
    let found: u32 = version.trim().parse().map_err(|_| bad())?;
    if found > SCHEMA_VERSION {
        return Err(Error::NewerVersion {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found != SCHEMA_VERSION {
        return Err(bad());
    }
    let table = get(TABLE_KEY);
    if let Some(t) = &table
        && t != T::NAME
    {
        return Err(Error::SchemaMismatch {
            path: path.to_path_buf(),
            table: T::NAME,
            expected: format!("table `{}`", T::NAME),
            found: format!("table `{t}`"),
        });
    }
    Ok(FileStamp {
        schema_version: found,
        table,
        created_by: meta.created_by().map(str::to_string),
        rows: meta.num_rows(),
    })
}

impl<T: Table> TableReader<T> {
    /// The stamp of the file being read (version, table, writer, row count from its
    /// footer): the first part's until it ends.
    pub fn stamp(&self) -> &FileStamp {
        &self.batches.stamp
    }

    /// The next record batch, going on into the next part when a file ends whole.
    fn next_batch(&mut self) -> Result<Option<arrow_array::RecordBatch>> {
        self.batches.next_across(open_whole::<T>)
    }

    /// The next batch of rows, `None` at the end (and after an error). At the end of each
    /// file, rows that do not add up to its footer's count are an error, as in
    /// [`Self::verify`].
    pub fn next_rows(&mut self) -> Result<Option<Vec<T::Row>>> {
        let Some(mut batch) = self.next_batch()? else {
            return Ok(None);
        };
        let path = &self.batches.path;
        let first = self.batches.row - batch.num_rows() as u64;
        let expected = T::schema();
        if batch.num_columns() < expected.fields().len() {
            // An older file (see `open_table`): the added columns read as nulls.
            let mut columns = batch.columns().to_vec();
            for f in &expected.fields()[columns.len()..] {
                columns.push(arrow_array::new_null_array(f.data_type(), batch.num_rows()));
            }
            batch = arrow_array::RecordBatch::try_new(expected, columns)
                .map_err(|e| corrupt_batch(path, &e))?;
        }
        let rows = T::from_batch(&batch).map_err(|e| Error::BadValue {
            path: path.clone(),
            column: e.column,
            row: first + e.row as u64,
            message: e.message,
        });
        self.batches.broken |= rows.is_err();
        rows.map(Some)
    }

    /// Decodes every page of the file without building rows, and checks the rows add up
    /// to the footer's count: damage anywhere in the data is an error naming the file.
    /// Readers less careful with damaged bytes (polars aborts the process on a length
    /// field that asks for 2^61 bytes) are handed only files that passed this.
    pub fn verify(mut self) -> Result<u64> {
        let mut rows = 0u64;
        while let Some(batch) = self.next_batch()? {
            rows += batch.num_rows() as u64;
        }
        Ok(rows)
    }
}

impl<T: Table> Iterator for TableReader<T> {
    type Item = Result<Vec<T::Row>>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_rows().transpose()
    }
}

/// A file whose decoded rows do not add up to its footer's count.
fn rows_short(path: &Path, rows: u64, expected: i64) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        source: parquet::errors::ParquetError::General(format!(
            "{rows} rows decoded, the footer says {expected}"
        )),
    }
}

/// Reads a whole table file into memory (for tests and small files).
pub fn read_table<T: Table>(path: &Path) -> Result<Vec<T::Row>> {
    let mut out = Vec::new();
    for rows in open_table::<T>(path)? {
        out.extend(rows?);
    }
    Ok(out)
}

/// Reads chosen columns of a table file a record batch at a time, without building rows:
/// only those columns' pages are read and decoded. The batches hold the columns asked
/// for, in that order (a column added after the file was written reads as nulls). At the
/// end, rows that do not add up to the footer's count are an error. Nothing panics.
#[derive(Debug)]
pub struct ColumnReader {
    batches: Batches,
    /// Per column asked for: its index in the file's batches, or its type where the file
    /// predates it.
    columns: Vec<std::result::Result<usize, arrow_schema::DataType>>,
    /// The columns asked for, by name, and how to open a later part with them.
    names: Vec<String>,
    reopen: OpenColumns,
}

/// Opens the named columns of one table file (`open_projected` for a table).
type OpenColumns = fn(&Path, &[&str]) -> Result<(Batches, Vec<ColumnPlace>)>;

/// Where a column asked for is in a file's batches, or its type where the file predates it.
type ColumnPlace = std::result::Result<usize, arrow_schema::DataType>;

/// Opens `columns` of a table of `T` (the file `path`, then its later parts, as
/// [`open_table`] does), checking version and schema; a name `T` has not is an error.
pub fn open_columns<T: Table>(path: &Path, columns: &[&str]) -> Result<ColumnReader> {
    let (mut batches, places) = guarded(path, || open_projected::<T>(path, columns))?;
    batches.rest = crate::layout::later_parts(path).into_iter();
    Ok(ColumnReader {
        batches,
        columns: places,
        names: columns.iter().map(|c| (*c).to_string()).collect(),
        reopen: open_projected::<T>,
    })
}

/// One file's batches of `columns` and each column's place in them.
fn open_projected<T: Table>(path: &Path, columns: &[&str]) -> Result<(Batches, Vec<ColumnPlace>)> {
    let (builder, stamp) = checked::<T>(path)?;
    let expected = T::schema();
    let found = builder.schema().fields().len();
    let mut leaves = Vec::new();
    let mut wanted = Vec::new();
    for name in columns {
        let Some((i, f)) = expected.fields().find(name) else {
            return Err(Error::SchemaMismatch {
                path: path.to_path_buf(),
                table: T::NAME,
                expected: describe_fields(expected.fields()),
                found: format!("a column `{name}` asked for"),
            });
        };
        if i < found {
            leaves.push(i);
            wanted.push(Ok(i));
        } else {
            wanted.push(Err(f.data_type().clone()));
        }
    }
    // The projection keeps file order: each column's place among those kept.
    let mut kept = leaves.clone();
    kept.sort_unstable();
    kept.dedup();
    let columns = wanted
        .into_iter()
        .map(|w| w.map(|i| kept.partition_point(|k| *k < i)))
        .collect();
    let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), kept);
    let inner = builder
        .with_projection(mask)
        .build()
        .map_err(|source| Error::Corrupt {
            path: path.to_path_buf(),
            source,
        })?;
    Ok((Batches::new(path, inner, stamp), columns))
}

impl ColumnReader {
    /// The next record batch, going on into the next part when a file ends whole (its
    /// columns placed anew).
    fn next_batch(&mut self) -> Result<Option<arrow_array::RecordBatch>> {
        let (names, reopen, columns) = (&self.names, self.reopen, &mut self.columns);
        self.batches.next_across(|path| {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let (batches, places) = reopen(path, &names)?;
            *columns = places;
            Ok(batches)
        })
    }

    /// The stamp of the file being read (version, table, writer, row count from its
    /// footer): the first part's until it ends.
    pub fn stamp(&self) -> &FileStamp {
        &self.batches.stamp
    }

    /// The file being read, for messages.
    pub fn path(&self) -> &Path {
        &self.batches.path
    }

    /// The next batch: one array per column asked for, in that order; `None` at the end
    /// (and after an error).
    pub fn next_columns(&mut self) -> Result<Option<Vec<arrow_array::ArrayRef>>> {
        let Some(batch) = self.next_batch()? else {
            return Ok(None);
        };
        let n = batch.num_rows();
        Ok(Some(
            self.columns
                .iter()
                .map(|c| match c {
                    Ok(i) => batch.column(*i).clone(),
                    Err(ty) => arrow_array::new_null_array(ty, n),
                })
                .collect(),
        ))
    }
}

impl Iterator for ColumnReader {
    type Item = Result<Vec<arrow_array::ArrayRef>>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_columns().transpose()
    }
}
