//! The scoring contract: the serialized form of a scored run (`tokentrace.scoring`
//! v1) that `rescore` writes to `RUN/results/<name>@<version>.json`, `diff` reads back,
//! and every report format renders. Types only; the rules that fill them are in `score`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokentrace_schemas::layout::{CellKey, Phase, Rate};
use tokentrace_schemas::manifest::{CellStatus, PrefillMode, TokenCounting};
use tokentrace_schemas::tables::Endpoint;

use crate::presets::Preset;
use crate::rules::{Channel, RuleSet};

/// The JSON document's format name and version.
pub const FORMAT: &str = "tokentrace.scoring";
pub const FORMAT_VERSION: u32 = 1;

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
    /// Per context with rate cells: the server's capacity and the SLO's knee, as the
    /// rate report states them (absent without rate cells).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_capacity: Vec<RateCapacity>,
}

/// A rate cell's `capacity` label: it offered more than its context's capacity …
pub const CAPACITY_ABOVE: &str = "above";
/// … or not.
pub const CAPACITY_WITHIN: &str = "within";

/// One context's rate cells judged together: where completed requests level off, and
/// the highest rate meeting the SLO within that.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateCapacity {
    pub context: u32,
    /// Completed requests per second at the server's capacity: the highest a rate cell
    /// of this context completed, when some cell is saturated (it completed fewer than
    /// the rule's `saturated_share` of what its schedule offered; an `inf` cell always
    /// is); null when none is.
    pub capacity_req_s: Option<f64>,
    /// The rate of the cell that completed the most (null with no capacity).
    pub capacity_rate: Option<Rate>,
    /// The highest rate that meets the SLO within the capacity, every lower rate too;
    /// null without an SLO or when the lowest rate misses it.
    pub knee: Option<Rate>,
    /// The first rate that misses the SLO or lies above the capacity (null when none).
    pub first_miss: Option<Rate>,
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
    pub endpoint: Endpoint,
    pub window_s: f64,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub token_counting: Option<TokenCounting>,
    /// Whether the server's `/metrics` answered.
    pub server_metrics: Option<bool>,
    /// How prefill was measured (older runs: `scout`).
    pub prefill_mode: PrefillMode,
    /// What the recorder found out by itself about the host, GPUs and engine (empty
    /// for runs recorded before it did).
    #[serde(default)]
    pub facts: Vec<tokentrace_schemas::manifest::Fact>,
    /// Whether any cell carries GPU telemetry.
    #[serde(default)]
    pub gpu_telemetry: bool,
    /// Requests finished with the server's usage, and not one of them said how many
    /// prompt tokens the prefix cache served (`prompt_tokens_details.cached_tokens`):
    /// the server was not asked to (vLLM: `--enable-prompt-tokens-details`). Written
    /// only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached_tokens_missing: bool,
    /// The cells' files were read without checking them against the checksums their
    /// commit marks record (`--no-verify`). Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checksums_skipped: bool,
    /// Measured requests per burst cell (runs with burst cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_requests: Option<u32>,
    /// How the rate cells were driven (runs with rate cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<tokentrace_schemas::manifest::RateConfig>,
    /// The replay cells' settings and sources (`config.replay`); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<tokentrace_schemas::manifest::ReplayConfig>,
    /// The conversation cells' settings (`config.conversation`); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<tokentrace_schemas::manifest::ConversationConfig>,
    /// Where an imported run's figures came from (`tokentrace import`): that tool
    /// computed them, and they are shown as it did, never re-scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<tokentrace_schemas::manifest::Imported>,
}

/// A cell's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Valid,
    RequestsQueued,
    Looped,
    /// The prefill scout was answered from the prefix cache: prefill not measured.
    PrefillCached,
    /// A content rule that the rule set makes a verdict found bad answers.
    BadOutput,
    Error,
}

