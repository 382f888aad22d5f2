//! Scoring: a run and a rule set in, a [`Scoring`] out: every cell's figures, its
//! verdict with the evidence behind it, and warnings. This is what `rescore` writes to
//! `RUN/results/<name>@<version>.json` and what every report format renders.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::CellStatus;
use tokentrace_schemas::tables::{EndReason, EventKind, Role};

use crate::error::Result;
use crate::load::{self, Loaded, RequestInfo, Sample, TokenAgg};
use crate::loops;
use crate::presets::Preset;
use crate::rules::{
    ActiveSource, Channel, ErrorScope, FirstToken, RequestScope, RuleSet, TbtDenominator,
};
use crate::run::{CellState, Run};
use crate::stats;

/// The recorder's own lag series (see FORMAT.md, `metrics`).
pub use tokentrace_schemas::protocol::CLIENT_LAG_METRIC;
use tokentrace_schemas::protocol::{Drain, Readiness};
/// The JSON document's format name and version.
pub const FORMAT: &str = "tokentrace.scoring";
pub const FORMAT_VERSION: u32 = 1;
/// At most this many evidence items per rule are kept; the rest are counted.
pub const MAX_EVIDENCE: usize = 10;
/// Characters of a loop's cycle quoted as evidence.
const EXCERPT_CHARS: usize = 80;

/// A scored run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scoring {
    pub format: String,
    pub format_version: u32,
    /// `tokentrace <version>` that scored it.
    pub scored_by: String,
    pub rules: RuleSet,
    /// The metric names used, after the preset and the rule set's overrides.
    pub metrics: Preset,
    pub run: RunInfo,
    pub cells: Vec<CellScore>,
}

/// What the manifest says about the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInfo {
    pub run_id: String,
    pub started_utc: String,
    pub recorded_by: String,
    pub model: String,
    pub engine: Option<String>,
    pub engine_version: Option<String>,
    pub engine_details: BTreeMap<String, String>,
    pub hardware: Option<String>,
    pub launch_command: Option<String>,
    pub target: String,
    pub endpoint: String,
    pub window_s: f64,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub token_counting: Option<String>,
    /// Whether the server's `/metrics` answered.
    pub server_metrics: Option<bool>,
}

/// A cell's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Valid,
    RequestsQueued,
    Looped,
    Error,
}

impl Verdict {
    /// As the report shows it.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Valid => "Valid",
            Verdict::RequestsQueued => "Requests queued",
            Verdict::Looped => "Looped",
            Verdict::Error => "Error",
        }
    }

    /// Whether the cell's throughput is shown.
    pub fn shows_figures(self) -> bool {
        matches!(self, Verdict::Valid | Verdict::RequestsQueued)
    }
}

/// Why a cell got its verdict: one item per rule that fired, with what it saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum Evidence {
    /// A stream failed (Error).
    FailedStream {
        request_id: i64,
        role: String,
        end_reason: String,
        error: Option<String>,
        /// When it ended, seconds after the window opened (negative: before).
        end_s: Option<f64>,
    },
    /// The cell has no measurement window or no scout (Error).
    Missing { what: String },
    /// A request repeated itself (Looped).
    Loop(LoopEvidence),
    /// The readiness warm-up gave up (Requests queued).
    WarmupNotReady { detail: String },
    /// The running gauge never reached N (Requests queued).
    RunningNeverReachedN {
        metric: String,
        max: f64,
        concurrency: u32,
    },
    /// The running gauge's mean was below the threshold (Requests queued).
    RunningMeanBelow {
        metric: String,
        mean: f64,
        threshold: f64,
        samples: usize,
    },
    /// The waiting gauge's mean was above the threshold (Requests queued).
    WaitingMeanAbove {
        metric: String,
        mean: f64,
        threshold: f64,
        samples: usize,
    },
    /// A scrape saw the waiting gauge above the threshold (Requests queued).
    WaitingSampleAbove {
        metric: String,
        value: f64,
        threshold: f64,
        /// The scrape, seconds after the window opened.
        at_s: f64,
        /// Scrapes above the threshold, of all inside the window.
        samples_above: usize,
        samples: usize,
    },
}

