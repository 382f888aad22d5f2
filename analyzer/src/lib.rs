//! tokentrace analyzer: reads run folders with polars and (in later layers) recomputes
//! the speed-test matrix under versioned rule sets. It never talks to a server: the run
//! folder is its only input.

pub mod error;
pub mod figures;
pub mod run;

pub use error::{Error, Result};
pub use run::{CellState, Run};
