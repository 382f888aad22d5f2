//! The report's sections, format-free: the header's facts, the matrix's cells and legend,
//! the Burst / E2E, Request rate and Replay tables, All measurements, GPU power and the
//! notes, each as text in the reference report's number formats, for the Markdown and
//! HTML writers to lay out. By section: `header`, `matrix` (and power), `tables`,
//! `rate`, `notes` (the words for every Evidence and Warning).

mod header;
mod matrix;
mod notes;
mod rate;
mod tables;
mod talk;

pub(crate) use self::header::*;
pub(crate) use self::matrix::*;
pub(crate) use self::notes::*;
pub(crate) use self::rate::*;
pub(crate) use self::tables::*;
pub(crate) use self::talk::*;

// The sections' shared vocabulary: each section's file takes it with `use super::*`.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{Phase, Rate};
use tokentrace_schemas::manifest::{Described, PrefillMode, TokenCounting};

use crate::contract::{
    CAPACITY_ABOVE, CellScore, ColdRequest, Evidence, Figures, LoopEvidence, RechunkEvidence,
    Scoring, Verdict, Warning,
};
use crate::figures::{Column, FIGURES, Figure};
use crate::numbers::{context_label, fixed, ms_whole, rate, thousands};
use crate::rules::TokenCount;

pub(crate) use crate::figures::{DASH, matrix_text, opt, shown};

fn dash() -> String {
    DASH.to_string()
}

/// The model's name for titles: the file name when the served id is a file path (as
/// llama.cpp serves a GGUF), else the id (`org/name` ids are names, not paths).
pub fn model_display_name(id: &str) -> &str {
    let path_like = id.starts_with('/')
        || id.starts_with("./")
        || id.starts_with("~/")
        || id.contains('\\')
        || [".gguf", ".bin", ".safetensors"]
            .iter()
            .any(|ext| id.to_ascii_lowercase().ends_with(ext));
    if path_like {
        id.rsplit(['/', '\\']).find(|s| !s.is_empty()).unwrap_or(id)
    } else {
        id
    }
}

/// "1 context", "3 contexts".
fn count_of(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn range_label(values: &[u32], label: impl Fn(u32) -> String) -> String {
    match (values.first(), values.last()) {
        (Some(a), Some(b)) if a != b => format!("{}–{}", label(*a), label(*b)),
        (Some(a), _) => label(*a),
        _ => DASH.to_string(),
    }
}

/// The prefill cells, in the scoring's order.
pub(crate) fn prefill_cells(s: &Scoring) -> Vec<&CellScore> {
    s.cells
        .iter()
        .filter(|c| c.phase == Phase::Prefill)
        .collect()
}

/// The decode matrix's axes: contexts (rows) and concurrency levels (columns).
pub(crate) fn matrix_axes(s: &Scoring) -> (Vec<u32>, Vec<u32>) {
    let decode = || s.cells.iter().filter(|c| c.phase == Phase::Decode);
    let contexts: BTreeSet<u32> = decode().map(|c| c.context).collect();
    let levels: BTreeSet<u32> = decode().map(|c| c.concurrency).collect();
    (contexts.into_iter().collect(), levels.into_iter().collect())
}

/// The report's last line: who scored it, under which rules, which run.
pub(crate) fn scored_by(s: &Scoring) -> String {
    format!(
        "Scored by {} under rule set {} {} · run {}",
        s.scored_by, s.rules.name, s.rules.version, s.run.run_id
    )
}

/// The "Phase" column's text of a cell.
pub(crate) fn phase_label(c: &CellScore) -> String {
    match (c.phase, c.rate) {
        (Phase::Prefill, _) => "Prefill".to_string(),
        (Phase::Decode, _) => "Sustained decode".to_string(),
        (Phase::Burst, _) => "Burst / E2E".to_string(),
        (Phase::Rate, r) => format!("Rate {} req/s", r.map_or_else(dash, |r| r.to_string())),
        (Phase::Replay, _) => format!("Replay {}", c.replay.unwrap_or(0)),
        (Phase::Conversation, _) => format!("Conversations × {}", c.concurrency),
    }
}

/// `p50 / p90 / p99 / max` of a summary in ms with `decimals` (`—` for what it lacks).
/// [`spread`] of the summary `pick` takes from a cell's shown figures; a dash without.
fn spread_of(
    f: Option<&Figures>,
    pick: fn(&Figures) -> &crate::contract::Summary,
    decimals: usize,
) -> String {
    f.map_or_else(|| DASH.to_string(), |f| spread(pick(f), decimals))
}

pub(crate) fn spread(s: &crate::contract::Summary, decimals: usize) -> String {
    let p = |k: &str| s.percentiles.get(k).copied();
    [s.median, p("p90"), p("p99"), s.max]
        .iter()
        .map(|v| opt(*v, |x| fixed(x, decimals)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `p50 / p99` of a summary in ms with `decimals` (`—` for what it lacks).
fn p50_p99(s: &crate::contract::Summary, decimals: usize) -> String {
    [s.median, s.percentiles.get("p99").copied()]
        .iter()
        .map(|v| opt(*v, |x| fixed(x, decimals)))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn g(v: f64) -> String {
    fixed(v, if v.fract() == 0.0 { 0 } else { 2 })
}