impl Evidence {
    /// The verdict this evidence supports.
    pub fn verdict(&self) -> Verdict {
        match self {
            Evidence::FailedStream { .. } | Evidence::Missing { .. } => Verdict::Error,
            Evidence::Loop(_) => Verdict::Looped,
            _ => Verdict::RequestsQueued,
        }
    }
}

/// A repetition found in one request's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopEvidence {
    pub request_id: i64,
    pub role: String,
    pub channel: Channel,
    /// Where the repetition starts, in characters from the start of the channel's text.
    pub start_char: usize,
    pub cycle_chars: usize,
    pub cycles: usize,
    pub span_chars: usize,
    /// The first characters of the cycle.
    pub cycle_excerpt: String,
}

/// Something to know about a cell that is not a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Warning {
    /// The recorder itself was slow enough to distort the figures.
    ClientLag {
        tick_lateness_max_ms: Option<f64>,
        queue_delay_p99_ms: Option<f64>,
        tick_threshold_ms: f64,
        queue_threshold_ms: f64,
    },
    /// A repetition short of a loop.
    SuspectedLoop(LoopEvidence),
    /// The server's gauges were not available: queueing was not judged, and active
    /// requests are the client's count.
    NoServerMetrics { missing: Vec<String> },
    /// The drain barrier after the cell did not see an idle server.
    DrainIncomplete { detail: String },
}

/// Median and percentiles of one per-request (or per-gap) quantity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub n: usize,
    pub median: Option<f64>,
    /// By percentile, e.g. `p99`.
    pub percentiles: BTreeMap<String, f64>,
    pub max: Option<f64>,
}

/// A cell's figures (times in ms, rates in tokens/s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    /// Window length (decode), seconds.
    pub window_s: Option<f64>,
    /// Output tokens inside the window / window (decode); prompt tok/s (prefill).
    pub total_tok_s: Option<f64>,
    pub output_tokens: i64,
    pub completed_requests: i64,
    /// Requests the per-request figures are taken over.
    pub requests_scored: usize,
    pub ttft_ms: Summary,
    pub time_between_tokens_ms: Summary,
    pub per_request_tok_s: Summary,
    /// Gaps between consecutive token events inside the window (inter-chunk latency).
    pub itl_ms: Summary,
    /// Send → end of completed requests.
    pub e2e_latency_ms: Summary,
    pub active_requests: Option<f64>,
    /// `server` or `client`: where `active_requests` came from.
    pub active_source: Option<String>,
    /// Prefill: prompt tokens of the scout as the server counted them.
    pub prompt_tokens: Option<i64>,
    /// Prefill: prompt tokens / scout TTFT.
    pub prompt_tok_s: Option<f64>,
}

/// One cell of the matrix, scored (or why not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellScore {
    pub phase: Phase,
    pub context: u32,
    pub concurrency: u32,
    pub state: CellScoreState,
    /// Why the cell is not complete.
    pub reason: Option<String>,
    /// Null for cells that were not scored.
    pub verdict: Option<Verdict>,
    pub evidence: Vec<Evidence>,
    /// Evidence items left out beyond the first few per rule.
    pub evidence_omitted: usize,
    pub warnings: Vec<Warning>,
    pub figures: Option<Figures>,
}

impl CellScore {
    pub fn key(&self) -> CellKey {
        CellKey::new(self.phase, self.context, self.concurrency)
    }

    /// The status column: the verdict, or the cell's state when it was not scored.
    pub fn status_label(&self) -> String {
        match self.verdict {
            Some(v) => v.label().to_string(),
            None => match self.state {
                CellScoreState::Planned => "Not recorded".to_string(),
                s => {
                    let mut c = s.as_str().chars();
                    c.next()
                        .map(|f| f.to_uppercase().chain(c).collect())
                        .unwrap_or_default()
                }
            },
        }
    }
}

/// Where a cell stands in a scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellScoreState {
    /// Scored.
    Complete,
    /// A folder without a valid commit mark or with a bad file (`reason` says which).
    Incomplete,
    /// As the manifest says: not recorded yet.
    Planned,
    /// As the manifest says: its recording failed.
    Failed,
    /// As the manifest says: not recorded on purpose.
    Skipped,
    /// As the manifest says: the run stopped while recording it.
    Interrupted,
}

