//! The tests' oracle: a whole run loaded at once with polars, an engine independent of
//! the trace's own reader, which the product scores with cell by cell. Lazy scans of a
//! table over every complete cell ([`scan`]), reduced to the rules' data ([`load`]) and
//! scored whole ([`score_loaded`]); the tests hold the product's scoring to it.

mod load;
mod scan;

pub use load::{Loads, load};
pub use scan::{collect, scan};

use std::collections::BTreeMap;

use tokentrace_analyzer::trace::{self, CellTrace};
use tokentrace_analyzer::{RuleSet, Run, Scoring};
use tokentrace_schemas::layout::CellKey;
use tokentrace_score::data::Loaded;
use tokentrace_score::judge;

/// What can go wrong in the oracle: a polars error or a value the format forbids, said.
pub type Result<T> = std::result::Result<T, String>;

/// The series the rules read for `run`'s engine under `rules`: the preset's and the
/// recorder's own lag.
pub fn series(run: &Run, rules: &RuleSet) -> Vec<String> {
    let preset = rules
        .metrics
        .preset(run.manifest.engine.name.as_deref())
        .expect("preset");
    let mut series = preset.series();
    series.push(tokentrace_schemas::protocol::CLIENT_LAG_METRIC.to_string());
    series
}

/// Scores `run` under `rules` from one polars load of the whole run, and hands back what
/// was loaded (with [`Loads::Traces`], the decode cells' timelines too).
pub fn score_loaded(run: &Run, rules: &RuleSet, loads: Loads) -> Result<(Scoring, Loaded)> {
    let preset = rules
        .metrics
        .preset(run.manifest.engine.name.as_deref())
        .map_err(|e| e.to_string())?;
    let loaded = load(run, &series(run, rules), loads)?;
    let scoring = judge::scoring(&run.manifest, &run.cells, &loaded, rules, preset);
    Ok((scoring, loaded))
}

/// Every decode and replay cell's trace, from a run loaded whole for its `scoring` with
/// its timelines.
pub fn traces_of(scoring: &Scoring, loaded: &Loaded) -> BTreeMap<CellKey, CellTrace> {
    let mut out = BTreeMap::new();
    for c in &scoring.cells {
        if let Some(t) = trace::cell_trace(c, loaded, &scoring.metrics) {
            out.insert(c.key(), t);
        }
    }
    out
}
