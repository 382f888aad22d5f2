//! The engine's facts as the server reports them: vLLM's `/version` and its metrics'
//! `*_info` series, SGLang's `/get_server_info`, TGI's `/info`, llama.cpp's `/props`.
//! Each answer maps to the manifest's `engine.*` keys (FORMAT.md), with its source.

use serde_json::Value;
use tokentrace_schemas::manifest::{Described, Fact};
use tokentrace_schemas::tables::{MetricRow, MetricType};

/// A JSON scalar as text; `None` for null, empty strings, arrays and objects.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() && s != "None" => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Facts from the fields of `obj` named in `map` (JSON pointer, fact key).
fn pick(obj: &Value, map: &[(&str, &str)], source: &str) -> Vec<Fact> {
    map.iter()
        .filter_map(|(pointer, key)| {
            obj.pointer(pointer)
                .and_then(scalar)
                .map(|v| Fact::new(*key, v, source))
        })
        .collect()
}

/// `GET /version` (vLLM: `{"version": …}`; the simulator adds its build).
pub fn from_version(v: &Value) -> Vec<Fact> {
    pick(
        v,
        &[
            ("/version", "engine.version"),
            ("/build", "engine.build"),
            ("/commit", "engine.commit"),
        ],
        "GET /version",
    )
}

/// SGLang's `GET /get_server_info`: its server arguments and version.
pub fn from_sglang(v: &Value) -> Vec<Fact> {
    pick(
        v,
        &[
            ("/version", "engine.version"),
            ("/quantization", "engine.quantization"),
            ("/dtype", "engine.dtype"),
            ("/kv_cache_dtype", "engine.kv_cache_dtype"),
            ("/context_length", "engine.max_model_len"),
            ("/tp_size", "engine.tensor_parallel"),
            ("/pp_size", "engine.pipeline_parallel"),
            ("/dp_size", "engine.data_parallel"),
            ("/model_path", "engine.model_path"),
            ("/max_total_num_tokens", "engine.kv_cache_tokens"),
        ],
        "GET /get_server_info",
    )
}

/// TGI's `GET /info`.
pub fn from_tgi(v: &Value) -> Vec<Fact> {
    pick(
        v,
        &[
            ("/version", "engine.version"),
            ("/sha", "engine.commit"),
            ("/docker_label", "engine.build"),
            ("/model_dtype", "engine.dtype"),
            ("/max_total_tokens", "engine.max_model_len"),
            ("/model_id", "engine.model_path"),
        ],
        "GET /info",
    )
}

/// llama.cpp's `GET /props`.
pub fn from_llamacpp(v: &Value) -> Vec<Fact> {
    pick(
        v,
        &[
            ("/build_info", "engine.build"),
            ("/model_ftype", "engine.quantization"),
            ("/model_path", "engine.model_path"),
            ("/total_slots", "engine.slots"),
            ("/default_generation_settings/n_ctx", "engine.max_model_len"),
        ],
        "GET /props",
    )
}

