//! Scoring of loaded cells: each complete cell is viewed once (`view.rs`), measured
//! (`measure.rs`), and judged by the verdict rules (`verdicts.rs`) and the warning rules
//! (`warnings.rs`), one function per rule. The same code scores offline and live.

mod capacity;
pub mod content;
mod measure;
pub mod talk;
mod verdicts;
mod view;
mod warnings;

use std::collections::BTreeMap;

use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::{CellStatus, Manifest, PrefillMode};
use tokentrace_schemas::tables::Role;

use crate::contract::{
    CellScore, CellScoreState, Evidence, FORMAT, FORMAT_VERSION, RunInfo, Scoring, Verdict,
};
use crate::data::Loaded;
use crate::presets::Preset;
use crate::rules::RuleSet;
use view::{DecodeView, PrefillView};

/// At most this many evidence items per rule are kept; the rest are counted.
pub const MAX_EVIDENCE: usize = 10;

/// One cell folder as the scorer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// Committed: scored from what `loaded` holds for it.
    Complete(CellKey),
    /// Present but not scorable, and why.
    Incomplete(CellKey, String),
}

impl Cell {
    pub fn key(&self) -> CellKey {
        match self {
            Cell::Complete(key) | Cell::Incomplete(key, _) => *key,
        }
    }
}

/// Scores `cells` of the run `m` describes from `loaded` under `rules`, the gauges read
/// as `preset` names them. Cells the manifest lists without a folder in `cells` keep the
/// manifest's status.
pub fn scoring(
    m: &Manifest,
    cells_seen: &[Cell],
    loaded: &Loaded,
    rules: &RuleSet,
    preset: Preset,
) -> Scoring {
    let mut scored = BTreeMap::new();
    for state in cells_seen {
        if let Cell::Complete(key) = state {
            scored.insert(*key, score_cell(*key, loaded, rules, &preset));
        }
    }
    let mut warmup = BTreeMap::new();
    for (prefill, decode) in warmup_prefills(m, cells_seen) {
        warmup.insert(
            prefill,
            score_warmup_prefill(prefill, decode, loaded, rules),
        );
    }
    assemble(
        m,
        cells_seen,
        scored,
        warmup,
        RunFlags::of(loaded),
        rules,
        preset,
    )
}

/// Scores the complete cell `key` from `loaded` (which needs to hold only that cell).
pub fn score_cell(key: CellKey, loaded: &Loaded, rules: &RuleSet, preset: &Preset) -> CellScore {
    match key.phase {
        Phase::Prefill => score_prefill(PrefillView::new(key, loaded), rules),
        Phase::Decode => match DecodeView::new(key, loaded, rules, preset) {
            Some(v) => score_decode(&v, rules),
            None => no_window(key),
        },
        Phase::Burst | Phase::Rate => match DecodeView::new(key, loaded, rules, preset) {
            Some(v) => score_open(&v, rules),
            None => no_window(key),
        },
        Phase::Conversation => match DecodeView::new(key, loaded, rules, preset) {
            Some(v) => {
                score_conversation(&v, loaded.turns.get(&key).map_or(&[], Vec::as_slice), rules)
            }
            None => no_window(key),
        },
        Phase::Replay => match DecodeView::new(key, loaded, rules, preset) {
            Some(v) => score_replay(
                &v,
                loaded.replay.get(&key).map_or(&[], Vec::as_slice),
                rules,
            ),
            None => no_window(key),
        },
    }
}

/// The prefill cell `prefill` measured during decode warm-up: the first request of the
/// decode cell `decode` (see [`warmup_prefills`]), from `loaded` (which needs to hold
/// only that decode cell).
pub fn score_warmup_prefill(
    prefill: CellKey,
    decode: CellKey,
    loaded: &Loaded,
    rules: &RuleSet,
) -> CellScore {
    score_prefill(PrefillView::first_of(prefill, decode, loaded), rules)
}

/// Whether the run measures prefill during decode warm-up: each decode cell's first
/// request is then a candidate prefill score of its context (see [`warmup_prefills`]).
pub fn prefill_in_warmup(m: &Manifest) -> bool {
    m.config.prefill_mode.unwrap_or(PrefillMode::Scout) == PrefillMode::Warmup
}

