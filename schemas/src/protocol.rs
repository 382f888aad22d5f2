//! Facts the recorder, the analyzer and the simulator must agree on, each defined once:
//! the engines tokentrace knows and the Prometheus series each exposes, and the
//! recorder's own health series, and the typed details of the events the analyzer
//! decides from (readiness, drain).

/// An inference engine whose metrics tokentrace reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Vllm,
    Sglang,
    LlamaCpp,
    Tgi,
}

/// The series of one engine, by the role the recorder and the rules give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSeries {
    /// Requests running (a gauge).
    pub running: &'static str,
    /// Requests waiting (a gauge).
    pub waiting: &'static str,
    /// Generated tokens so far (a counter).
    pub generated_tokens: &'static str,
    /// Prompt tokens so far (a counter).
    pub prompt_tokens: &'static str,
    /// KV-cache usage, where the engine exposes it.
    pub kv_cache_usage: Option<&'static str>,
    /// Preemptions so far, where the engine exposes them.
    pub preemptions: Option<&'static str>,
    /// Speculative decoding, where the engine counts it: draft steps (one per request
    /// per step that drafted) …
    pub spec_drafts: Option<&'static str>,
    /// … draft tokens proposed …
    pub spec_draft_tokens: Option<&'static str>,
    /// … and draft tokens accepted (all counters) …
    pub spec_accepted_tokens: Option<&'static str>,
    /// … or, where the engine gives no counters, its mean acceptance length (a gauge:
    /// tokens per step, the bonus token included).
    pub spec_accept_length: Option<&'static str>,
    /// The prefix cache's work, where the engine counts it: prompt tokens looked up in
    /// it, and those it held (counters; their increases' ratio is the server's own hit
    /// ratio).
    pub prefix_cache_queries: Option<&'static str>,
    pub prefix_cache_hits: Option<&'static str>,
}

impl Engine {
    /// Every engine, in the order the recorder tries their series.
    pub const ALL: [Engine; 4] = [Engine::Vllm, Engine::Sglang, Engine::LlamaCpp, Engine::Tgi];

    /// The name `manifest.json` → `engine.name` uses.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Tgi => "tgi",
        }
    }

    /// The engine a manifest name stands for.
    pub fn from_name(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == name)
    }

    /// What every one of the engine's metric names starts with (how `/metrics` text
    /// tells the engine when the server does not say).
    pub fn metric_prefix(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm:",
            Engine::Sglang => "sglang:",
            Engine::LlamaCpp => "llamacpp:",
            Engine::Tgi => "tgi_",
        }
    }

    /// The engine's series.
    pub fn series(self) -> EngineSeries {
        match self {
            Engine::Vllm => EngineSeries {
                running: "vllm:num_requests_running",
                waiting: "vllm:num_requests_waiting",
                generated_tokens: "vllm:generation_tokens_total",
                prompt_tokens: "vllm:prompt_tokens_total",
                kv_cache_usage: Some("vllm:kv_cache_usage_perc"),
                preemptions: Some("vllm:num_preemptions_total"),
                spec_drafts: Some("vllm:spec_decode_num_drafts_total"),
                spec_draft_tokens: Some("vllm:spec_decode_num_draft_tokens_total"),
                spec_accepted_tokens: Some("vllm:spec_decode_num_accepted_tokens_total"),
                spec_accept_length: None,
                prefix_cache_queries: Some("vllm:prefix_cache_queries_total"),
                prefix_cache_hits: Some("vllm:prefix_cache_hits_total"),
            },
            Engine::Sglang => EngineSeries {
                running: "sglang:num_running_reqs",
                waiting: "sglang:num_queue_reqs",
                generated_tokens: "sglang:generation_tokens_total",
                prompt_tokens: "sglang:prompt_tokens_total",
                kv_cache_usage: Some("sglang:token_usage"),
                preemptions: None,
                spec_drafts: None,
                spec_draft_tokens: None,
                spec_accepted_tokens: None,
                spec_accept_length: Some("sglang:spec_accept_length"),
                prefix_cache_queries: None,
                prefix_cache_hits: None,
            },
            // No KV-cache or preemption series in llama.cpp's /metrics.
            Engine::LlamaCpp => EngineSeries {
                running: "llamacpp:requests_processing",
                waiting: "llamacpp:requests_deferred",
                generated_tokens: "llamacpp:tokens_predicted_total",
                prompt_tokens: "llamacpp:prompt_tokens_total",
                kv_cache_usage: None,
                preemptions: None,
                spec_drafts: None,
                spec_draft_tokens: None,
                spec_accepted_tokens: None,
                spec_accept_length: None,
                prefix_cache_queries: None,
                prefix_cache_hits: None,
            },
            Engine::Tgi => EngineSeries {
                running: "tgi_batch_current_size",
                waiting: "tgi_queue_size",
                generated_tokens: "tgi_request_generated_tokens",
                prompt_tokens: "tgi_request_input_length",
                kv_cache_usage: None,
                preemptions: None,
                spec_drafts: None,
                spec_draft_tokens: None,
                spec_accepted_tokens: None,
                spec_accept_length: None,
                prefix_cache_queries: None,
                prefix_cache_hits: None,
            },
        }
    }
}

