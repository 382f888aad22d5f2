//! Engine presets: which Prometheus series of each engine plays each role the rules need
//! (requests running, requests waiting, generated and prompt tokens, KV-cache usage,
//! preemptions, speculative decoding). Chosen from the manifest's engine name; a rule set may override any
//! (`rules::MetricRules::preset`).

use serde::{Deserialize, Serialize};

use tokentrace_schemas::protocol::Engine;

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
    /// Speculative decoding: draft steps, draft tokens and accepted tokens (counters) …
    #[serde(default)]
    pub spec_drafts: Option<String>,
    #[serde(default)]
    pub spec_draft_tokens: Option<String>,
    #[serde(default)]
    pub spec_accepted_tokens: Option<String>,
    /// … or the mean acceptance length (a gauge) where the engine gives no counters.
    #[serde(default)]
    pub spec_accept_length: Option<String>,
}

fn preset(engine: Engine) -> Preset {
    let s = engine.series();
    let own = |v: &str| Some(v.to_string());
    Preset {
        name: engine.name().to_string(),
        running: own(s.running),
        waiting: own(s.waiting),
        generated_tokens: own(s.generated_tokens),
        prompt_tokens: own(s.prompt_tokens),
        kv_cache_usage: s.kv_cache_usage.map(str::to_string),
        preemptions: s.preemptions.map(str::to_string),
        spec_drafts: s.spec_drafts.map(str::to_string),
        spec_draft_tokens: s.spec_draft_tokens.map(str::to_string),
        spec_accepted_tokens: s.spec_accepted_tokens.map(str::to_string),
        spec_accept_length: s.spec_accept_length.map(str::to_string),
    }
}

/// The built-in preset of an engine name as the manifest spells it.
pub fn builtin(engine: &str) -> Option<Preset> {
    match engine {
        // The simulator exposes vLLM's names.
        "tokentrace-sim" => Some(preset(Engine::Vllm)),
        "none" => Some(Preset {
            name: "none".to_string(),
            ..Preset::default()
        }),
        other => Engine::from_name(other).map(preset),
    }
}

impl Preset {
    /// The prefix-cache counters (prompt tokens looked up, tokens the cache held) of the
    /// engine the preset is named after, where it counts them.
    pub fn prefix_cache(&self) -> (Option<&'static str>, Option<&'static str>) {
        Engine::from_name(&self.name).map_or((None, None), |e| {
            let s = e.series();
            (s.prefix_cache_queries, s.prefix_cache_hits)
        })
    }

    /// Every series name the preset uses, and its engine's prefix-cache counters.
    pub fn series(&self) -> Vec<String> {
        let (queries, hits) = self.prefix_cache();
        [
            &self.running,
            &self.waiting,
            &self.generated_tokens,
            &self.prompt_tokens,
            &self.kv_cache_usage,
            &self.preemptions,
            &self.spec_drafts,
            &self.spec_draft_tokens,
            &self.spec_accepted_tokens,
            &self.spec_accept_length,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .chain([queries, hits].into_iter().flatten().map(str::to_string))
        .collect()
    }
}