/// In a run whose prefill is measured during decode warm-up, each context's prefill cell
/// and the decode cell whose first request measures it: the context's complete decode
/// cell of the fewest streams. Empty for runs with prefill scouts. The one place the
/// link is made: a scorer scores every decode cell's candidate and keeps these.
pub fn warmup_prefills(m: &Manifest, cells_seen: &[Cell]) -> Vec<(CellKey, CellKey)> {
    if !prefill_in_warmup(m) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for &context in &m.config.contexts {
        let first = cells_seen
            .iter()
            .filter_map(|c| match c {
                Cell::Complete(key) if key.phase == Phase::Decode && key.context == context => {
                    Some(*key)
                }
                _ => None,
            })
            .min_by_key(|k| k.concurrency);
        if let Some(decode) = first {
            out.push((CellKey::new(Phase::Prefill, context, 1), decode));
        }
    }
    out
}

/// What the run-wide facts of a scoring need from the loaded cells; cells loaded apart
/// give theirs apart, and [`RunFlags::merge`] adds them up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunFlags {
    /// Some cell has GPU telemetry.
    pub gpu_telemetry: bool,
    /// Some request (not a probe) finished with the server's usage …
    pub usage: bool,
    /// … and some such request carried `cached_tokens`.
    pub cached_tokens: bool,
}

impl RunFlags {
    pub fn of(loaded: &Loaded) -> RunFlags {
        let with_usage = || {
            loaded
                .requests
                .values()
                .flatten()
                .filter(|r| r.role != Role::Probe && r.prompt_tokens_server.is_some())
        };
        RunFlags {
            gpu_telemetry: !loaded.gpu.is_empty(),
            usage: with_usage().next().is_some(),
            cached_tokens: with_usage().any(|r| r.cached_tokens.is_some()),
        }
    }

    pub fn merge(&mut self, other: RunFlags) {
        self.gpu_telemetry |= other.gpu_telemetry;
        self.usage |= other.usage;
        self.cached_tokens |= other.cached_tokens;
    }

    /// Requests finished with the server's usage (its prompt count) and none of them
    /// carried `cached_tokens`.
    fn cached_tokens_missing(&self) -> bool {
        self.usage && !self.cached_tokens
    }
}

/// The scoring of the run `m` describes from its complete cells' scores (`scored`, by
/// [`score_cell`]), its warm-up prefill cells' (`warmup`, by [`score_warmup_prefill`])
/// and the run-wide `flags`: the manifest's other cells, the KV-cache budget's evidence,
/// the capacity across rate cells, and the run's facts.
pub fn assemble(
    m: &Manifest,
    cells_seen: &[Cell],
    mut scored: BTreeMap<CellKey, CellScore>,
    warmup: BTreeMap<CellKey, CellScore>,
    flags: RunFlags,
    rules: &RuleSet,
    preset: Preset,
) -> Scoring {
    // Every cell the manifest lists, and any folder it does not.
    let mut cells: BTreeMap<CellKey, CellScore> = BTreeMap::new();
    for entry in &m.cells {
        cells.insert(
            entry.key(),
            unscored(entry.key(), entry.status, entry.reason.clone()),
        );
    }
    for state in cells_seen {
        match state {
            Cell::Complete(key) => {
                if let Some(s) = scored.remove(key) {
                    cells.insert(*key, s);
                }
            }
            Cell::Incomplete(key, reason) => {
                cells.insert(
                    *key,
                    new_cell(*key, CellScoreState::Incomplete, Some(reason.clone())),
                );
            }
        }
    }
    // A queued cell's evidence names the KV-cache budget when the engine reported one.
    if let Some(f) = m.facts.iter().find(|f| f.key == "engine.kv_cache_tokens")
        && let Ok(budget) = f.value.trim().parse::<u64>()
    {
        for c in cells
            .values_mut()
            .filter(|c| c.verdict == Some(Verdict::RequestsQueued))
        {
            c.evidence.push(Evidence::KvBudget {
                need_tokens: u64::from(c.context) * u64::from(c.concurrency),
                budget_tokens: budget,
                source: f.source.clone(),
            });
        }
    }
    // Measured during decode warm-up: each context's prefill is the first request of
    // its first complete decode cell.
    let prefill_mode = m.config.prefill_mode.unwrap_or(PrefillMode::Scout);
    cells.extend(warmup);
    let mut cells: Vec<CellScore> = cells.into_values().collect();
    let rate_capacity = capacity::judge(&mut cells, rules);
    Scoring {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        scored_by: format!("tokentrace {}", tokentrace_schemas::TOOL_VERSION),
        rules: rules.clone(),
        metrics: preset,
        run: RunInfo {
            gpu_telemetry: flags.gpu_telemetry,
            cached_tokens_missing: flags.cached_tokens_missing(),
            prefill_mode,
            ..run_info(m)
        },
        cells,
        rate_capacity,
    }
}