impl CellScoreState {
    /// The name the JSON and CSV outputs use.
    pub fn as_str(self) -> &'static str {
        match self {
            CellScoreState::Complete => "complete",
            CellScoreState::Incomplete => "incomplete",
            CellScoreState::Planned => "planned",
            CellScoreState::Failed => "failed",
            CellScoreState::Skipped => "skipped",
            CellScoreState::Interrupted => "interrupted",
        }
    }
}

impl std::fmt::Display for CellScoreState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<CellStatus> for CellScoreState {
    fn from(s: CellStatus) -> Self {
        match s {
            CellStatus::Complete => CellScoreState::Complete,
            CellStatus::Planned => CellScoreState::Planned,
            CellStatus::Failed => CellScoreState::Failed,
            CellStatus::Skipped => CellScoreState::Skipped,
            CellStatus::Interrupted => CellScoreState::Interrupted,
        }
    }
}

/// Scores the run folder at `dir` under `rules`.
pub fn score_dir(dir: &Path, rules: &RuleSet) -> Result<Scoring> {
    score(&Run::open(dir)?, rules)
}

/// Scores an opened run under `rules`.
pub fn score(run: &Run, rules: &RuleSet) -> Result<Scoring> {
    let m = &run.manifest;
    let preset = rules
        .metrics
        .preset(m.engine.name.as_deref())
        .map_err(|message| crate::Error::Rules {
            path: rules.name.clone().into(),
            message,
        })?;
    let mut series = preset.series();
    series.push(CLIENT_LAG_METRIC.to_string());
    let loaded = load::load(run, &series)?;

    // Every cell the manifest lists, and any folder it does not.
    let mut cells: BTreeMap<CellKey, CellScore> = BTreeMap::new();
    for entry in &m.cells {
        cells.insert(
            entry.key(),
            unscored(entry.key(), entry.status, entry.reason.clone()),
        );
    }
    for state in &run.cells {
        match state {
            CellState::Complete { key, .. } => {
                let s = match key.phase {
                    Phase::Prefill => score_prefill(*key, &loaded, rules),
                    Phase::Decode => score_decode(*key, &loaded, rules, &preset),
                };
                cells.insert(*key, s);
            }
            CellState::Incomplete { key, reason, .. } => {
                cells.insert(
                    *key,
                    new_cell(*key, CellScoreState::Incomplete, Some(reason.clone())),
                );
            }
        }
    }
    Ok(Scoring {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        scored_by: format!("tokentrace {}", tokentrace_schemas::TOOL_VERSION),
        rules: rules.clone(),
        metrics: preset,
        run: RunInfo {
            run_id: m.run_id.clone(),
            started_utc: m.clock.utc_at_zero.clone(),
            recorded_by: format!("{} {}", m.tool.name, m.tool.version),
            model: m.model.clone(),
            engine: m.engine.name.clone(),
            engine_version: m.engine.version.clone(),
            engine_details: m.engine.details.clone(),
            hardware: m.hardware.clone(),
            launch_command: m.launch_command.clone(),
            target: m.target.url.clone(),
            endpoint: m.config.endpoint.as_str().to_string(),
            window_s: m.config.window_ns as f64 / 1e9,
            max_tokens: m.config.max_tokens,
            ignore_eos: m.config.ignore_eos,
            token_counting: m.capabilities.token_counting.clone(),
            server_metrics: m.capabilities.metrics,
        },
        cells: cells.into_values().collect(),
    })
}

