//! Errors of the analyzer, each naming the run folder or file it is about.

use std::path::PathBuf;

/// Result with the analyzer's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while loading or analyzing a run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The trace itself is missing, corrupt or of another version.
    #[error(transparent)]
    Trace(#[from] tokentrace_schemas::Error),
    /// polars could not plan or run a query over the run's files.
    #[error("{path}: {source}")]
    Polars {
        path: PathBuf,
        #[source]
        source: polars::error::PolarsError,
    },
    /// A rule set that cannot be read or makes no sense.
    #[error("rule set {path}: {message}")]
    Rules { path: PathBuf, message: String },
    /// A value in the trace that the format forbids (a null in a never-null column...).
    #[error("{path}: table {table}: {what}")]
    BadValue {
        path: PathBuf,
        table: String,
        what: String,
    },
    /// A results file (a scoring) that cannot be read.
    #[error("{path}: not a tokentrace scoring: {message}")]
    Scoring { path: PathBuf, message: String },
    /// Writing an output failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A table file polars could not read without failing inside (damaged data);
    /// `tokentrace check RUN` names the file.
    #[error(
        "{path}: a table file is damaged (the Parquet reader failed: {message}); `tokentrace check` names the file"
    )]
    Damaged { path: PathBuf, message: String },
    /// A table was asked for that the format does not define.
    #[error("unknown table `{0}` (tables: requests, chunks, metrics, events)")]
    UnknownTable(String),
}

impl From<tokentrace_score::Error> for Error {
    fn from(e: tokentrace_score::Error) -> Self {
        match e {
            tokentrace_score::Error::Rules { path, message } => Error::Rules { path, message },
        }
    }
}