/// What a scoring says of the run `m` describes, before its cells are read.
pub fn run_info(m: &Manifest) -> RunInfo {
    RunInfo {
        run_id: m.run_id.clone(),
        started_utc: m.clock.utc_at_zero.clone(),
        recorded_by: m.tool.label(),
        model: m.model.clone(),
        engine: m.engine.name.clone(),
        engine_version: m.engine.version.clone(),
        engine_details: m.engine.details.clone(),
        hardware: m.hardware.clone(),
        launch_command: m.launch_command.clone(),
        target: m.target.url.clone(),
        endpoint: m.config.endpoint,
        window_s: m.config.window_ns as f64 / 1e9,
        max_tokens: m.config.max_tokens,
        ignore_eos: m.config.ignore_eos,
        token_counting: m.capabilities.token_counting,
        server_metrics: m.capabilities.metrics,
        prefill_mode: m.config.prefill_mode.unwrap_or(PrefillMode::Scout),
        facts: m.facts.clone(),
        gpu_telemetry: false,
        cached_tokens_missing: false,
        checksums_skipped: false,
        burst_requests: m.config.burst.as_ref().map(|b| b.requests),
        rate: m.config.rate.clone(),
        replay: m.config.replay.clone(),
        conversation: m.config.conversation.clone(),
        imported: m.imported.clone(),
    }
}

/// A cell in `state` (the scorers fill in verdict and figures of `complete` ones).
pub fn new_cell(key: CellKey, state: CellScoreState, reason: Option<String>) -> CellScore {
    CellScore {
        phase: key.phase,
        context: key.context,
        concurrency: key.concurrency,
        rate: key.rate,
        replay: key.replay,
        state,
        reason,
        verdict: None,
        evidence: Vec::new(),
        evidence_omitted: 0,
        warnings: Vec::new(),
        figures: None,
    }
}

/// A cell as the manifest lists it, before any folder is looked at: one listed complete
/// has lost its folder unless a complete folder replaces this entry.
pub fn unscored(key: CellKey, status: CellStatus, reason: Option<String>) -> CellScore {
    if status == CellStatus::Complete {
        new_cell(
            key,
            CellScoreState::Incomplete,
            reason.or_else(|| {
                Some(
                    "the manifest lists the cell as complete but its folder is missing".to_string(),
                )
            }),
        )
    } else {
        new_cell(key, status.into(), reason)
    }
}

/// Keeps the first [`MAX_EVIDENCE`] items; returns how many were left out.
fn capped<T>(mut items: Vec<T>) -> (Vec<T>, usize) {
    let omitted = items.len().saturating_sub(MAX_EVIDENCE);
    items.truncate(MAX_EVIDENCE);
    (items, omitted)
}

/// The worst verdict the evidence supports; Valid without any.
fn verdict(evidence: &[Evidence]) -> Verdict {
    evidence
        .iter()
        .map(Evidence::verdict)
        .max()
        .unwrap_or(Verdict::Valid)
}

fn score_prefill(v: PrefillView, rules: &RuleSet) -> CellScore {
    let mut cell = new_cell(v.key, CellScoreState::Complete, None);
    let evidence: Vec<Evidence> = verdicts::PREFILL
        .iter()
        .flat_map(|rule| rule(&v, rules))
        .collect();
    cell.verdict = Some(verdict(&evidence));
    cell.evidence = evidence;
    cell.warnings = warnings::rechunked_scout(&v, rules);
    cell.figures = Some(measure::prefill(&v, rules));
    cell
}