/// The labels of the metrics' `*_info` gauges (value 1 by convention), e.g. vLLM's
/// `vllm:cache_config_info{block_size="16",cache_dtype="auto",…}`: each label becomes
/// `engine.<label>`, a few under the manifest's common names.
pub fn from_info_series(rows: &[MetricRow]) -> Vec<Fact> {
    let mut out = Vec::new();
    // `python_info` (Python's own version, exported by every prometheus_client server)
    // describes the interpreter, not the engine.
    for r in rows.iter().filter(|r| {
        r.family.ends_with("_info")
            && r.family != "python_info"
            && matches!(r.metric_type, MetricType::Gauge | MetricType::Untyped)
    }) {
        // Newer vLLM also exports its whole configuration as one series,
        // `vllm:vllm_config_info{cache_config_cache_dtype=…,model_config_quantization=…,
        // parallel_config_tensor_parallel_size=…}` (hundreds of labels, some of them long
        // dumps): only the labels with a common name are taken from it.
        let whole_config = r.family.ends_with("vllm_config_info");
        for (label, value) in split_labels(&r.labels) {
            if value.is_empty() || value == "None" || value.chars().count() > MAX_FACT_CHARS {
                continue;
            }
            let bare = [
                "cache_config_",
                "model_config_",
                "parallel_config_",
                "scheduler_config_",
                "speculative_config_",
            ]
            .iter()
            .find_map(|p| label.strip_prefix(p))
            .unwrap_or(&label);
            let common = match bare {
                "cache_dtype" | "kv_cache_dtype" => Some("engine.kv_cache_dtype"),
                "quantization" => Some("engine.quantization"),
                "dtype" => Some("engine.dtype"),
                "max_model_len" => Some("engine.max_model_len"),
                "tensor_parallel_size" => Some("engine.tensor_parallel"),
                "pipeline_parallel_size" => Some("engine.pipeline_parallel"),
                "data_parallel_size" => Some("engine.data_parallel"),
                "version" => Some("engine.version"),
                "num_gpu_blocks" => Some("engine.num_gpu_blocks"),
                "block_size" => Some("engine.block_size"),
                "kv_cache_size_tokens" => Some("engine.kv_cache_tokens"),
                "enable_prefix_caching" => Some("engine.prefix_caching"),
                "max_num_seqs" => Some("engine.max_num_seqs"),
                "max_num_batched_tokens" => Some("engine.max_num_batched_tokens"),
                "num_speculative_tokens" => Some("engine.spec_tokens"),
                "method" if label.starts_with("speculative_config") => Some("engine.spec_method"),
                _ => None,
            };
            let key = match common {
                Some(k) => k.to_string(),
                None if whole_config => continue,
                None => format!("engine.{label}"),
            };
            out.push(Fact::new(key, value, format!("metrics {}", r.family)));
        }
    }
    out
}

/// Longest fact value taken from a metrics label (longer ones are configuration dumps).
const MAX_FACT_CHARS: usize = 200;

/// Canonical label text (`k="v",…`, Prometheus escaping) back into pairs.
fn split_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(e) => value.push(e),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key.trim().to_string(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    out
}

/// Keeps the first fact of each key (sources are given in order of trust) and sorts
/// by key.
pub fn merge(facts: impl IntoIterator<Item = Fact>) -> Vec<Fact> {
    let mut out: Vec<Fact> = Vec::new();
    for f in facts {
        if !out.iter().any(|o| o.key == f.key) {
            out.push(f);
        }
    }
    out.sort();
    out
}

/// The engine's KV-cache budget in tokens, `engine.kv_cache_tokens`, when the facts hold
/// it or its parts: SGLang says it (`max_total_num_tokens`); vLLM's cache config gives
/// `num_gpu_blocks` × `block_size`; llama.cpp's `/props` gives its slots × each slot's
/// context. `None` when it is already there or cannot be known.
pub fn kv_budget(facts: &[Fact]) -> Option<Fact> {
    let get = |key: &str| facts.iter().find(|f| f.key == key);
    if get("engine.kv_cache_tokens").is_some() {
        return None;
    }
    let num = |f: &Fact| f.value.trim().parse::<u64>().ok().filter(|n| *n > 0);
    if let (Some(blocks), Some(size)) = (get("engine.num_gpu_blocks"), get("engine.block_size"))
        && let (Some(b), Some(s)) = (num(blocks), num(size))
    {
        return Some(Fact::new(
            "engine.kv_cache_tokens",
            b.saturating_mul(s).to_string(),
            format!("{}: num_gpu_blocks × block_size", blocks.source),
        ));
    }
    if let (Some(slots), Some(ctx)) = (get("engine.slots"), get("engine.max_model_len"))
        && slots.source == "GET /props"
        && ctx.source == "GET /props"
        && let (Some(n), Some(c)) = (num(slots), num(ctx))
    {
        return Some(Fact::new(
            "engine.kv_cache_tokens",
            n.saturating_mul(c).to_string(),
            "GET /props: total_slots × n_ctx of a slot",
        ));
    }
    None
}