/// A cell in `state` (the scorers fill in verdict and figures of `complete` ones).
fn new_cell(key: CellKey, state: CellScoreState, reason: Option<String>) -> CellScore {
    CellScore {
        phase: key.phase,
        context: key.context,
        concurrency: key.concurrency,
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
fn unscored(key: CellKey, status: CellStatus, reason: Option<String>) -> CellScore {
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

fn summary(values: Vec<f64>, rules: &RuleSet) -> Summary {
    let v = stats::sorted(values);
    Summary {
        n: v.len(),
        median: stats::median(&v, rules.stats.median),
        percentiles: rules
            .stats
            .percentiles
            .iter()
            .filter_map(|p| {
                stats::percentile(&v, *p, rules.stats.percentile).map(|x| (format!("p{p}"), x))
            })
            .collect(),
        max: v.last().copied(),
    }
}

fn first_token(agg: &TokenAgg, rule: FirstToken) -> Option<i64> {
    match rule {
        FirstToken::FirstChunk => agg.first_chunk_ns,
        FirstToken::FirstContent => agg.first_content_ns,
        FirstToken::FirstContentOrReasoning => agg.first_text_ns,
    }
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

fn is_finished(r: &RequestInfo) -> bool {
    matches!(
        r.end_reason,
        EndReason::FinishedStop | EndReason::FinishedLength | EndReason::FinishedOther
    )
}

fn failed(r: &RequestInfo, rules: &RuleSet) -> bool {
    rules
        .error
        .end_reasons
        .iter()
        .any(|e| e == r.end_reason.as_str())
}

fn failed_evidence(r: &RequestInfo, open: Option<i64>) -> Evidence {
    Evidence::FailedStream {
        request_id: r.request_id,
        role: r.role.as_str().to_string(),
        end_reason: r.end_reason.as_str().to_string(),
        error: r.error.as_ref().map(|e| e.chars().take(200).collect()),
        end_s: r.end_ns.zip(open).map(|(e, o)| (e - o) as f64 / 1e9),
    }
}

/// Keeps the first [`MAX_EVIDENCE`] items; returns how many were left out.
fn capped<T>(mut items: Vec<T>) -> (Vec<T>, usize) {
    let omitted = items.len().saturating_sub(MAX_EVIDENCE);
    items.truncate(MAX_EVIDENCE);
    (items, omitted)
}

fn score_prefill(key: CellKey, loaded: &Loaded, rules: &RuleSet) -> CellScore {
    let mut cell = new_cell(key, CellScoreState::Complete, None);
    let requests = loaded.requests.get(&key).map(Vec::as_slice).unwrap_or(&[]);
    let scouts: Vec<&RequestInfo> = requests.iter().filter(|r| r.role == Role::Scout).collect();
    let mut evidence = Vec::new();
    let mut figures = Figures::default();
    match scouts.first() {
        None => evidence.push(Evidence::Missing {
            what: "no scout request in the prefill cell".to_string(),
        }),
        Some(scout) => {
            if failed(scout, rules) {
                evidence.push(failed_evidence(scout, None));
            }
            let agg = loaded
                .tokens
                .get(&scout.request_id)
                .copied()
                .unwrap_or_default();
            let ttft = first_token(&agg, rules.ttft.first)
                .zip(scout.sent_ns)
                .map(|(f, s)| f - s);
            let prompt = scout
                .prompt_tokens_server
                .unwrap_or(scout.prompt_tokens_requested);
            figures.prompt_tokens = Some(prompt);
            figures.ttft_ms = summary(ttft.map(ms).into_iter().collect(), rules);
            figures.prompt_tok_s = ttft
                .filter(|t| *t > 0)
                .map(|t| prompt as f64 / (t as f64 / 1e9));
            figures.total_tok_s = figures.prompt_tok_s;
            figures.completed_requests = i64::from(is_finished(scout));
            figures.requests_scored = usize::from(ttft.is_some());
            if ttft.is_none() && evidence.is_empty() {
                evidence.push(Evidence::Missing {
                    what: format!(
                        "the scout (request {}) produced no first token by the rule `{:?}`",
                        scout.request_id, rules.ttft.first
                    ),
                });
            }
        }
    }
    cell.verdict = Some(
        evidence
            .iter()
            .map(Evidence::verdict)
            .max()
            .unwrap_or(Verdict::Valid),
    );
    cell.evidence = evidence;
    cell.figures = Some(figures);
    cell
}

/// Gauge samples taken wholly inside the window, in time order.
fn in_window(samples: Option<&Vec<Sample>>, open: i64, close: i64) -> Vec<&Sample> {
    samples
        .map(|v| {
            v.iter()
                .filter(|s| s.start_ns >= open && s.end_ns <= close)
                .collect()
        })
        .unwrap_or_default()
}

fn mean(samples: &[&Sample]) -> Option<f64> {
    (!samples.is_empty())
        .then(|| samples.iter().map(|s| s.value).sum::<f64>() / samples.len() as f64)
}

fn score_decode(key: CellKey, loaded: &Loaded, rules: &RuleSet, preset: &Preset) -> CellScore {
    let mut cell = new_cell(key, CellScoreState::Complete, None);
    let Some(&(open, close)) = loaded.windows.get(&key) else {
        cell.verdict = Some(Verdict::Error);
        cell.evidence.push(Evidence::Missing {
            what: "no measurement window (window_open/window_close events)".to_string(),
        });
        return cell;
    };
    let window_ns = close - open;
    let window_s = window_ns as f64 / 1e9;
    let n = key.concurrency;
    let empty = Vec::new();
    let requests: Vec<&RequestInfo> = loaded
        .requests
        .get(&key)
        .unwrap_or(&empty)
        .iter()
        .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
        .collect();
    let agg = |r: &RequestInfo| {
        loaded
            .tokens
            .get(&r.request_id)
            .copied()
            .unwrap_or_default()
    };

    // Figures.
    let mut f = Figures {
        window_s: Some(window_s),
        ..Figures::default()
    };
    f.output_tokens = requests.iter().map(|r| agg(r).tokens_in_window).sum();
    f.total_tok_s = (window_ns > 0).then(|| f.output_tokens as f64 / window_s);
    let scoped: Vec<&RequestInfo> = requests
        .iter()
        .copied()
        .filter(|r| match rules.requests.scope {
            RequestScope::All => true,
            RequestScope::OverlappingWindow => {
                r.sent_ns.is_some_and(|s| s < close) && r.end_ns.is_none_or(|e| e >= open)
            }
        })
        .collect();
    let (mut ttft, mut tbt, mut rate, mut e2e) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut scored = 0;
    for r in &scoped {
        let a = agg(r);
        if a.tokens < i64::from(rules.requests.min_tokens) {
            continue;
        }
        scored += 1;
        if let (Some(first), Some(sent)) = (first_token(&a, rules.ttft.first), r.sent_ns) {
            ttft.push(ms(first - sent));
        }
        let denominator = match rules.requests.tbt_denominator {
            TbtDenominator::TokensMinusOne => a.tokens - 1,
            TbtDenominator::TokensAfterFirstEvent => a.tokens - a.first_token_tokens,
        };
        if let (Some(first), Some(last)) = (a.first_token_ns, a.last_token_ns)
            && denominator > 0
            && last > first
        {
            let per_token_ns = (last - first) as f64 / denominator as f64;
            tbt.push(per_token_ns / 1e6);
            rate.push(1e9 / per_token_ns);
        }
        if is_finished(r)
            && let (Some(s), Some(e)) = (r.sent_ns, r.end_ns)
        {
            e2e.push(ms(e - s));
        }
    }
    f.requests_scored = scored;
    f.ttft_ms = summary(ttft, rules);
    f.time_between_tokens_ms = summary(tbt, rules);
    f.per_request_tok_s = summary(rate, rules);
    f.e2e_latency_ms = summary(e2e, rules);
    f.itl_ms = summary(
        loaded
            .gaps
            .get(&key)
            .map(|g| g.iter().map(|x| ms(*x)).collect())
            .unwrap_or_default(),
        rules,
    );
    f.completed_requests = requests
        .iter()
        .filter(|r| is_finished(r) && r.end_ns.is_some_and(|e| e >= open && e <= close))
        .count() as i64;

    let samples = loaded.samples.get(&key);
    let series = |name: &Option<String>| {
        name.as_ref()
            .map(|n| in_window(samples.and_then(|s| s.get(n)), open, close))
            .unwrap_or_default()
    };
    let running = series(&preset.running);
    let waiting = series(&preset.waiting);
    let client_active = {
        let busy: i64 = requests
            .iter()
            .filter_map(|r| {
                let s = r.sent_ns?.max(open);
                let e = r.end_ns.unwrap_or(close).min(close);
                (e > s).then_some(e - s)
            })
            .sum();
        (window_ns > 0).then(|| busy as f64 / window_ns as f64)
    };
    let server_active = mean(&running);
    (f.active_requests, f.active_source) = match (rules.active.source, server_active) {
        (ActiveSource::Server, Some(m)) => (Some(m), Some("server".to_string())),
        _ => (client_active, Some("client".to_string())),
    };

    // Verdicts, each with its evidence.
    let mut evidence = Vec::new();
    let mut omitted = 0;
    let errors: Vec<Evidence> = requests
        .iter()
        .filter(|r| failed(r, rules))
        .filter(|r| match rules.error.scope {
            ErrorScope::Cell => true,
            ErrorScope::Window => r.end_ns.is_some_and(|e| e >= open && e <= close),
        })
        .map(|r| failed_evidence(r, Some(open)))
        .collect();
    let (errors, o) = capped(errors);
    evidence.extend(errors);
    omitted += o;

    let (loops, suspects) = find_loops(&requests, loaded, rules);
    let (loops, o) = capped(loops);
    evidence.extend(loops.into_iter().map(Evidence::Loop));
    omitted += o;
    let (suspects, _) = capped(suspects);
    cell.warnings
        .extend(suspects.into_iter().map(Warning::SuspectedLoop));

    let q = &rules.queued;
    let events = loaded.events.get(&key).map(Vec::as_slice).unwrap_or(&[]);
    if q.warmup_not_ready
        && let Some(r) = events
            .iter()
            .filter(|e| e.kind == EventKind::WarmupEnd)
            .find_map(|e| e.detail.as_deref().and_then(Readiness::from_detail))
            .filter(|r| *r != Readiness::Ready)
    {
        evidence.push(Evidence::WarmupNotReady {
            detail: r.to_string(),
        });
    }
    let mut missing = Vec::new();
    match (&preset.running, running.is_empty()) {
        (Some(metric), false) => {
            let max = running.iter().map(|s| s.value).fold(f64::MIN, f64::max);
            let avg = mean(&running).unwrap_or(0.0);
            if n >= q.min_concurrency && q.running_never_reached_n && max < f64::from(n) {
                evidence.push(Evidence::RunningNeverReachedN {
                    metric: metric.clone(),
                    max,
                    concurrency: n,
                });
            }
            if let Some(frac) = q.running_mean_below_fraction
                && n >= q.min_concurrency
                && avg < frac * f64::from(n)
            {
                evidence.push(Evidence::RunningMeanBelow {
                    metric: metric.clone(),
                    mean: avg,
                    threshold: frac * f64::from(n),
                    samples: running.len(),
                });
            }
        }
        (name, _) => missing.push(
            name.clone()
                .unwrap_or_else(|| "requests running".to_string()),
        ),
    }
    match (&preset.waiting, waiting.is_empty()) {
        (Some(metric), false) => {
            let avg = mean(&waiting).unwrap_or(0.0);
            if let Some(t) = q.waiting_mean_above
                && avg > t
            {
                evidence.push(Evidence::WaitingMeanAbove {
                    metric: metric.clone(),
                    mean: avg,
                    threshold: t,
                    samples: waiting.len(),
                });
            }
            if let Some(t) = q.waiting_max_above {
                let above: Vec<&&Sample> = waiting.iter().filter(|s| s.value > t).collect();
                if let Some(first) = above.first() {
                    evidence.push(Evidence::WaitingSampleAbove {
                        metric: metric.clone(),
                        value: first.value,
                        threshold: t,
                        at_s: (first.start_ns - open) as f64 / 1e9,
                        samples_above: above.len(),
                        samples: waiting.len(),
                    });
                }
            }
        }
        (name, _) => missing.push(
            name.clone()
                .unwrap_or_else(|| "requests waiting".to_string()),
        ),
    }
    if !missing.is_empty() {
        cell.warnings.push(Warning::NoServerMetrics { missing });
    }

    // The recorder's own lag.
    let tick_max = samples
        .and_then(|s| s.get(CLIENT_LAG_METRIC))
        .map(|v| {
            v.iter()
                .filter(|s| s.end_ns > open && s.start_ns < close && !s.value.is_nan())
                .map(|s| s.value * 1e3)
                .fold(f64::NAN, f64::max)
        })
        .filter(|v| !v.is_nan());
    let queue_p99 = loaded.queue_delays.get(&key).and_then(|d| {
        let v = stats::sorted(d.iter().map(|x| ms(*x)).collect());
        stats::percentile(&v, 99.0, rules.stats.percentile)
    });
    let lag = &rules.client_lag;
    if tick_max.is_some_and(|t| t > lag.tick_lateness_max_ms)
        || queue_p99.is_some_and(|q| q > lag.queue_delay_p99_ms)
    {
        cell.warnings.push(Warning::ClientLag {
            tick_lateness_max_ms: tick_max,
            queue_delay_p99_ms: queue_p99,
            tick_threshold_ms: lag.tick_lateness_max_ms,
            queue_threshold_ms: lag.queue_delay_p99_ms,
        });
    }
    // Only a drain that timed out is evidence that the server did not drain; without
    // metrics there was nothing to check (that has its own warning).
    if let Some(d) = events
        .iter()
        .filter(|e| e.kind == EventKind::DrainEnd)
        .find_map(|e| e.detail.as_deref().and_then(Drain::from_detail))
        .filter(|d| matches!(d, Drain::TimedOut { .. }))
    {
        cell.warnings.push(Warning::DrainIncomplete {
            detail: d.to_string(),
        });
    }

    cell.verdict = Some(
        evidence
            .iter()
            .map(Evidence::verdict)
            .max()
            .unwrap_or(Verdict::Valid),
    );
    cell.evidence = evidence;
    cell.evidence_omitted = omitted;
    cell.figures = Some(f);
    cell
}

/// Loops and suspected loops in the cell's requests, per the loop rules.
fn find_loops(
    requests: &[&RequestInfo],
    loaded: &Loaded,
    rules: &RuleSet,
) -> (Vec<LoopEvidence>, Vec<LoopEvidence>) {
    let l = &rules.looped;
    let (mut loops, mut suspects) = (Vec::new(), Vec::new());
    let min_span = l.min_span_chars.min(l.suspect_min_span_chars) as usize;
    let mut channels = l.channels.clone();
    channels.sort();
    channels.dedup();
    for r in requests {
        if r.role == Role::Warmup && !l.include_warmup {
            continue;
        }
        let Some((content, reasoning)) = loaded.text.get(&r.request_id) else {
            continue;
        };
        for &channel in &channels {
            let text = match channel {
                Channel::Content => content,
                Channel::Reasoning => reasoning,
            };
            if text.len() < min_span {
                continue; // fewer bytes than characters needed
            }
            let chars = loops::chars(text, l.normalize_digits);
            let found = loops::repetitions(
                &chars,
                loops::Search {
                    max_cycle: l.max_cycle_chars as usize,
                    min_span,
                    ignore_whitespace: l.ignore_whitespace_cycles,
                },
            );
            let evidence = |rep: &loops::Repetition| LoopEvidence {
                request_id: r.request_id,
                role: r.role.as_str().to_string(),
                channel,
                start_char: rep.start,
                cycle_chars: rep.cycle,
                cycles: rep.cycles(),
                span_chars: rep.span,
                cycle_excerpt: text
                    .chars()
                    .skip(rep.start)
                    .take(rep.cycle.min(EXCERPT_CHARS))
                    .collect(),
            };
            let best = |min_cycles: u32, min_span: u32| {
                found
                    .iter()
                    .filter(|rep| {
                        rep.cycles() >= min_cycles as usize && rep.span >= min_span as usize
                    })
                    .max_by_key(|rep| {
                        (
                            rep.span,
                            std::cmp::Reverse(rep.cycle),
                            std::cmp::Reverse(rep.start),
                        )
                    })
            };
            if let Some(rep) = best(l.min_cycles, l.min_span_chars) {
                loops.push(evidence(rep));
            } else if let Some(rep) = best(l.suspect_min_cycles, l.suspect_min_span_chars) {
                suspects.push(evidence(rep));
            }
        }
    }
    (loops, suspects)
}
