//! Scoring a run folder: its tables loaded once with polars into the plain per-cell data,
//! then judged by the polars-free scorer (`tokentrace_score::judge`), the same code the
//! recorder's live view uses.

pub use tokentrace_score::judge::{Cell, MAX_EVIDENCE, content};

use std::path::Path;

use tokentrace_score::judge;

use crate::contract::Scoring;
use crate::error::Result;
use crate::load;
use crate::rules::RuleSet;
use crate::run::{CellState, Run};

/// Scores the run folder at `dir` under `rules`.
pub fn score_dir(dir: &Path, rules: &RuleSet) -> Result<Scoring> {
    score(&Run::open(dir)?, rules)
}

/// Scores an opened run under `rules`.
pub fn score(run: &Run, rules: &RuleSet) -> Result<Scoring> {
    score_loaded(run, rules, load::Loads::Scoring).map(|(s, _)| s)
}

/// Scores an opened run under `rules`, and hands back what was loaded for it (the HTML
/// page's drill-down traces are drawn from the same load, `loads` of
/// [`load::Loads::Traces`]).
pub fn score_loaded(
    run: &Run,
    rules: &RuleSet,
    loads: load::Loads,
) -> Result<(Scoring, load::Loaded)> {
    let m = &run.manifest;
    let preset = rules
        .metrics
        .preset(m.engine.name.as_deref())
        .map_err(|message| crate::Error::Rules {
            path: rules.name.clone().into(),
            message,
        })?;
    let mut series = preset.series();
    series.push(tokentrace_schemas::protocol::CLIENT_LAG_METRIC.to_string());
    let loaded = load::load(run, &series, loads)?;

    let cells: Vec<Cell> = run
        .cells
        .iter()
        .map(|c| match c {
            CellState::Complete { key, .. } => Cell::Complete(*key),
            CellState::Incomplete { key, reason, .. } => Cell::Incomplete(*key, reason.clone()),
        })
        .collect();
    let scoring = judge::scoring(m, &cells, &loaded, rules, preset);
    Ok((scoring, loaded))
}