impl Verdict {
    /// As the report shows it.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Valid => "Valid",
            Verdict::RequestsQueued => "Requests queued",
            Verdict::Looped => "Looped",
            Verdict::PrefillCached => "Served from cache",
            Verdict::BadOutput => "Bad output",
            Verdict::Error => "Error",
        }
    }

    /// The name the JSON scoring uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::RequestsQueued => "requests_queued",
            Verdict::Looped => "looped",
            Verdict::PrefillCached => "prefill_cached",
            Verdict::BadOutput => "bad_output",
            Verdict::Error => "error",
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
    /// A content rule the rule set makes a verdict found bad answers (Bad output).
    Content(ContentFindings),
    /// The cell has no measurement window or no scout (Error).
    Missing { what: String },
    /// A request repeated itself (Looped).
    Loop(LoopEvidence),
    /// The prefill scout's prompt was served from the prefix cache (Prefill cached).
    ScoutCached {
        request_id: i64,
        cached_tokens: i64,
        prompt_tokens: i64,
        max_fraction: f64,
    },
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
    /// The cell's prompts against the engine's KV-cache budget, given with the other
    /// Requests-queued evidence (never on its own): context × concurrency tokens, the
    /// budget the run's manifest records (fact `engine.kv_cache_tokens`) and its source.
    KvBudget {
        need_tokens: u64,
        budget_tokens: u64,
        source: String,
    },
    /// An imported cell's verdict as the tool that computed it gave it, in its own
    /// words (its flags and reasons).
    Imported { verdict: Verdict, said: String },
}

impl Evidence {
    /// The verdict this evidence supports.
    pub fn verdict(&self) -> Verdict {
        match self {
            Evidence::FailedStream { .. } | Evidence::Missing { .. } => Verdict::Error,
            Evidence::Loop(_) => Verdict::Looped,
            Evidence::ScoutCached { .. } => Verdict::PrefillCached,
            Evidence::Content(_) => Verdict::BadOutput,
            Evidence::Imported { verdict, .. } => *verdict,
            _ => Verdict::RequestsQueued,
        }
    }
}

impl Warning {
    /// The warning's kind, as the JSON scoring names it (`client_lag`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Warning::ClientLag { .. } => "client_lag",
            Warning::SuspectedLoop(_) => "suspected_loop",
            Warning::NoServerMetrics { .. } => "no_server_metrics",
            Warning::DrainIncomplete { .. } => "drain_incomplete",
            Warning::UnreadEventDetail { .. } => "unread_event_detail",
            Warning::ColdPrefill { .. } => "cold_prefill",
            Warning::WarmPrefill { .. } => "warm_prefill",
            Warning::ScheduleLag { .. } => "schedule_lag",
            Warning::ReplaySkipped { .. } => "replay_skipped",
            Warning::Content(_) => "content",
            Warning::Connections { .. } => "connections",
            Warning::Rechunked(_) => "rechunked",
            Warning::PrefixEvicted { .. } => "prefix_evicted",
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
        /// Share of the window's ticks later than `late_tick_ms` (when the rule and the
        /// recording have tick counts), and the share allowed.
        #[serde(default)]
        late_tick_share: Option<f64>,
        #[serde(default)]
        late_tick_ms: Option<f64>,
        #[serde(default)]
        late_tick_share_max: Option<f64>,
    },
    /// A repetition short of a loop.
    SuspectedLoop(LoopEvidence),
    /// The server's gauges were not available: queueing was not judged, and active
    /// requests are the client's count.
    NoServerMetrics { missing: Vec<String> },
    /// The drain barrier after the cell did not see an idle server.
    DrainIncomplete { detail: String },
    /// A `warmup_end` or `drain_end` event whose detail no reader form matches: the
    /// readiness or drain check it reports was not read, so a warm-up that gave up or a
    /// drain that timed out would pass unseen. The event's kind, time (ns) and text.
    UnreadEventDetail {
        event: String,
        time_ns: i64,
        detail: String,
    },
    /// Requests whose TTFT holds a cold prefill: less than `min_fraction` of their
    /// prompt was cached.
    ColdPrefill {
        requests: Vec<ColdRequest>,
        /// Cold requests beyond those listed.
        more: usize,
        min_fraction: f64,
        /// Whether the TTFT figures leave them out.
        excluded_from_ttft: bool,
    },
    /// Burst and rate cells, whose TTFT and E2E latency are meant to hold a cold
    /// prefill: requests with at least `min_fraction` of their prompt served from the
    /// prefix cache (a trace recorded with one prompt per context, or a server caching
    /// across requests), so their latency is a warm prefix's.
    WarmPrefill {
        requests: Vec<ColdRequest>,
        /// Warm requests beyond those listed.
        more: usize,
        /// Requests the figures are taken over.
        of: usize,
        min_fraction: f64,
    },
    /// Replay cells: the requests left later than their schedule said, beyond the rule
    /// set's limit (the client fell behind, or a `max_concurrency` cap held them), so
    /// the load the server saw was not the workload's.
    ScheduleLag {
        /// The lag at the rule's percentile, ms …
        lag_ms: f64,
        /// … which percentile, and the most allowed there.
        percentile: f64,
        max_lag_ms: f64,
        /// The latest request's lag, ms.
        worst_ms: f64,
        /// Requests later than `max_lag_ms`, of `of` sent.
        late: usize,
        of: usize,
    },
    /// Replay cells: requests of the workload that were not sent (a prompt and output
    /// over the server's longest request, a trace row without output), never cut to fit.
    ReplaySkipped {
        skipped: usize,
        of: usize,
        /// The first one's source row and reason.
        first: String,
    },
    /// A content rule found answers that are not what was asked (rule `[content]`):
    /// `check` is `script_mix`, `empty_output` or `stop_early`.
    Content(ContentFindings),
    /// The cell's requests were sent again on a new connection more often than the
    /// rule allows, or its workers opened more connections than it allows.
    Connections {
        retries: i64,
        reconnects: Option<i64>,
        connections_opened: i64,
        max_retries: Option<u32>,
        max_reconnects: Option<u32>,
    },
    /// "The network re-chunked this stream" (rule `[network]`): requests whose token
    /// events came many to one read, where a server writes one event per step, so
    /// something between the server and the recorder held the stream and let it go in
    /// bursts. Their TTFT and time between tokens are the network's timing.
    Rechunked(Box<RechunkEvidence>),
    /// Conversation cells: the turns from the second on got less than the rule's share
    /// of their history from the prefix cache (rule `[conversation]`): the server lost
    /// the sessions' prefixes between turns (evicted under KV-cache pressure) and
    /// computed them again, with the KV-cache usage it was under.
    PrefixEvicted {
        /// Cached over history tokens of those turns, and the rule's least.
        hit_ratio: f64,
        min_hit_ratio: f64,
        /// The turns judged, and how many of them got under half their history.
        turns: usize,
        mostly_missed: usize,
        /// The KV-cache usage gauge's highest and mean value inside the window (0 to
        /// 1), and its name; null where the engine has none.
        kv_metric: Option<String>,
        kv_usage_max: Option<f64>,
        kv_usage_mean: Option<f64>,
    },
}

