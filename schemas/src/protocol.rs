//! Facts the recorder, the analyzer and the simulator must agree on, each defined once:
//! the engines tokentrace knows and the Prometheus series each exposes, and the
//! recorder's own health series. (Typed event details are to come here too: issue 12.)

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
            },
            Engine::Sglang => EngineSeries {
                running: "sglang:num_running_reqs",
                waiting: "sglang:num_queue_reqs",
                generated_tokens: "sglang:generation_tokens_total",
                prompt_tokens: "sglang:prompt_tokens_total",
                kv_cache_usage: Some("sglang:token_usage"),
                preemptions: None,
            },
            // No KV-cache or preemption series in llama.cpp's /metrics.
            Engine::LlamaCpp => EngineSeries {
                running: "llamacpp:requests_processing",
                waiting: "llamacpp:requests_deferred",
                generated_tokens: "llamacpp:tokens_predicted_total",
                prompt_tokens: "llamacpp:prompt_tokens_total",
                kv_cache_usage: None,
                preemptions: None,
            },
            Engine::Tgi => EngineSeries {
                running: "tgi_batch_current_size",
                waiting: "tgi_queue_size",
                generated_tokens: "tgi_request_generated_tokens",
                prompt_tokens: "tgi_request_input_length",
                kv_cache_usage: None,
                preemptions: None,
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
}

impl LagStat {
    /// The sample's canonical label text.
    pub fn labels(self) -> &'static str {
        match self {
            LagStat::Max => "stat=\"max\"",
            LagStat::Mean => "stat=\"mean\"",
        }
    }
}
