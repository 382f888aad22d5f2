//! Rule sets: every methodological choice of the analyzer (which TTFT, which requests,
//! which median, when a cell is queued or looped) as a named, versioned TOML document.
//! Two are built in (`reference`, llm-inference-bench 0.6.2 as its code computes, and
//! `default`), each with its earlier versions; a file may extend one of them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokentrace_schemas::column::StrEnum;

use crate::error::{Error, Result};

/// The built-in rule sets: (name, version, TOML text).
pub const BUILTIN: [(&str, &str, &str); 11] = [
    // Newest first: a name without a version is its newest.
    (
        "reference",
        "0.6.2-r2",
        include_str!("../rules/reference.toml"),
    ),
    (
        "reference",
        "0.6.2",
        include_str!("../rules/reference-0.6.2.toml"),
    ),
    // Newest first: `default` without a version is the newest.
    ("default", "1.8.0", include_str!("../rules/default.toml")),
    (
        "default",
        "1.7.0",
        include_str!("../rules/default-1.7.0.toml"),
    ),
    (
        "default",
        "1.6.0",
        include_str!("../rules/default-1.6.0.toml"),
    ),
    (
        "default",
        "1.5.0",
        include_str!("../rules/default-1.5.0.toml"),
    ),
    (
        "default",
        "1.4.0",
        include_str!("../rules/default-1.4.0.toml"),
    ),
    (
        "default",
        "1.3.0",
        include_str!("../rules/default-1.3.0.toml"),
    ),
    (
        "default",
        "1.2.0",
        include_str!("../rules/default-1.2.0.toml"),
    ),
    (
        "default",
        "1.1.0",
        include_str!("../rules/default-1.1.0.toml"),
    ),
    (
        "default",
        "1.0.0",
        include_str!("../rules/default-1.0.0.toml"),
    ),
];

/// Which arrival counts as a request's first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstToken {
    /// The first SSE event of any kind (a role-only delta counts).
    FirstChunk,
    /// The first event with answer text.
    FirstContent,
    /// The first event with answer or reasoning text.
    FirstContentOrReasoning,
}

/// Which decode requests the per-request medians use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestScope {
    /// Every warm-up and measured request of the cell.
    All,
    /// Requests sent before the window closed that ended after it opened.
    OverlappingWindow,
}

/// The denominator of a request's time between tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TbtDenominator {
    /// tokens − 1, whatever the first event carried.
    TokensMinusOne,
    /// Tokens that arrived after the first token event.
    TokensAfterFirstEvent,
}

/// How a median is taken of an even number of values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MedianMethod {
    /// Mean of the two middle values.
    Midpoint,
    /// The lower middle value.
    Lower,
    /// The upper middle value.
    Upper,
}

/// How a percentile is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PercentileMethod {
    /// Linear interpolation between closest ranks (numpy's default).
    Linear,
    /// The smallest value with at least p% of values at or below it.
    NearestRank,
    /// The value at floor((n − 1) · p).
    Lower,
}

/// Where "average active requests" comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActiveSource {
    /// Mean of the server's running gauge over the scrapes inside the window (the
    /// client's count when the server has no such gauge).
    Server,
    /// Time-weighted number of open streams inside the window.
    Client,
}

/// What a decode cell's "per request tok/s" is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerRequest {
    /// The median over the scored requests of each one's own decode speed (1 / its time
    /// between tokens).
    #[default]
    MedianOfRequests,
    /// The cell's total tok/s divided by its concurrency (the reference tool's table);
    /// open-loop cells, with no concurrency, keep the median of the requests.
    TotalOverConcurrency,
}

impl PerRequest {
    fn is_default(&self) -> bool {
        *self == PerRequest::default()
    }
}

/// Which requests an error must come from to invalidate the cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorScope {
    /// Requests that ended inside the window.
    Window,
    /// Any warm-up or measured request of the cell.
    Cell,
}