/// The recorder's own lateness series: how late its tick fired, one summary per second.
pub const CLIENT_LAG_METRIC: &str = "tokentrace:client_lag_seconds";
/// The CPU time the recorder's process has used so far (a counter, in seconds).
pub const CLIENT_CPU_METRIC: &str = "tokentrace:process_cpu_seconds_total";

/// The summaries of [`CLIENT_LAG_METRIC`], by its `stat` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagStat {
    Max,
    Mean,
    /// Ticks in the second (a count, not seconds).
    Ticks,
    /// Ticks later than [`LATE_TICK_MS`]`[i]` milliseconds (a count).
    Over(usize),
}

/// The lateness thresholds the recorder counts ticks over, ms: a rule can ask for the
/// share of late ticks at any of them (recorders before issue 14 counted none).
pub const LATE_TICK_MS: [u32; 7] = [1, 2, 5, 10, 20, 50, 100];

impl LagStat {
    /// Every summary the recorder writes each second.
    pub fn all() -> impl Iterator<Item = LagStat> {
        [LagStat::Max, LagStat::Mean, LagStat::Ticks]
            .into_iter()
            .chain((0..LATE_TICK_MS.len()).map(LagStat::Over))
    }

    /// The sample's canonical label text.
    pub fn labels(self) -> String {
        match self {
            LagStat::Max => "stat=\"max\"".to_string(),
            LagStat::Mean => "stat=\"mean\"".to_string(),
            LagStat::Ticks => "stat=\"ticks\"".to_string(),
            LagStat::Over(i) => format!(
                "stat=\"over_{}ms\"",
                LATE_TICK_MS.get(i).copied().unwrap_or(0)
            ),
        }
    }

    /// The summary a label text names.
    pub fn from_labels(labels: &str) -> Option<LagStat> {
        LagStat::all().find(|s| s.labels() == labels)
    }
}

/// How a decode cell's readiness warm-up ended: the `detail` of its `warmup_end` event,
/// written as JSON (`{"readiness":"ready"}`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "readiness", rename_all = "snake_case", deny_unknown_fields)]
pub enum Readiness {
    /// Every stream produced a token.
    Ready,
    /// The warm-up timed out and the window opened anyway (the timeout, when known).
    NotReady { timeout_ns: Option<i64> },
}

/// How a decode cell's drain barrier ended: the `detail` of its `drain_end` event,
/// written as JSON (`{"drain":"timed_out","running":2.0,"waiting":0.0}`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "drain", rename_all = "snake_case", deny_unknown_fields)]
pub enum Drain {
    /// The server reported 0 running and 0 waiting.
    Drained,
    /// The drain timeout passed with requests still running or waiting.
    TimedOut { running: f64, waiting: f64 },
    /// The server has no readable metrics: the recorder waited instead.
    NoMetrics { waited_ns: i64 },
    /// Metrics were read but held no running/waiting gauges (or the scrape failed).
    NotChecked,
}

