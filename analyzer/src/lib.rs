//! tokentrace analyzer: reads run folders with polars and recomputes the speed-test
//! matrix under versioned rule sets: figures, verdicts with evidence, reports, diffs. It
//! never talks to a server: the run folder is its only input.
//!
//! The map: [`run`] opens a folder and [`load`] reads its tables once (the HTML page's
//! traces, [`trace`], come from the same read); [`rules`] and
//! [`presets`] say how to judge; [`score()`] builds one view per cell and applies each
//! rule; [`contract`] is the serialized result; [`figures`] is the one figure table that
//! [`report`] (Markdown, CSV, JSON, HTML: one door, a format-free model and a writer per
//! format) and [`diff`] read.

pub mod catalog;
pub mod contract;
pub mod diff;
pub mod error;
pub mod figures;
pub mod load;
pub mod loops;
pub mod numbers;
pub mod presets;
pub mod report;
pub mod rules;
pub mod run;
pub mod score;
pub mod stats;
pub mod trace;

pub use contract::Scoring;
pub use error::{Error, Result};
pub use rules::RuleSet;
pub use run::{CellState, Run};
pub use score::{score, score_dir};