/// The evidence of a `rechunked` warning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RechunkEvidence {
    /// The fault's class, as the fault proxy and the chaos benchmark name it:
    /// `buffering` (a proxy that holds a stream and releases it in bursts).
    pub fault: String,
    /// The first requests flagged, …
    pub requests: Vec<RechunkedRequest>,
    /// … how many more, and of how many requests with enough token events to judge.
    pub more: usize,
    pub of: usize,
    /// The rule: this many token events to a read, on average, or more.
    pub events_per_read: f64,
    /// The flagged requests' token events over their reads, all together.
    pub mean_events_per_read: f64,
    /// The server's own time between one request's tokens over the window, ms: its mean
    /// running requests over its generated tokens per second (null without both).
    pub server_token_interval_ms: Option<f64>,
    /// Whether TTFT, time between tokens, per-request tok/s and the gaps between
    /// events leave the flagged requests out.
    pub excluded_from_latency: bool,
}

/// A request whose stream the network re-chunked: its token events, the reads they
/// came in and the most of one read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RechunkedRequest {
    pub request_id: i64,
    pub role: String,
    pub token_events: i64,
    pub reads: i64,
    pub largest_read: i64,
    /// From its first to its last token event as recorded, ms (against the server's
    /// pace: token events − 1 steps).
    pub span_ms: Option<f64>,
    /// Its TTFT as recorded (through the network's buffer), ms.
    pub ttft_ms: Option<f64>,
}

/// What one content check found in one cell: the first requests, with evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentFindings {
    /// `script_mix`, `empty_output` or `stop_early`.
    pub check: String,
    pub findings: Vec<ContentFinding>,
    /// Requests found beyond those listed …
    pub more: usize,
    /// … of the requests checked.
    pub of: usize,
}

/// One request a content check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentFinding {
    pub request_id: i64,
    pub role: String,
    /// The channel, for `script_mix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
    /// What was found: `9% of 180 letters Han (limit 5%)`, `0 tokens, finish stop`,
    /// `stop after 12 of 256 tokens`.
    pub detail: String,
    /// The offending text: around the first foreign letter, or the answer's end (empty
    /// for an empty answer).
    pub excerpt: String,
}

/// A request and how much of its prompt the server served from cache: one that
/// prefilled cold inside a decode cell, or one served warm inside a burst or rate cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColdRequest {
    pub request_id: i64,
    pub role: String,
    pub cached_tokens: i64,
    pub prompt_tokens: i64,
    pub ttft_ms: Option<f64>,
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

