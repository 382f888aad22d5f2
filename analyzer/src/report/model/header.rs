//! The report's header, format-free: the title's model and hardware, the subtitle,
//! and the Hardware, Engine and Run facts.

use super::*;

/// The report's header, format-free: what Markdown and HTML both show above the tables.
pub(crate) struct Header {
    /// The model's display name.
    pub model: String,
    pub hardware: String,
    /// Engine, version, the matrix's shape, the prefill contexts, joined by " · ".
    pub subtitle: Vec<String>,
    /// Set when no cell was measured.
    pub nothing_measured: bool,
    /// Hardware, Engine and Run sections with their facts.
    pub sections: Vec<(&'static str, Vec<(String, String)>)>,
    pub launch_command: Option<String>,
}

pub(crate) fn header(s: &Scoring) -> Header {
    let r = &s.run;
    let (hardware, described) = hardware_facts(s);
    Header {
        model: model_display_name(&r.model).to_string(),
        hardware: described.unwrap_or_else(|| "unspecified hardware".to_string()),
        subtitle: subtitle(s),
        nothing_measured: s.cells.iter().all(|c| c.verdict.is_none()),
        sections: vec![
            ("Hardware", hardware),
            ("Engine", engine_facts(s)),
            ("Run", run_facts(s)),
        ],
        launch_command: r.launch_command.clone(),
    }
}

/// A fact of the header: its label and its text.
pub(super) fn fact(k: &str, v: String) -> (String, String) {
    (k.to_string(), v)
}

/// The line under the title: engine and version, the matrix's shape, the burst, rate and
/// replay cells, the prefill contexts.
pub(super) fn subtitle(s: &Scoring) -> Vec<String> {
    let r = &s.run;
    let (contexts, levels) = matrix_axes(s);
    let prefill = prefill_cells(s);
    let engine = r.engine.as_deref().unwrap_or("unknown engine");
    let version = r.engine_version.as_deref().filter(|v| !v.is_empty());
    let mut subtitle: Vec<String> = [Some(engine), version]
        .into_iter()
        .flatten()
        .map(str::to_string)
        .collect();
    let has = |p: Phase| s.cells.iter().any(|c| c.phase == p);
    if !contexts.is_empty() || !(has(Phase::Burst) || has(Phase::Rate) || has(Phase::Replay)) {
        subtitle.push(format!(
            "{} ({}) × {} ({})",
            count_of(contexts.len(), "context", "contexts"),
            range_label(&contexts, context_label),
            count_of(levels.len(), "concurrency level", "concurrency levels"),
            range_label(&levels, |n| n.to_string())
        ));
    }
    if has(Phase::Burst) {
        let n: BTreeSet<u32> = s
            .cells
            .iter()
            .filter(|c| c.phase == Phase::Burst)
            .map(|c| c.concurrency)
            .collect();
        let n: Vec<u32> = n.into_iter().collect();
        subtitle.push(format!(
            "burst of {} requests at {} at once",
            s.run
                .burst_requests
                .map_or_else(|| DASH.to_string(), |v| v.to_string()),
            range_label(&n, |v| v.to_string())
        ));
    }
    if has(Phase::Rate) {
        let rates: BTreeSet<tokentrace_schemas::Rate> =
            s.cells.iter().filter_map(|c| c.rate).collect();
        let rates: Vec<String> = rates.iter().map(|r| r.to_string()).collect();
        subtitle.push(format!("rates {} req/s", rates.join(", ")));
    }
    if let Some(r) = s.run.replay.as_ref().filter(|_| has(Phase::Replay)) {
        subtitle.push(format!(
            "replay of {} ({})",
            count_of(r.sources.len(), "workload", "workloads"),
            r.format
        ));
    }
    if !prefill.is_empty() {
        let at: Vec<String> = prefill.iter().map(|c| context_label(c.context)).collect();
        subtitle.push(format!("prefill at {}", at.join(", ")));
    }
    if let Some(i) = &s.run.imported {
        subtitle.push(tokentrace_score::imported::header(i));
    }
    subtitle
}

/// The Hardware section's facts, and the hardware as described (by the user, else the
/// GPUs the recorder found).
pub(super) fn hardware_facts(s: &Scoring) -> (Vec<(String, String)>, Option<String>) {
    let r = &s.run;
    let found = |k: &str| tokentrace_schemas::manifest::fact(&r.facts, k);
    // "4× NVIDIA H200", from the GPUs the recorder found, when the user gave no text.
    let gpus = found("gpu.name").map(|name| match found("gpu.count") {
        Some(n) if n != "1" => format!("{n}× {name}"),
        _ => name.to_string(),
    });
    let described = r.hardware.clone().or_else(|| gpus.clone());
    let mut hardware = vec![fact(
        "Hardware",
        described
            .clone()
            .unwrap_or_else(|| "not described".to_string()),
    )];
    for (key, label) in HARDWARE_FACTS {
        if let Some(v) = found(key) {
            hardware.push(fact(label, v.to_string()));
        }
    }
    for (k, v) in &r.engine_details {
        if let Some(k) = Described::detail_key(k) {
            hardware.push(fact(k, v.clone()));
        }
    }
    (hardware, described)
}

/// The engine's facts a reader compares runs by, in the order shown: (label, the fact
/// keys that hold it, newest name first). The rest (every label of every `*_info`
/// series, the server's own details) stays in the JSON scoring.
pub(super) const ENGINE_FACTS: [(&str, &[&str]); 15] = [
    ("Build", &["engine.build"]),
    ("Commit", &["engine.commit"]),
    ("dtype", &["engine.dtype"]),
    ("Quantization", &["engine.quantization"]),
    ("KV-cache dtype", &["engine.kv_cache_dtype"]),
    ("Block size", &["engine.block_size"]),
    ("KV-cache tokens", &["engine.kv_cache_tokens"]),
    ("max_model_len", &["engine.max_model_len"]),
    (
        "Prefix caching",
        &["engine.prefix_caching", "engine.enable_prefix_caching"],
    ),
    ("max_num_seqs", &["engine.max_num_seqs"]),
    ("Slots", &["engine.slots"]),
    ("Speculative decoding", &["engine.spec_method"]),
    ("Draft tokens", &["engine.spec_tokens"]),
    ("Tensor parallel", &["engine.tensor_parallel"]),
    ("Pipeline parallel", &["engine.pipeline_parallel"]),
];

/// The Engine section's facts: name, version, then [`ENGINE_FACTS`] where the recorder
/// found them.
pub(super) fn engine_facts(s: &Scoring) -> Vec<(String, String)> {
    let r = &s.run;
    let engine = r.engine.as_deref().unwrap_or("unknown engine");
    let version = r.engine_version.as_deref().filter(|v| !v.is_empty());
    let mut engine_facts = vec![
        fact("Engine", engine.to_string()),
        fact(
            "Version",
            version.unwrap_or("not reported by the server").to_string(),
        ),
    ];
    let found = |k: &str| tokentrace_schemas::manifest::fact(&r.facts, k);
    for (label, keys) in ENGINE_FACTS {
        if let Some(v) = keys.iter().find_map(|k| found(k)) {
            let v = match (label, v) {
                ("Prefix caching", "True") => "on",
                ("Prefix caching", "False") => "off",
                (_, v) => v,
            };
            engine_facts.push(fact(label, v.to_string()));
        }
    }
    engine_facts
}

/// The Run section's facts: the run, the model, the target, the tests and how tokens
/// were counted; with the matrix's settings when the run has matrix cells.
pub(super) fn run_facts(s: &Scoring) -> Vec<(String, String)> {
    let r = &s.run;
    let has = |p: Phase| s.cells.iter().any(|c| c.phase == p);
    let mut run = vec![
        fact("Run", r.run_id.clone()),
        fact("Started", r.started_utc.clone()),
        fact("Served model", r.model.clone()),
        fact("Target", r.target.clone()),
        fact("Endpoint", r.endpoint.to_string()),
        fact("Benchmark tool", r.recorded_by.clone()),
        fact("Decode test", {
            let mut tests = Vec::new();
            if has(Phase::Decode) || has(Phase::Prefill) {
                tests.push("Fixed duration".to_string());
            }
            if has(Phase::Burst) {
                tests.push("Burst / E2E (request count)".to_string());
            }
            if has(Phase::Rate) {
                tests.push("Open-loop request rate".to_string());
            }
            if has(Phase::Replay) {
                tests.push("Replay (open loop)".to_string());
            }
            if tests.is_empty() {
                tests.push("Fixed duration".to_string());
            }
            tests.join(", ")
        }),
    ];
    // The matrix's settings, when the run has matrix cells (prefill and decode).
    if has(Phase::Prefill) || has(Phase::Decode) {
        run.push(fact(
            "Prefill mode",
            if r.prefill_mode == PrefillMode::Warmup {
                "Measured during decode warm-up"
            } else {
                "Cold scout request per context"
            }
            .to_string(),
        ));
        run.push(fact(
            "Time per measurement",
            format!("{} s", fixed(r.window_s, 1)),
        ));
    }
    run.extend([
        fact(
            "Max output",
            format!("{} tokens", thousands(i64::from(r.max_tokens))),
        ),
        fact("ignore_eos", if r.ignore_eos { "yes" } else { "no" }.to_string()),
        fact(
            "Tokens recorded as",
            r.token_counting
                .map_or("unknown", TokenCounting::describe)
                .to_string(),
        ),
        fact(
            "Tokens counted in the figures from",
            match s.rules.tokens.count {
                TokenCount::Usage => {
                    "the server's cumulative usage, where every streamed event carried it; as recorded elsewhere"
                }
                TokenCount::Recorded => "the tokens as recorded",
            }
            .to_string(),
        ),
        fact(
            "Server metrics",
            match r.server_metrics {
                Some(true) => format!("yes ({} names)", s.metrics.name),
                Some(false) => "no (client-side evidence only)".to_string(),
                None => "not probed".to_string(),
            },
        ),
    ]);
    if let Some(i) = &r.imported {
        imported_facts(&mut run, i);
    }
    run
}

/// An imported run's Run section: when the other tool saved the file, and the file
/// (kept in the run folder), instead of what only a recording knows.
pub(super) fn imported_facts(
    run: &mut Vec<(String, String)>,
    i: &tokentrace_schemas::manifest::Imported,
) {
    run.retain(|(k, _)| {
        !matches!(
            k.as_str(),
            "Started"
                | "Tokens recorded as"
                | "Tokens counted in the figures from"
                | "Server metrics"
        )
    });
    run.insert(
        1,
        fact(
            "Saved",
            format!(
                "{} (local time, as {} wrote it{})",
                i.saved_at,
                i.tool,
                if i.complete {
                    ""
                } else {
                    "; the run was interrupted"
                }
            ),
        ),
    );
    run.push(fact(
        "Imported from",
        format!("{} (SHA-256 {}), kept as {}", i.file, i.sha256, i.kept_as),
    ));
}

/// The host and GPU facts of the Hardware section, in order, with their labels.
pub(super) const HARDWARE_FACTS: [(&str, &str); 11] = [
    ("gpu.count", "GPUs"),
    ("gpu.name", "GPU"),
    ("gpu.memory", "GPU memory"),
    ("gpu.driver", "GPU driver"),
    ("gpu.cuda", "CUDA"),
    ("gpu.telemetry", "GPU telemetry"),
    ("host.cpu", "CPU"),
    ("host.cpus", "CPUs"),
    ("host.memory", "Memory"),
    ("host.os", "OS"),
    ("host.kernel", "Kernel"),
];