/// `--describe key=value` pairs whose home is a fact ([`Described::Fact`]) replace the
/// facts of the same key (source `--describe`); the others have homes of their own.
pub fn apply_describe(facts: Vec<Fact>, describe: &[(String, String)]) -> Vec<Fact> {
    let given: Vec<Fact> = describe
        .iter()
        .filter(|(k, _)| Described::of(k) == Described::Fact)
        .map(|(k, v)| Fact::new(k.clone(), v.clone(), "--describe"))
        .collect();
    merge(given.into_iter().chain(facts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get<'a>(facts: &'a [Fact], key: &str) -> Option<(&'a str, &'a str)> {
        facts
            .iter()
            .find(|f| f.key == key)
            .map(|f| (f.value.as_str(), f.source.as_str()))
    }

    #[test]
    fn each_engines_answer_maps_to_the_common_keys() {
        let sg = from_sglang(&json!({
            "version": "0.5.4", "tp_size": 4, "dp_size": 1, "quantization": null,
            "kv_cache_dtype": "fp8_e5m2", "context_length": 131072, "model_path": "/m"
        }));
        assert_eq!(
            get(&sg, "engine.version"),
            Some(("0.5.4", "GET /get_server_info"))
        );
        assert_eq!(
            get(&sg, "engine.tensor_parallel"),
            Some(("4", "GET /get_server_info"))
        );
        assert_eq!(get(&sg, "engine.quantization"), None, "null is no fact");
        assert_eq!(
            get(&sg, "engine.max_model_len").map(|f| f.0),
            Some("131072")
        );
        let tgi = from_tgi(
            &json!({"version": "3.3.6", "sha": "abc123", "model_dtype": "torch.bfloat16", "max_total_tokens": 8192}),
        );
        assert_eq!(get(&tgi, "engine.commit"), Some(("abc123", "GET /info")));
        let ll = from_llamacpp(
            &json!({"build_info": "b6123-ae5c1ab", "model_ftype": "Q4_1", "total_slots": 3, "default_generation_settings": {"n_ctx": 2730}}),
        );
        assert_eq!(
            get(&ll, "engine.quantization"),
            Some(("Q4_1", "GET /props"))
        );
        assert_eq!(
            get(&ll, "engine.build"),
            Some(("b6123-ae5c1ab", "GET /props"))
        );
        assert_eq!(get(&ll, "engine.max_model_len").map(|f| f.0), Some("2730"));
        assert_eq!(
            get(
                &from_version(&json!({"version": "0.11.2"})),
                "engine.version"
            ),
            Some(("0.11.2", "GET /version"))
        );
    }

    #[test]
    fn info_series_labels_become_facts() {
        let rows = crate::observe::scrape::parse_exposition(
            "# TYPE vllm:cache_config_info gauge\n\
             vllm:cache_config_info{block_size=\"16\",cache_dtype=\"fp8\",enable_prefix_caching=\"True\",quantization=\"None\",model=\"a\\\"b\"} 1.0\n\
             # TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"x\"} 3\n",
            0,
            0,
        )
        .expect("parse");
        let f = from_info_series(&rows);
        assert_eq!(
            get(&f, "engine.kv_cache_dtype"),
            Some(("fp8", "metrics vllm:cache_config_info"))
        );
        assert_eq!(get(&f, "engine.block_size").map(|f| f.0), Some("16"));
        // Without num_gpu_blocks the budget is unknown.
        assert_eq!(kv_budget(&f), None);
        assert_eq!(get(&f, "engine.prefix_caching").map(|f| f.0), Some("True"));
        assert_eq!(
            get(&f, "engine.model").map(|f| f.0),
            Some("a\"b"),
            "escapes undone"
        );
        assert_eq!(get(&f, "engine.quantization"), None, "\"None\" is no fact");
        assert!(
            f.iter().all(|f| f.key != "engine.model_name"),
            "only *_info series"
        );
    }

    #[test]
    fn vllms_whole_config_series_gives_only_the_common_facts() {
        let dump = "x".repeat(500);
        let rows = crate::observe::scrape::parse_exposition(
            &format!(
                "# TYPE vllm:vllm_config_info gauge\n\
                 vllm:vllm_config_info{{cache_config_cache_dtype=\"fp8\",model_config_quantization=\"modelopt_fp4\",\
                 parallel_config_tensor_parallel_size=\"4\",parallel_config_data_parallel_size=\"1\",\
                 attention_config=\"{dump}\",cache_config_block_size=\"8576\",\
                 scheduler_config_policy=\"fcfs\",scheduler_config_max_num_seqs=\"256\",\
                 cache_config_enable_prefix_caching=\"True\",\
                 speculative_config_method=\"mtp\",speculative_config_num_speculative_tokens=\"3\"}} 1.0\n\
                 # TYPE python_info gauge\n\
                 python_info{{implementation=\"CPython\",major=\"3\"}} 1.0\n"
            ),
            0,
            0,
        )
        .expect("parse");
        let f = from_info_series(&rows);
        assert_eq!(get(&f, "engine.kv_cache_dtype").map(|f| f.0), Some("fp8"));
        assert_eq!(
            get(&f, "engine.quantization").map(|f| f.0),
            Some("modelopt_fp4")
        );
        assert_eq!(get(&f, "engine.tensor_parallel").map(|f| f.0), Some("4"));
        assert_eq!(get(&f, "engine.data_parallel").map(|f| f.0), Some("1"));
        // The block size is a part of the KV budget.
        assert_eq!(get(&f, "engine.block_size").map(|f| f.0), Some("8576"));
        assert_eq!(get(&f, "engine.max_num_seqs").map(|f| f.0), Some("256"));
        assert_eq!(get(&f, "engine.prefix_caching").map(|f| f.0), Some("True"));
        assert_eq!(get(&f, "engine.spec_method").map(|f| f.0), Some("mtp"));
        assert_eq!(get(&f, "engine.spec_tokens").map(|f| f.0), Some("3"));
        // Python's own version is no engine fact.
        assert_eq!(get(&f, "engine.implementation"), None);
        assert_eq!(
            f.len(),
            9,
            "nothing else from the whole-config series: {f:?}"
        );
    }

    #[test]
    fn first_source_wins_and_describe_overrides() {
        let merged = merge([
            Fact::new("engine.version", "1", "GET /version"),
            Fact::new("engine.version", "2", "metrics x_info"),
            Fact::new("engine.build", "b", "GET /props"),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(get(&merged, "engine.version").map(|f| f.0), Some("1"));
        assert_eq!(merged[0].key, "engine.build", "sorted by key");
        let described = apply_describe(
            merged,
            &[
                ("engine.version".into(), "9".into()),
                ("hardware".into(), "x".into()),
            ],
        );
        assert_eq!(get(&described, "engine.version"), Some(("9", "--describe")));
        assert!(described.iter().all(|f| f.key != "hardware"));
    }

    #[test]
    fn the_kv_budget_from_each_engine() {
        let vllm = crate::observe::scrape::parse_exposition(
            "# TYPE vllm:cache_config_info gauge
             vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2187\"} 1.0
",
            0,
            0,
        )
        .expect("parse");
        let kv = kv_budget(&from_info_series(&vllm)).expect("vLLM budget");
        assert_eq!(
            (kv.key.as_str(), kv.value.as_str(), kv.source.as_str()),
            (
                "engine.kv_cache_tokens",
                "34992",
                "metrics vllm:cache_config_info: num_gpu_blocks × block_size"
            )
        );
        let ll = from_llamacpp(
            &json!({"total_slots": 3, "default_generation_settings": {"n_ctx": 2730}}),
        );
        assert_eq!(kv_budget(&ll).map(|f| f.value), Some("8190".to_string()));
        let sg = from_sglang(&json!({"max_total_num_tokens": 123456, "context_length": 4096}));
        assert_eq!(
            get(&sg, "engine.kv_cache_tokens"),
            Some(("123456", "GET /get_server_info"))
        );
        assert_eq!(kv_budget(&sg), None, "already there");
        // Slots from another source than /props are not llama.cpp's.
        let other = vec![
            Fact::new("engine.slots", "4", "--describe"),
            Fact::new("engine.max_model_len", "4096", "GET /v1/models"),
        ];
        assert_eq!(kv_budget(&other), None);
    }
}