/// A decode cell without a measurement window: Error.
fn no_window(key: CellKey) -> CellScore {
    let mut cell = new_cell(key, CellScoreState::Complete, None);
    cell.verdict = Some(Verdict::Error);
    cell.evidence.push(Evidence::Missing {
        what: "no measurement window (window_open/window_close events)".to_string(),
    });
    cell
}

fn score_decode(v: &DecodeView, rules: &RuleSet) -> CellScore {
    let mut cell = new_cell(v.key, CellScoreState::Complete, None);
    for rule in verdicts::DECODE {
        let (kept, omitted) = capped(rule(v, rules));
        cell.evidence.extend(kept);
        cell.evidence_omitted += omitted;
    }
    for rule in warnings::DECODE {
        cell.warnings.extend(capped(rule(v, rules)).0);
    }
    cell.verdict = Some(verdict(&cell.evidence));
    cell.figures = Some(measure::decode(v, rules));
    cell
}

/// A cell whose requests ran to completion, judged by the open cells' verdict rules
/// (failed streams, loops, bad output) and warned of by `warn`; no verdict or figures
/// yet.
fn judged_open(v: &DecodeView, rules: &RuleSet, warn: &[warnings::DecodeWarning]) -> CellScore {
    let mut cell = new_cell(v.key, CellScoreState::Complete, None);
    for rule in verdicts::OPEN {
        let (kept, omitted) = capped(rule(v, rules));
        cell.evidence.extend(kept);
        cell.evidence_omitted += omitted;
    }
    for rule in warn {
        cell.warnings.extend(capped(rule(v, rules)).0);
    }
    cell
}

/// A burst or rate cell: every measured request ran to completion inside the window, so
/// failed streams and loops are judged, not queueing (a burst's tail runs fewer than N
/// streams by design, and a rate cell's queueing is what it measures).
fn score_open(v: &DecodeView, rules: &RuleSet) -> CellScore {
    let mut cell = judged_open(v, rules, &warnings::OPEN);
    let verdict = verdict(&cell.evidence);
    cell.verdict = Some(verdict);
    let mut figures = measure::open(v, rules);
    if v.key.phase == Phase::Rate {
        (figures.slo_met, figures.slo_misses) = measure::slo(v, rules, &figures, verdict);
    }
    cell.figures = Some(figures);
    cell
}

/// A conversation cell: judged as a burst cell (failed streams, loops), warned of as
/// one but for warm prefixes (its turns are meant to hit the cache), and of a prefix
/// cache that lost the sessions' history; with its figures by turn, by history and per
/// session.
fn score_conversation(
    v: &DecodeView,
    rows: &[tokentrace_schemas::tables::TurnRow],
    rules: &RuleSet,
) -> CellScore {
    let mut cell = judged_open(v, rules, &warnings::CONVERSATION);
    let (talk, evicted) = talk::judge(v, rows, rules);
    cell.warnings.extend(evicted);
    cell.verdict = Some(verdict(&cell.evidence));
    let mut figures = measure::open(v, rules);
    figures.conversation = Some(talk);
    cell.figures = Some(figures);
    cell
}

/// A replay cell: judged as a rate cell (failed streams, loops, the SLO), warned of as
/// one but for its schedule (see [`warnings::REPLAY`]), with goodput and the prefix
/// cache against the workload's sharing.
fn score_replay(
    v: &DecodeView,
    rows: &[tokentrace_schemas::tables::ReplayRow],
    rules: &RuleSet,
) -> CellScore {
    let mut cell = judged_open(v, rules, &warnings::REPLAY);
    let skipped: Vec<&tokentrace_schemas::tables::ReplayRow> =
        rows.iter().filter(|r| r.skipped.is_some()).collect();
    if let Some(first) = skipped.first() {
        cell.warnings.push(crate::contract::Warning::ReplaySkipped {
            skipped: skipped.len(),
            of: rows.len(),
            first: format!(
                "source row {}: {}",
                first.source_row,
                first.skipped.as_deref().unwrap_or("")
            ),
        });
    }
    let verdict = verdict(&cell.evidence);
    cell.verdict = Some(verdict);
    let mut figures = measure::open(v, rules);
    measure::replay(v, rows, &mut figures);
    (figures.slo_met, figures.slo_misses) = measure::slo(v, rules, &figures, verdict);
    cell.figures = Some(figures);
    cell
}
