//! Errors of the scorer: a rule set that cannot be read or makes no sense, naming the
//! file or built-in name it came from.

use std::path::PathBuf;

/// Result with the scorer's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong before any cell is scored (scoring itself cannot fail: bad cells
/// get a verdict, not an error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rule set that cannot be read or makes no sense.
    #[error("rule set {path}: {message}")]
    Rules { path: PathBuf, message: String },
}
