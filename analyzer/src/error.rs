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
    /// A rule set that cannot be read or makes no sense.
    #[error("rule set {path}: {message}")]
    Rules { path: PathBuf, message: String },
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
    /// The fleet table could not be built or written as Parquet.
    #[error("{path}: the fleet table: {message}")]
    Catalog { path: PathBuf, message: String },
}

impl From<tokentrace_score::Error> for Error {
    fn from(e: tokentrace_score::Error) -> Self {
        match e {
            tokentrace_score::Error::Rules { path, message } => Error::Rules { path, message },
        }
    }
}