impl Summary {
    /// No values.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
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
    /// Time to the first reasoning token, ms, of the scored requests that reasoned
    /// (absent when none streamed reasoning) …
    #[serde(default, skip_serializing_if = "Summary::is_empty")]
    pub ttft_reasoning_ms: Summary,
    /// … and to the first content token ("time to first output token"), of those that
    /// streamed content; `ttft_ms` is the rule set's choice of the two (or the first
    /// chunk).
    #[serde(default, skip_serializing_if = "Summary::is_empty")]
    pub ttft_content_ms: Summary,
    /// Reasoning tokens per scored request (the tokens of its events with reasoning
    /// text) …
    #[serde(default, skip_serializing_if = "Summary::is_empty")]
    pub reasoning_tokens: Summary,
    /// … and their share of the scored requests' output tokens (null without output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_share: Option<f64>,
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
    /// Decode: where the token counts behind the figures came from under the rule
    /// set's `tokens.count`: `usage`, `recorded`, or `usage and recorded` (some requests
    /// each way).
    #[serde(default)]
    pub token_source: Option<String>,
    /// Decode: requests whose usage total and recorded total differ.
    #[serde(default)]
    pub token_disagreements: usize,
    /// Decode: the recorder's latest tick inside the window, ms (one hiccup shows here,
    /// not as a warning) …
    #[serde(default)]
    pub client_tick_lateness_max_ms: Option<f64>,
    /// … and the share of the window's ticks later than the rule's `late_tick_ms`.
    #[serde(default)]
    pub client_late_tick_share: Option<f64>,
    /// Decode (closed loop): the most requests sent in one 10 ms slice of the window
    /// (slices counted from its open). Closed-loop streams that finish in one server
    /// step are sent again together; a burst of them waits in the server's socket queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sends_per_10ms_max: Option<i64>,
    /// … and the index of dispersion of requests sent per 10 ms slice (variance over
    /// mean): 1 for Poisson arrivals, above 1 for bursts; null with fewer than two sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_dispersion: Option<f64>,
    /// Decode: the GPUs' mean power draw over the window, watts, all GPUs together
    /// (from their energy counters, else their power samples); null without GPU
    /// telemetry.
    #[serde(default)]
    pub gpu_power_w: Option<f64>,
    /// Decode: output tokens per joule of GPU energy (total tok/s over `gpu_power_w`).
    #[serde(default)]
    pub tokens_per_joule: Option<f64>,
    /// Burst and rate: completed requests per second over the cell's span (window open
    /// to window close).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    /// Rate: the offered rate, requests per second (null for `inf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered_rate: Option<f64>,
    /// Rate: the rate the cell's own schedule offered, requests per second: measured
    /// requests − 1 over the span of their scheduled times (a seeded Poisson schedule
    /// of 1 req/s may offer 0.74); null with fewer than two requests or for `inf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_rate: Option<f64>,
    /// Rate: where the cell stands against its context's capacity: `above` (it offered
    /// more than the capacity: its queue grew with every request) or `within`; null when
    /// no cell of its context saturated the server (so no capacity was found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// Rate: how late each measured request left after its scheduled time
    /// (`sent_ns − scheduled_ns`), ms: the client's lag, and the wait for a place under
    /// `max_concurrency`.
    #[serde(default, skip_serializing_if = "Summary::is_empty")]
    pub schedule_lag_ms: Summary,
    /// Rate: whether the cell met the rule set's SLO (null without one) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_met: Option<bool>,
    /// … and each limit it missed (`p99 ttft 2310 ms > 2000 ms`), or why it could not
    /// be judged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slo_misses: Vec<String>,
    /// Goodput: requests per second over the cell's window that met every limit of the
    /// rule set's SLO on their own (their TTFT, time between tokens and E2E latency), of
    /// those judged (a decode cell's requests that ended inside its window; an open
    /// cell's measured requests); null without an SLO …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// … how many requests did …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_requests: Option<usize>,
    /// … and their share of the requests judged (null with none judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_share: Option<f64>,
    /// Replay: prompt tokens the server said it served from its prefix cache, over the
    /// workload's sent requests that reported it …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<i64>,
    /// … the tokens those requests share with earlier ones in the workload (what a cache
    /// that kept everything could serve) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_cached_tokens: Option<i64>,
    /// … and the prompt tokens of those requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_prompt_tokens: Option<i64>,
    /// Replay: requests of the workload that were not sent (`replay.skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_skipped: Option<usize>,
    /// Speculative decoding over the window, from the engine's counters: accepted over
    /// proposed draft tokens …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_acceptance_rate: Option<f64>,
    /// … the mean acceptance length (1 + accepted tokens per draft step; or the
    /// engine's own acceptance-length gauge, averaged) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_acceptance_length: Option<f64>,
    /// … and the counters' increases behind them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_draft_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted_tokens: Option<i64>,
    /// Output tokens per streamed event inside the window (the client's side of
    /// speculative decoding: above 1 when steps deliver several tokens at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_event: Option<f64>,
    /// Connections: how many the cell's requests opened …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_opened: Option<i64>,
    /// … how many a closed-loop worker opened beyond its first in the cell (the server
    /// closed a kept-alive one; null for open-loop cells) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnects: Option<i64>,
    /// … and how often a request was sent again on a new connection after its reused
    /// one closed before any response byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<i64>,
    /// Content rules: requests each check found (null when the rule set does not make
    /// it): a script foreign to the prompts …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_mix_requests: Option<i64>,
    /// … no output …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_output_requests: Option<i64>,
    /// … a stop before `max_tokens` under `ignore_eos` …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_early_requests: Option<i64>,
    /// … and all findings together (a request found by two checks counts twice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_flags: Option<i64>,
    /// A conversation cell's own figures: by turn, by history length, per session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationFigures>,
    /// Figures this cell cannot give, by name (`spec_acceptance_rate`, ...), with why:
    /// the report shows them as a dash and says why in its notes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<String, String>,
}

