//! tokentrace analyzer: reads run folders with polars and recomputes the speed-test
//! matrix under versioned rule sets: figures, verdicts with evidence, reports, diffs. It
//! never talks to a server: the run folder is its only input.
//!
//! The map: [`run`] opens a folder and [`load`] reads its tables once into the plain
//! per-cell data (the HTML page's traces, [`trace`], come from the same read); the
//! polars-free `tokentrace-score` crate (re-exported here: [`rules`], [`presets`],
//! [`contract`], [`figures`], [`loops`]) judges it, the same code the recorder's live
//! view runs; [`score()`] ties the two; [`report`] (Markdown, CSV, JSON, HTML: one door,
//! a format-free model and a writer per format) and [`diff`] read the figure table.

pub mod catalog;
pub mod diff;
pub mod error;
pub mod load;
pub mod report;
pub mod run;
pub mod score;
pub mod trace;

pub use tokentrace_score::{contract, figures, loops, numbers, presets, rules, stats};

pub use contract::Scoring;
pub use error::{Error, Result};
pub use rules::RuleSet;
pub use run::{CellState, Run};
pub use score::{score, score_dir};
