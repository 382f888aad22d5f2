//! Errors of the trace format: every variant names the file (and, where it applies,
//! the column and row) it is about, so a user can find what is wrong without a debugger.

use std::path::PathBuf;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while writing or reading a run folder.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed on `path`.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file the format requires is not there.
    #[error("{path}: missing (expected a {what})")]
    Missing { path: PathBuf, what: &'static str },
    /// The Parquet file could not be decoded: truncated, corrupt, or not Parquet.
    #[error("{path}: truncated or corrupt Parquet file: {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Writing a Parquet file failed: the disk is full, the folder went read-only, or
    /// the encoder refused a batch.
    #[error("{path}: cannot write Parquet: {source}")]
    ParquetWrite {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A valid Parquet file that tokentrace did not write (no schema version in its metadata).
    #[error("{path}: not a tokentrace table (no `{key}` in the Parquet key-value metadata)")]
    NotTokentrace { path: PathBuf, key: &'static str },
    /// The file was written by a newer format than this build understands.
    #[error(
        "{path}: schema version {found} is newer than this build supports ({supported}); upgrade tokentrace"
    )]
    NewerVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// The schema version field is present but unreadable or older than any released format.
    #[error("{path}: unsupported schema version `{found}` (this build reads {supported})")]
    BadVersion {
        path: PathBuf,
        found: String,
        supported: u32,
    },
    /// The file's columns are not the table's columns of this schema version.
    #[error(
        "{path}: schema mismatch for table `{table}`\n  expected: {expected}\n  found:    {found}"
    )]
    SchemaMismatch {
        path: PathBuf,
        table: &'static str,
        expected: String,
        found: String,
    },
    /// A cell value that the format forbids (a null in a required column, an unknown enum value).
    #[error("{path}: column `{column}`, row {row}: {message}")]
    BadValue {
        path: PathBuf,
        column: &'static str,
        row: u64,
        message: String,
    },
    /// A JSON file (manifest.json, cell.json) that does not decode.
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The raw capture (`raw.sse.zst`) is not in the expected framing.
    #[error("{path}: raw capture, byte {offset} of the decompressed stream: {message}")]
    RawFormat {
        path: PathBuf,
        offset: u64,
        message: String,
    },
    /// A committed cell already exists where a new one was to be committed.
    #[error("{path}: cell already committed; remove it to record it again")]
    CellExists { path: PathBuf },
    /// A committed file that is not as its cell's commit mark records it: absent,
    /// another size, or another checksum.
    #[error("{path}: damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    /// A cell folder has no valid commit mark.
    #[error("{path}: cell is incomplete ({reason})")]
    Incomplete { path: PathBuf, reason: String },
    /// A path inside `cells/` that is not a Hive cell path of this format.
    #[error(
        "{path}: not a cell path (expected phase=<prefill|decode>/context=<n>/concurrency=<n>)"
    )]
    BadCellPath { path: PathBuf },
    /// Building a record batch failed (a bug in the caller's rows or in this crate).
    #[error("{path}: cannot build a batch for `{table}`: {source}")]
    Batch {
        path: PathBuf,
        table: &'static str,
        #[source]
        source: arrow_schema::ArrowError,
    },
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