/// Text written by recorders before the details were typed (tokentrace 0.1 up to issue
/// 12): read here, once, so that no decision elsewhere looks at free text.
mod legacy {
    pub const READY: &str = "ready: every stream produced a token";
    pub const NOT_READY: (&str, &str) = ("not ready after ", ": window opened anyway");
    pub const DRAINED: &str = "drained: 0 running, 0 waiting";
    pub const NO_METRICS: &str = "no metrics: waited 1 s";
    pub const NOT_CHECKED: &str = "running/waiting gauges not found: no drain check";
    pub const TIMED_OUT: (&str, &str, &str) = ("drain timed out with ", " running, ", " waiting");
}

/// Whether a lifecycle event's `detail` is one this reader cannot read: a `warmup_end`
/// or `drain_end` whose detail is neither the JSON form of [`Readiness`] or [`Drain`]
/// nor an older recorder's text. Such an event is read as if it said nothing, so the
/// reader names it (a warning, `check`) rather than let it pass unseen. Other kinds, and
/// events without a detail, are never unreadable.
pub fn unread_detail(kind: crate::tables::EventKind, detail: Option<&str>) -> bool {
    use crate::tables::EventKind;
    match (kind, detail) {
        (EventKind::WarmupEnd, Some(d)) => Readiness::from_detail(d).is_none(),
        (EventKind::DrainEnd, Some(d)) => Drain::from_detail(d).is_none(),
        _ => false,
    }
}

impl Readiness {
    /// The event detail to write.
    pub fn to_detail(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an event detail: the JSON form, or an older recorder's text.
    pub fn from_detail(detail: &str) -> Option<Readiness> {
        if let Ok(r) = serde_json::from_str(detail) {
            return Some(r);
        }
        if detail == legacy::READY {
            return Some(Readiness::Ready);
        }
        let (head, tail) = legacy::NOT_READY;
        detail
            .strip_prefix(head)
            .and_then(|d| d.strip_suffix(tail))
            .map(|_| Readiness::NotReady { timeout_ns: None })
    }
}

impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Readiness::Ready => f.write_str(legacy::READY),
            Readiness::NotReady {
                timeout_ns: Some(t),
            } => write!(
                f,
                "not ready after {} s: window opened anyway",
                *t as f64 / 1e9
            ),
            Readiness::NotReady { timeout_ns: None } => {
                f.write_str("not ready: window opened anyway")
            }
        }
    }
}

impl Drain {
    /// The event detail to write.
    pub fn to_detail(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an event detail: the JSON form, or an older recorder's text.
    pub fn from_detail(detail: &str) -> Option<Drain> {
        if let Ok(d) = serde_json::from_str(detail) {
            return Some(d);
        }
        match detail {
            legacy::DRAINED => return Some(Drain::Drained),
            legacy::NO_METRICS => {
                return Some(Drain::NoMetrics {
                    waited_ns: 1_000_000_000,
                });
            }
            legacy::NOT_CHECKED => return Some(Drain::NotChecked),
            _ => {}
        }
        let (head, mid, tail) = legacy::TIMED_OUT;
        let (running, waiting) = detail
            .strip_prefix(head)?
            .strip_suffix(tail)?
            .split_once(mid)?;
        Some(Drain::TimedOut {
            running: running.parse().ok()?,
            waiting: waiting.parse().ok()?,
        })
    }
}

impl std::fmt::Display for Drain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drain::Drained => f.write_str(legacy::DRAINED),
            Drain::TimedOut { running, waiting } => {
                write!(
                    f,
                    "drain timed out with {running} running, {waiting} waiting"
                )
            }
            Drain::NoMetrics { waited_ns } => {
                write!(f, "no metrics: waited {} s", *waited_ns as f64 / 1e9)
            }
            Drain::NotChecked => f.write_str(legacy::NOT_CHECKED),
        }
    }
}
