//! Engine presets: which Prometheus series of each engine plays each role the rules need
//! (requests running, requests waiting, generated and prompt tokens, KV-cache usage,
//! preemptions). Chosen from the manifest's engine name; a rule set may override any.

use serde::{Deserialize, Serialize};

use crate::rules::MetricRules;

/// Metric names by role; `None` where the engine has no such series.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The preset's name (`vllm`, ..., `none`).
    pub name: String,
    pub running: Option<String>,
    pub waiting: Option<String>,
    pub generated_tokens: Option<String>,
    pub prompt_tokens: Option<String>,
    pub kv_cache_usage: Option<String>,
    pub preemptions: Option<String>,
}

fn names(name: &str, series: [Option<&str>; 6]) -> Preset {
    let s = |i: usize| series[i].map(str::to_string);
    Preset {
        name: name.to_string(),
        running: s(0),
        waiting: s(1),
        generated_tokens: s(2),
        prompt_tokens: s(3),
        kv_cache_usage: s(4),
        preemptions: s(5),
    }
}

/// The built-in preset of an engine name as the manifest spells it.
pub fn builtin(engine: &str) -> Option<Preset> {
    Some(match engine {
        // The simulator exposes vLLM's names.
        "vllm" | "tokentrace-sim" | "synthetic" => names(
            "vllm",
            [
                Some("vllm:num_requests_running"),
                Some("vllm:num_requests_waiting"),
                Some("vllm:generation_tokens_total"),
                Some("vllm:prompt_tokens_total"),
                Some("vllm:kv_cache_usage_perc"),
                Some("vllm:num_preemptions_total"),
            ],
        ),
        "sglang" => names(
            "sglang",
            [
                Some("sglang:num_running_reqs"),
                Some("sglang:num_queue_reqs"),
                Some("sglang:generation_tokens_total"),
                Some("sglang:prompt_tokens_total"),
                Some("sglang:token_usage"),
                None,
            ],
        ),
        "tgi" => names(
            "tgi",
            [
                Some("tgi_batch_current_size"),
                Some("tgi_queue_size"),
                Some("tgi_request_generated_tokens"),
                Some("tgi_request_input_length"),
                None,
                None,
            ],
        ),
        "llama.cpp" => names(
            "llama.cpp",
            [
                Some("llamacpp:requests_processing"),
                Some("llamacpp:requests_deferred"),
                Some("llamacpp:tokens_predicted_total"),
                Some("llamacpp:prompt_tokens_total"),
                // No KV-cache or preemption series in llama.cpp's /metrics.
                None,
                None,
            ],
        ),
        "none" => names("none", [None; 6]),
        _ => return None,
    })
}

impl Preset {
    /// The preset the rules ask for, given the manifest's engine name (for `auto`).
    /// An unknown engine under `auto` falls back to vLLM's names, the de-facto standard
    /// that other OpenAI-compatible servers copy.
    pub fn for_rules(rules: &MetricRules, engine: Option<&str>) -> Result<Preset, String> {
        let mut p = match rules.preset.as_str() {
            "auto" => engine
                .and_then(builtin)
                .or_else(|| builtin("vllm"))
                .unwrap_or_default(),
            other => builtin(other).ok_or_else(|| {
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
        over(&mut p.running, &rules.running);
        over(&mut p.waiting, &rules.waiting);
        over(&mut p.generated_tokens, &rules.generated_tokens);
        over(&mut p.prompt_tokens, &rules.prompt_tokens);
        over(&mut p.kv_cache_usage, &rules.kv_cache_usage);
        over(&mut p.preemptions, &rules.preemptions);
        Ok(p)
    }

    /// Every series name the preset uses.
    pub fn series(&self) -> Vec<String> {
        [
            &self.running,
            &self.waiting,
            &self.generated_tokens,
            &self.prompt_tokens,
            &self.kv_cache_usage,
            &self.preemptions,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }
}