/// A text channel of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    Content,
    Reasoning,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Content => "content",
            Channel::Reasoning => "reasoning",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtftRules {
    /// The first token of a decode request (its TTFT).
    pub first: FirstToken,
    /// The first token of a prefill scout (prompt tok/s = prompt / its TTFT); absent:
    /// the same as `first` (rule sets before default 1.2.0).
    #[serde(default)]
    pub prefill: Option<FirstToken>,
}

impl TtftRules {
    /// The first-token rule of prefill scouts.
    pub fn prefill(&self) -> FirstToken {
        self.prefill.unwrap_or(self.first)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRules {
    pub scope: RequestScope,
    pub min_tokens: u32,
    pub tbt_denominator: TbtDenominator,
    /// What "per request tok/s" is (new in reference 0.6.2-r2; absent: the median of the
    /// requests' own speeds).
    #[serde(default, skip_serializing_if = "PerRequest::is_default")]
    pub per_request: PerRequest,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsRules {
    pub median: MedianMethod,
    pub percentile: PercentileMethod,
    /// Percentiles (0–100) reported in JSON next to the medians.
    pub percentiles: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveRules {
    pub source: ActiveSource,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuedRules {
    /// Queued when the readiness warm-up gave up.
    pub warmup_not_ready: bool,
    /// Queued when the running gauge never reached N.
    pub running_never_reached_n: bool,
    /// Queued when the running gauge's mean is below this fraction of N (absent: off).
    pub running_mean_below_fraction: Option<f64>,
    /// Queued when the waiting gauge's mean is above this (absent: off).
    pub waiting_mean_above: Option<f64>,
    /// Queued when any scrape's waiting gauge is above this (absent: off).
    pub waiting_max_above: Option<f64>,
    /// The running-gauge checks apply from this concurrency up.
    pub min_concurrency: u32,
    /// The running-gauge checks count only when at least this many scrapes inside the
    /// window saw a request waiting (0: always; an engine without a waiting gauge is
    /// never excused). A closed-loop restart can pull one scrape of the running gauge
    /// down; a queue also shows as waiting requests.
    #[serde(default)]
    pub running_needs_waiting_samples: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopRules {
    pub channels: Vec<Channel>,
    /// A loop repeats its cycle back to back at least this many times...
    pub min_cycles: u32,
    /// ...over at least this many characters (Unicode scalar values).
    pub min_span_chars: u32,
    /// Longest cycle looked for.
    pub max_cycle_chars: u32,
    /// Compare text with every digit replaced by 0 (lines differing by a number repeat).
    pub normalize_digits: bool,
    /// A cycle of whitespace only is not a loop.
    pub ignore_whitespace_cycles: bool,
    /// Check warm-up requests too (a loop during warm-up invalidates the cell).
    pub include_warmup: bool,
    /// A repetition with at least this many cycles...
    pub suspect_min_cycles: u32,
    /// ...over at least this many characters, short of a loop, is a warning.
    pub suspect_min_span_chars: u32,
    /// Whether the characters of a partial final cycle count toward a repetition's span
    /// (`cycles` always counts whole cycles only).
    #[serde(default = "yes")]
    pub partial_cycle_in_span: bool,
    /// A cycle longer than `max_cycle_chars`, repeated at least this many times over the
    /// suspect span, is a suspected loop (0: not looked for).
    #[serde(default)]
    pub beyond_cap_suspect_min_cycles: u32,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorRules {
    pub scope: ErrorScope,
    /// `requests.end_reason` values that count as a failed stream.
    pub end_reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientLagRules {
    /// Warn when the recorder's lateness tick was ever later than this inside the window
    /// (only for runs without tick counts, or rule sets without `late_tick_ms`).
    pub tick_lateness_max_ms: f64,
    /// A tick later than this (ms; counted at the next of the recorder's thresholds,
    /// `protocol::LATE_TICK_MS`) is late …
    #[serde(default)]
    pub late_tick_ms: Option<f64>,
    /// … and the recorder lagged when more than this share of the window's ticks were
    /// late: sustained lag, not one hiccup.
    #[serde(default)]
    pub late_tick_share_max: Option<f64>,
    /// Warn when the 99th percentile of the chunk queueing delay is above this.
    pub queue_delay_p99_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricRules {
    /// `auto` (from the manifest's engine), `vllm`, `sglang`, `tgi`, `llama.cpp`, `none`.
    pub preset: String,
    /// Overrides of the preset's metric names, by role.
    pub running: Option<String>,
    pub waiting: Option<String>,
    pub generated_tokens: Option<String>,
    pub prompt_tokens: Option<String>,
    pub kv_cache_usage: Option<String>,
    pub preemptions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_drafts: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_draft_tokens: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted_tokens: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_length: Option<String>,
}

/// Prompt-cache checks. Rule sets without a `[cache]` table (default 1.0.0) check
/// nothing here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheRules {
    /// A prefill scout with more than this fraction of its prompt served from the
    /// server's prefix cache did not measure prefill: verdict `prefill_cached`.
    pub scout_max_cached_fraction: Option<f64>,
    /// A decode request with less than this fraction of its prompt cached prefilled
    /// cold inside its TTFT: warning `cold_prefill`.
    pub warm_min_cached_fraction: Option<f64>,
    /// Leave those cold requests out of the TTFT summary.
    pub ttft_excludes_cold: bool,
}

/// Which count of a request's output tokens feeds the figures (output tokens, total
/// tok/s, time between tokens, per-request tok/s, the minimum-tokens filter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenCount {
    /// As the recorder attributed tokens to events under the manifest's
    /// `token_counting` (token ids, usage, or one per event with the final usage
    /// settling the rest). Rule sets before default 1.2.0.
    #[default]
    Recorded,
    /// The increases of the server's cumulative usage, for every request whose
    /// token-carrying events all carried it; the recorded count for the others.
    Usage,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokenRules {
    pub count: TokenCount,
}

/// The service-level objective rate cells are judged against (the highest rate that
/// meets it within the server's capacity is the report's knee): every limit given must hold at `percentile`, and the
/// cell must be Valid. Rule sets without an `[slo]` table (before default 1.3.0) judge
/// nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SloRules {
    /// The percentile the limits apply at, e.g. 99.
    pub percentile: Option<f64>,
    /// Most TTFT, ms.
    pub ttft_ms: Option<f64>,
    /// Most time between tokens (a request's decode time per token), ms.
    pub time_between_tokens_ms: Option<f64>,
    /// Most end-to-end latency, ms.
    pub e2e_latency_ms: Option<f64>,
    /// A rate cell is saturated when it completed fewer requests per second than this
    /// share of the rate its own schedule offered (new in default 1.5.0; absent: 0.8,
    /// the share the report used before it was a rule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saturated_share: Option<f64>,
}

impl SloRules {
    /// The share of its offered rate below which a rate cell's completions mean the
    /// server is saturated.
    pub fn saturated_share(&self) -> f64 {
        self.saturated_share.unwrap_or(0.8)
    }

    /// Whether the rule set has an SLO to judge.
    pub fn is_set(&self) -> bool {
        self.percentile.is_some()
            && (self.ttft_ms.is_some()
                || self.time_between_tokens_ms.is_some()
                || self.e2e_latency_ms.is_some())
    }

    /// `p99 TTFT ≤ 2000 ms, p99 time between tokens ≤ 50 ms`.
    pub fn describe(&self) -> String {
        let p = self.percentile.unwrap_or(0.0);
        [
            ("TTFT", self.ttft_ms),
            ("time between tokens", self.time_between_tokens_ms),
            ("E2E latency", self.e2e_latency_ms),
        ]
        .iter()
        .filter_map(|(name, limit)| limit.map(|l| format!("p{p} {name} ≤ {l} ms")))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// A complete rule set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSet {
    pub name: String,
    pub version: String,
    pub description: String,
    pub ttft: TtftRules,
    pub requests: RequestRules,
    pub stats: StatsRules,
    pub active: ActiveRules,
    pub queued: QueuedRules,
    pub looped: LoopRules,
    pub error: ErrorRules,
    pub client_lag: ClientLagRules,
    pub metrics: MetricRules,
    #[serde(default)]
    pub cache: CacheRules,
    #[serde(default)]
    pub tokens: TokenRules,
    #[serde(default, skip_serializing_if = "SloRules::is_default")]
    pub slo: SloRules,
    #[serde(default, skip_serializing_if = "ReplayRules::is_default")]
    pub replay: ReplayRules,
    #[serde(default, skip_serializing_if = "ContentRules::is_default")]
    pub content: ContentRules,
    #[serde(default, skip_serializing_if = "ConnectionRules::is_default")]
    pub connections: ConnectionRules,
    #[serde(default, skip_serializing_if = "NetworkRules::is_default")]
    pub network: NetworkRules,
    #[serde(default, skip_serializing_if = "ConversationRules::is_default")]
    pub conversation: ConversationRules,
}

/// How conversation cells are judged beyond their figures (new in default 1.8.0;
/// earlier sets warn of nothing here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConversationRules {
    /// A cell whose turns from the second on got less than this share of their history
    /// (the prompt and answers before, which a prefix cache that kept the session could
    /// serve) from the server's prefix cache lost its conversations' prefixes between
    /// turns: warning `prefix_evicted`, with the KV-cache usage as evidence. Null: no
    /// check.
    pub min_hit_ratio: Option<f64>,
}

impl ConversationRules {
    fn is_default(&self) -> bool {
        *self == ConversationRules::default()
    }
}

/// What the network between the server and the recorder did to a stream (new in default
/// 1.7.0; earlier sets check nothing here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkRules {
    /// A request whose token events came this many or more to one read, on average, was
    /// re-chunked by the network (a proxy or port-forward that held the stream and let
    /// it go in bursts): warning `rechunked`. A server writes one event per step, and a
    /// recorder that keeps up reads each soon after it is written. Null: no check.
    pub rechunk_events_per_read: Option<f64>,
    /// … counted only for requests with at least this many token events.
    pub rechunk_min_events: u32,
    /// Leave flagged requests out of TTFT, time between tokens, per-request tok/s and the
    /// gaps between events (they are the network's timing, not the engine's); total
    /// tok/s counts their tokens either way.
    pub rechunk_excludes_latency: bool,
}

impl NetworkRules {
    fn is_default(&self) -> bool {
        *self == NetworkRules::default()
    }
}

/// Checks of what the server answered, not how fast (new in default 1.6.0; earlier
/// sets check nothing here). The reference tool's CJK-leak watchdog, made a rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContentRules {
    /// The scripts the prompts are written in (Unicode script names: `Latin`, `Han`,
    /// `Cyrillic`, ...): an answer's letters in any other script are foreign to the
    /// prompt. tokentrace's own prompts, and the prompts of its replays, are Latin.
    pub scripts: Vec<String>,
    /// Warn of a request when more than this share of one channel's letters are foreign
    /// (warning `script_mix`) …
    pub script_mix_max_share: Option<f64>,
    /// … in a channel of at least this many letters.
    pub script_mix_min_letters: u32,
    /// Warn of requests that finished without one output token (`empty_output`).
    pub empty_output: bool,
    /// Warn of requests that finished before their `max_tokens` though every request
    /// of a run asks `ignore_eos` (`stop_early`): a refusal, an end-of-text the server
    /// did not ignore, a stop string.
    pub stop_early: bool,
    /// Make each finding a verdict as well: the cell is `bad_output`, not Valid.
    pub verdict: bool,
}

impl ContentRules {
    fn is_default(&self) -> bool {
        *self == ContentRules::default()
    }

    /// The scripts named, or the first name that is not a Unicode script's.
    pub fn scripts(&self) -> std::result::Result<Vec<unicode_script::Script>, String> {
        self.scripts
            .iter()
            .map(|n| unicode_script::Script::from_full_name(n).ok_or_else(|| n.clone()))
            .collect()
    }
}

/// How the cell's connections are judged (new in default 1.6.0).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionRules {
    /// Warn when a cell's requests were sent again on a new connection (their reused
    /// one closed under them) more than this many times (warning `retries`).
    pub max_retries: Option<u32>,
    /// Warn when a cell's closed-loop workers opened more than this many connections
    /// beyond their first (the server closed kept-alive connections).
    pub max_reconnects: Option<u32>,
}

impl ConnectionRules {
    fn is_default(&self) -> bool {
        *self == ConnectionRules::default()
    }
}

/// How replay cells are judged beyond the SLO (new in default 1.4.0; earlier sets warn
/// of no lag).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayRules {
    /// The percentile of the requests' schedule lag that is checked …
    pub lag_percentile: Option<f64>,
    /// … against this many ms: beyond it, the replay fell behind its workload and says
    /// by how much (warning `schedule_lag`).
    pub max_lag_ms: Option<f64>,
}

impl ReplayRules {
    fn is_default(&self) -> bool {
        *self == ReplayRules::default()
    }
}

impl SloRules {
    fn is_default(&self) -> bool {
        *self == SloRules::default()
    }
}

impl RuleSet {
    /// `name@version`, as results files are named.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// A built-in rule set by `name` or `name@version`.
    pub fn builtin(name: &str) -> Option<RuleSet> {
        // The built-in texts are tested to parse; a failure here is a build defect.
        parse(builtin_text(name)?, Path::new(name)).ok()
    }

    /// A rule set from a file path, or else a built-in name (`reference`,
    /// `reference@0.6.2`, `default`).
    pub fn load(spec: &str) -> Result<RuleSet> {
        let path = Path::new(spec);
        if path.is_file() {
            let text = std::fs::read_to_string(path).map_err(|e| Error::Rules {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
            return parse(&text, path);
        }
        RuleSet::builtin(spec).ok_or_else(|| Error::Rules {
            path: PathBuf::from(spec),
            message: format!(
                "no such file, and not a built-in rule set (built in: {})",
                BUILTIN
                    .iter()
                    .map(|(n, v, _)| format!("{n}@{v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    fn check(&self, path: &Path) -> Result<()> {
        let bad = |message: String| Error::Rules {
            path: path.to_path_buf(),
            message,
        };
        if self.name.is_empty() || self.name.contains(['/', '@', '\\']) {
            return Err(bad(format!(
                "name `{}` must be non-empty without / \\ @",
                self.name
            )));
        }
        if self.version.is_empty() || self.version.contains(['/', '\\']) {
            return Err(bad(format!(
                "version `{}` must be non-empty without / \\",
                self.version
            )));
        }
        if let Some(p) = self
            .stats
            .percentiles
            .iter()
            .find(|p| !(0.0..=100.0).contains(*p))
        {
            return Err(bad(format!("stats.percentiles: {p} is not within 0–100")));
        }
        if let Some(x) = self.slo.saturated_share
            && !(x > 0.0 && x <= 1.0)
        {
            return Err(bad(format!(
                "slo.saturated_share: {x} is not within (0, 1]"
            )));
        }
        if let Some(x) = self.content.script_mix_max_share
            && !(0.0..=1.0).contains(&x)
        {
            return Err(bad(format!(
                "content.script_mix_max_share: {x} is not within 0–1"
            )));
        }
        if let Err(unknown) = self.content.scripts() {
            return Err(bad(format!(
                "content.scripts: unknown script `{unknown}` (Unicode script names: Latin, Han, Cyrillic, ...)"
            )));
        }
        if self.content.script_mix_max_share.is_some() && self.content.scripts.is_empty() {
            return Err(bad(
                "content.scripts: the script-mix check needs the prompts' scripts".to_string(),
            ));
        }
        if self.looped.min_cycles < 2 || self.looped.suspect_min_cycles < 2 {
            return Err(bad("looped: cycles must be at least 2".to_string()));
        }
        if self.looped.max_cycle_chars == 0 {
            return Err(bad("looped.max_cycle_chars must be positive".to_string()));
        }
        for r in &self.error.end_reasons {
            if tokentrace_schemas::tables::EndReason::parse(r).is_none() {
                return Err(bad(format!("error.end_reasons: unknown end reason `{r}`")));
            }
        }
        if let Some(x) = self.network.rechunk_events_per_read
            && !(x.is_finite() && x > 1.0)
        {
            return Err(bad(format!(
                "network.rechunk_events_per_read: {x} must be over 1 (one event to a read is a stream as written)"
            )));
        }
        for (name, f) in [
            (
                "cache.scout_max_cached_fraction",
                self.cache.scout_max_cached_fraction,
            ),
            (
                "cache.warm_min_cached_fraction",
                self.cache.warm_min_cached_fraction,
            ),
        ] {
            if let Some(f) = f.filter(|f| !(0.0..=1.0).contains(f)) {
                return Err(bad(format!("{name}: {f} is not within 0–1")));
            }
        }
        self.metrics.preset(None).map_err(bad)?;
        Ok(())
    }
}

impl MetricRules {
    /// The preset the rules ask for, given the manifest's engine name (for `auto`).
    /// An unknown engine under `auto` falls back to vLLM's names, the de-facto standard
    /// that other OpenAI-compatible servers copy.
    pub fn preset(&self, engine: Option<&str>) -> Result<crate::presets::Preset, String> {
        let mut p = match self.preset.as_str() {
            "auto" => engine
                .and_then(crate::presets::builtin)
                .or_else(|| crate::presets::builtin("vllm"))
                .unwrap_or_default(),
            other => crate::presets::builtin(other).ok_or_else(|| {
                format!(
                    "metrics.preset: unknown preset `{other}` (auto, vllm, sglang, tgi, llama.cpp, none)"
                )
            })?,
        };
        let over = |slot: &mut Option<String>, with: &Option<String>| {
            if let Some(w) = with {
                *slot = Some(w.clone());
            }
        };
        over(&mut p.running, &self.running);
        over(&mut p.waiting, &self.waiting);
        over(&mut p.generated_tokens, &self.generated_tokens);
        over(&mut p.prompt_tokens, &self.prompt_tokens);
        over(&mut p.kv_cache_usage, &self.kv_cache_usage);
        over(&mut p.preemptions, &self.preemptions);
        over(&mut p.spec_drafts, &self.spec_drafts);
        over(&mut p.spec_draft_tokens, &self.spec_draft_tokens);
        over(&mut p.spec_accepted_tokens, &self.spec_accepted_tokens);
        over(&mut p.spec_accept_length, &self.spec_accept_length);
        Ok(p)
    }
}

/// The TOML of a built-in rule set named `name` or `name@version`.
fn builtin_text(name: &str) -> Option<&'static str> {
    let (n, v) = name.split_once('@').unwrap_or((name, ""));
    BUILTIN
        .iter()
        .find(|(bn, bv, _)| *bn == n && (v.is_empty() || *bv == v))
        .map(|(_, _, text)| *text)
}

/// Parses a rule set; `extends = "NAME"` takes a built-in set and overrides what the
/// file gives, key by key.
pub fn parse(text: &str, path: &Path) -> Result<RuleSet> {
    let bad = |message: String| Error::Rules {
        path: path.to_path_buf(),
        message,
    };
    let mut table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| bad(e.to_string()))?;
    if let Some(base) = table.remove("extends") {
        let base_name = base
            .as_str()
            .ok_or_else(|| bad("extends must be a string".to_string()))?;
        let base_text = builtin_text(base_name)
            .ok_or_else(|| bad(format!("extends: no built-in rule set `{base_name}`")))?;
        let mut merged: toml::Table = base_text
            .parse()
            .map_err(|e: toml::de::Error| bad(e.to_string()))?;
        merge(&mut merged, table);
        table = merged;
    }
    let rules: RuleSet = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| bad(e.to_string()))?;
    rules.check(path)?;
    Ok(rules)
}

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}
