//! Runs imported from another tool's results (`tokentrace import`): each cell's figures
//! and verdict as that tool computed them, kept in the cell's `figures.json` as a
//! [`CellScore`], and the scoring a report reads from them. They are never re-scored.

use tokentrace_schemas::manifest::{Imported, Manifest};

use crate::contract::{CellScore, FORMAT, FORMAT_VERSION, Scoring};
use crate::presets::Preset;
use crate::rules::RuleSet;

/// An imported cell's one file: its [`CellScore`] as JSON.
pub use tokentrace_schemas::layout::FIGURES_FILE;

/// What a report says of an imported run, in its header.
pub fn header(i: &Imported) -> String {
    format!(
        "imported from {}: figures as that tool computed them; not re-scorable",
        i.source()
    )
}

/// The rule set an imported run is shown under: named after the tool and its version,
/// with the reference set's rules, which follow that tool's code (score/rules/README.md)
/// and describe how its figures were computed; none was computed here.
pub fn rule_set(i: &Imported) -> RuleSet {
    let mut r = RuleSet::builtin("reference").expect("the built-in reference rules parse (tested)");
    r.name = i.tool.clone();
    r.version = i.version.clone();
    r.description = header(i);
    r
}

/// The scoring of an imported run: what its manifest says, and its cells as imported
/// (or, for a cell whose file is damaged or missing, as not complete with the reason).
pub fn scoring(m: &Manifest, i: &Imported, mut cells: Vec<CellScore>) -> Scoring {
    cells.sort_by_key(CellScore::key);
    Scoring {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        scored_by: format!("tokentrace {}", tokentrace_schemas::TOOL_VERSION),
        rules: rule_set(i),
        metrics: Preset {
            name: "none".to_string(),
            ..Preset::default()
        },
        run: crate::judge::run_info(m),
        cells,
        rate_capacity: Vec::new(),
    }
}