/// A conversation cell's figures: how its turns fared by their place in the session and
/// by the history they carried, what the prefix cache served of that history, and the
/// sessions it completed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationFigures {
    /// Sessions that sent a turn in the cell …
    pub sessions_started: usize,
    /// … and those that sent every turn and got every answer inside the window …
    pub sessions_completed: usize,
    /// … per second of the window.
    pub sessions_per_s: Option<f64>,
    /// Completed sessions whose every turn met the rule set's SLO on its own (its TTFT,
    /// time between tokens and E2E latency), per second of the window, and how many;
    /// null without an SLO.
    pub session_goodput: Option<f64>,
    pub sessions_good: Option<usize>,
    /// Of the answered turns from the second on: prompt tokens the server said it served
    /// from its prefix cache (at most each turn's history), over their history tokens
    /// (what a cache that kept every session could serve); null when the server did not
    /// say.
    pub cache_hit_ratio: Option<f64>,
    /// The server's own prefix-cache hit ratio over the window, from its counters (hits
    /// over queried tokens; vLLM's `prefix_cache_hits` and `prefix_cache_queries`); null
    /// where it has none.
    pub server_cache_hit_ratio: Option<f64>,
    /// The KV-cache usage gauge's highest value inside the window (0 to 1).
    pub kv_usage_max: Option<f64>,
    /// TTFT of the answered first turns, and of the answered later turns, ms.
    pub ttft_first_turn_ms: Summary,
    pub ttft_later_turns_ms: Summary,
    /// By turn, from the first.
    pub by_turn: Vec<TurnFigures>,
    /// By the history a turn carried, in bands of doubling width.
    pub by_history: Vec<HistoryFigures>,
}

/// The turns at one place in their sessions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnFigures {
    /// The turn's place, from 1.
    pub turn: i32,
    /// Turns sent at this place, and those answered.
    pub sent: usize,
    pub answered: usize,
    /// Median prompt tokens (the server's count) and history tokens of the answered.
    pub prompt_tokens: Option<f64>,
    pub history_tokens: Option<f64>,
    /// TTFT, ms.
    pub ttft_ms: Summary,
    /// Prompt tokens the server computed (not served from its cache) over TTFT.
    pub prefill_tok_s: Summary,
    /// Cached tokens the server reported (at most each turn's history), over the
    /// turns' history tokens; null when it did not say or there was no history.
    pub cache_hit_ratio: Option<f64>,
}

/// The turns whose history was in one band of tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryFigures {
    /// History tokens from … up to, not including …
    pub from: i64,
    pub to: i64,
    pub answered: usize,
    pub ttft_ms: Summary,
    pub prefill_tok_s: Summary,
    pub cache_hit_ratio: Option<f64>,
}

/// One cell of the matrix, scored (or why not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellScore {
    pub phase: Phase,
    pub context: u32,
    pub concurrency: u32,
    /// A rate cell's offered rate (`"4"`, `"inf"`); absent for other cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// A replay cell's number (`run.replay.sources`); absent for other cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<u32>,
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
        CellKey {
            phase: self.phase,
            context: self.context,
            concurrency: self.concurrency,
            rate: self.rate,
            replay: self.replay,
        }
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
