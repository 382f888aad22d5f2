//! The per-cell traces behind the HTML report's drill-down: a decode cell's output
//! tokens over time (down-sampled), its requests' send, first token and end, the
//! distribution of the gaps between token events, and the server's gauges over time.
//! Times are seconds from the cell's window opening.

use std::collections::BTreeMap;

use serde::Serialize;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::tables::Role;

use crate::error::Result;
use crate::load;
use crate::rules::RuleSet;
use crate::run::Run;

/// Most points kept of a cell's token series: the series is cut to every k-th token
/// event (k = events / MAX_POINTS, rounded up) plus the last; each kept point's
/// cumulative count is exact.
pub const MAX_POINTS: usize = 600;

/// Edges of the gap histogram, ms (log-spaced, 1-2-5): the last bin is open.
pub const GAP_EDGES_MS: [f64; 16] = [
    0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4,
];

/// One request's marks, seconds from the window opening.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Marks {
    pub request_id: i64,
    pub role: String,
    pub sent: Option<f64>,
    pub first_token: Option<f64>,
    pub end: Option<f64>,
    /// When its schedule made it due (replay cells only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<f64>,
}

/// What the drill-down of one decode cell draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellTrace {
    /// The window's length, s (it opens at 0).
    pub window_s: f64,
    /// Token events' times and the cumulative output tokens at each, down-sampled.
    pub times: Vec<f64>,
    pub tokens: Vec<i64>,
    /// The warm-up and measured requests.
    pub requests: Vec<Marks>,
    /// Gaps between consecutive token events inside the window, counted per bin of
    /// [`GAP_EDGES_MS`].
    pub gap_counts: Vec<u64>,
    /// Scrape times of the server's gauges and each gauge's value there (null where a
    /// scrape lacked it), by metric name.
    pub gauge_times: Vec<f64>,
    pub gauges: Vec<(String, Vec<Option<f64>>)>,
    /// For a looped cell, the first loop's text: up to [`LOOP_CONTEXT`] characters
    /// before the cycle, the cycle (up to [`LOOP_CYCLE_SHOWN`] characters), and up to
    /// [`LOOP_CONTEXT`] characters after it.
    pub loop_text: Option<(String, String, String)>,
}

/// Characters of a loop's text shown before and after its cycle.
pub const LOOP_CONTEXT: usize = 160;
/// Characters of a loop's cycle shown.
pub const LOOP_CYCLE_SHOWN: usize = 600;

/// The text around a loop: before, cycle, after (see [`CellTrace::loop_text`]).
fn loop_text(
    loaded: &load::Loaded,
    l: &crate::contract::LoopEvidence,
) -> Option<(String, String, String)> {
    let (content, reasoning) = loaded.text.get(&l.request_id)?;
    let text = match l.channel {
        crate::rules::Channel::Content => content,
        crate::rules::Channel::Reasoning => reasoning,
    };
    let chars: Vec<char> = text.chars().collect();
    let start = l.start_char.min(chars.len());
    let from = start.saturating_sub(LOOP_CONTEXT);
    let cycle_end = (start + l.cycle_chars.min(LOOP_CYCLE_SHOWN)).min(chars.len());
    let after_end = (cycle_end + LOOP_CONTEXT).min(chars.len());
    let piece = |a: usize, b: usize| {
        chars
            .get(a..b)
            .map(|c| c.iter().collect::<String>())
            .unwrap_or_default()
    };
    Some((
        piece(from, start),
        piece(start, cycle_end),
        piece(cycle_end, after_end),
    ))
}

fn seconds(ns: i64, open: i64) -> f64 {
    (ns - open) as f64 / 1e9
}

/// Every decode cell's trace, for the cells with a window.
pub fn traces(run: &Run, rules: &RuleSet) -> Result<BTreeMap<CellKey, CellTrace>> {
    let (scoring, loaded) = crate::score::score_loaded(run, rules, load::Loads::Traces)?;
    Ok(traces_of(&scoring, &loaded))
}

/// Every decode and replay cell's trace, from a run already loaded for its `scoring`
/// with its timelines (`score_loaded` with [`load::Loads::Traces`]).
pub fn traces_of(
    scoring: &crate::contract::Scoring,
    loaded: &load::Loaded,
) -> BTreeMap<CellKey, CellTrace> {
    let preset = &scoring.metrics;
    let mut out = BTreeMap::new();
    for (key, &(open, close)) in &loaded.windows {
        if !matches!(key.phase, Phase::Decode | Phase::Replay) {
            continue;
        }
        let replay = key.phase == Phase::Replay;
        let events = loaded.timelines.get(key).map(Vec::as_slice).unwrap_or(&[]);
        let stride = events.len().div_ceil(MAX_POINTS).max(1);
        let mut times = Vec::new();
        let mut tokens = Vec::new();
        let mut total = 0i64;
        for (i, (at, n)) in events.iter().enumerate() {
            total += n;
            if i % stride == 0 || i + 1 == events.len() {
                times.push(seconds(*at, open));
                tokens.push(total);
            }
        }
        let requests = loaded
            .requests
            .get(key)
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
            .map(|r| Marks {
                request_id: r.request_id,
                role: r.role.as_str().to_string(),
                sent: r.sent_ns.map(|t| seconds(t, open)),
                first_token: loaded
                    .tokens
                    .get(&r.request_id)
                    .and_then(|a| a.first_token_ns)
                    .map(|t| seconds(t, open)),
                end: r.end_ns.map(|t| seconds(t, open)),
                scheduled: replay.then(|| seconds(r.scheduled_ns, open)),
            })
            .collect();
        let mut gap_counts = vec![0u64; GAP_EDGES_MS.len()];
        for g in loaded.gaps.get(key).map(Vec::as_slice).unwrap_or(&[]) {
            let ms = *g as f64 / 1e6;
            let bin = GAP_EDGES_MS.partition_point(|e| *e <= ms).saturating_sub(1);
            if let Some(c) = gap_counts.get_mut(bin) {
                *c += 1;
            }
        }
        // The gauges: requests running and waiting, and KV-cache use (not counters).
        let samples = loaded.samples.get(key);
        let names: Vec<&String> = [&preset.running, &preset.waiting, &preset.kv_cache_usage]
            .into_iter()
            .flatten()
            .filter(|n| samples.is_some_and(|s| s.contains_key(*n)))
            .collect();
        let mut at: Vec<i64> = names
            .iter()
            .flat_map(|n| samples.and_then(|s| s.get(*n)).into_iter().flatten())
            .map(|s| s.start_ns)
            .collect();
        at.sort_unstable();
        at.dedup();
        let gauges = names
            .iter()
            .map(|n| {
                let values = samples
                    .and_then(|s| s.get(*n))
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                (
                    (*n).clone(),
                    at.iter()
                        .map(|t| {
                            values
                                .iter()
                                .find(|s| s.start_ns == *t)
                                .map(|s| s.value)
                                .filter(|v| v.is_finite())
                        })
                        .collect(),
                )
            })
            .collect();
        out.insert(
            *key,
            CellTrace {
                window_s: seconds(close, open),
                times,
                tokens,
                requests,
                gap_counts,
                gauge_times: at.iter().map(|t| seconds(*t, open)).collect(),
                gauges,
                loop_text: scoring
                    .cells
                    .iter()
                    .find(|c| c.key() == *key)
                    .and_then(|c| {
                        c.evidence.iter().find_map(|e| match e {
                            crate::contract::Evidence::Loop(l) => Some(l),
                            _ => None,
                        })
                    })
                    .and_then(|l| loop_text(loaded, l)),
            },
        );
    }
    out
}
