//! tokentrace analyzer: reads run folders and recomputes the speed-test matrix under
//! versioned rule sets: figures, verdicts with evidence, reports, diffs. It never talks
//! to a server: the run folder is its only input.
//!
//! The map: [`run`] opens a folder; [`score()`] reads it cell by cell with the trace's
//! own reader (only the columns the rules read) into the plain per-cell data, which the
//! polars-free `tokentrace-score` crate (re-exported here: [`rules`], [`presets`],
//! [`contract`], [`figures`], [`loops`]) judges, the same code the recorder's live view
//! runs, and the HTML page's traces ([`trace`]) come from the same read; each cell's
//! data is dropped once scored, so memory holds a few cells, not the run. [`report`]
//! (Markdown, CSV, JSON, HTML, the site's pages: one door, a format-free model and a
//! writer per format) and [`diff`] read the scoring; [`catalog`] writes a fleet's
//! scorings as one Parquet table; [`public`] scrubs what a public page must not show.

pub mod catalog;
pub mod diff;
pub mod error;
pub mod public;
pub mod report;
pub mod run;
pub mod score;
pub mod trace;

pub use tokentrace_score::{
    contract, figures, imported, loops, numbers, presets, rules, stages, stats,
};

pub use contract::Scoring;
pub use error::{Error, Result};
pub use rules::RuleSet;
pub use run::{Cell, Run, Verify};
pub use score::{score, score_dir, score_dir_with};
