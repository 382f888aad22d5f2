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
    /// A table was asked for that the format does not define.
    #[error("unknown table `{0}` (tables: requests, chunks, metrics, events)")]
    UnknownTable(String),
}
