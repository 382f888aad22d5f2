//! The report's sections, format-free: the header's facts, the matrix's cells and legend,
//! the Burst / E2E, Request rate and Replay tables, All measurements, GPU power and the
//! notes, each as text in the reference report's number formats, for the Markdown and
//! HTML writers to lay out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{Phase, Rate};
use tokentrace_schemas::manifest::{Described, PrefillMode, TokenCounting};

use crate::contract::{
    CAPACITY_ABOVE, CellScore, ColdRequest, Evidence, Figures, LoopEvidence, RechunkEvidence,
    Scoring, Verdict, Warning,
};
use crate::figures::{Column, FIGURES, Figure};
use crate::numbers::{context_label, fixed, ms_whole, rate, thousands};
use crate::rules::TokenCount;

pub(crate) use crate::figures::{DASH, matrix_text, opt, shown};

fn dash() -> String {
    DASH.to_string()
}

/// The model's name for titles: the file name when the served id is a file path (as
/// llama.cpp serves a GGUF), else the id (`org/name` ids are names, not paths).
pub fn model_display_name(id: &str) -> &str {
    let path_like = id.starts_with('/')
        || id.starts_with("./")
        || id.starts_with("~/")
        || id.contains('\\')
        || [".gguf", ".bin", ".safetensors"]
            .iter()
            .any(|ext| id.to_ascii_lowercase().ends_with(ext));
    if path_like {
        id.rsplit(['/', '\\']).find(|s| !s.is_empty()).unwrap_or(id)
    } else {
        id
    }
}

/// "1 context", "3 contexts".
fn count_of(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn range_label(values: &[u32], label: impl Fn(u32) -> String) -> String {
    match (values.first(), values.last()) {
        (Some(a), Some(b)) if a != b => format!("{}–{}", label(*a), label(*b)),
        (Some(a), _) => label(*a),
        _ => DASH.to_string(),
    }
}

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

/// The prefill cells, in the scoring's order.
pub(crate) fn prefill_cells(s: &Scoring) -> Vec<&CellScore> {
    s.cells
        .iter()
        .filter(|c| c.phase == Phase::Prefill)
        .collect()
}

/// The decode matrix's axes: contexts (rows) and concurrency levels (columns).
pub(crate) fn matrix_axes(s: &Scoring) -> (Vec<u32>, Vec<u32>) {
    let decode = || s.cells.iter().filter(|c| c.phase == Phase::Decode);
    let contexts: BTreeSet<u32> = decode().map(|c| c.context).collect();
    let levels: BTreeSet<u32> = decode().map(|c| c.concurrency).collect();
    (contexts.into_iter().collect(), levels.into_iter().collect())
}

/// The line under the Request rate heading: how arrivals were made and what the knee is.
pub(crate) fn rate_intro(s: &Scoring) -> String {
    let Some(r) = &s.run.rate else {
        return "open-loop arrivals · latency against offered load".to_string();
    };
    let duration = r.duration_ns.map(|d| d as f64 / 1e9);
    format!(
        "open-loop {} arrivals (seed {}{}), each cell {} · latency against offered load; the knee is the highest rate whose cell, and every lower one, meets the SLO{} within the server's capacity (where completed requests level off, a higher offered rate only grows a queue, and its latencies measure the cell's length)",
        r.arrival.as_str(),
        r.seed,
        r.max_concurrency
            .map(|m| format!(", at most {m} in flight"))
            .unwrap_or_default(),
        match (r.requests, duration) {
            (Some(n), Some(d)) =>
                format!("{n} requests or {} s, whichever ends first", fixed(d, 1)),
            (Some(n), None) => format!("{n} requests"),
            (None, Some(d)) => format!("{} s of arrivals", fixed(d, 1)),
            (None, None) => "of unknown length".to_string(),
        },
        if s.rules.slo.is_set() {
            format!(" ({})", s.rules.slo.describe())
        } else {
            String::new()
        }
    )
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
fn fact(k: &str, v: String) -> (String, String) {
    (k.to_string(), v)
}

/// The line under the title: engine and version, the matrix's shape, the burst, rate and
/// replay cells, the prefill contexts.
fn subtitle(s: &Scoring) -> Vec<String> {
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
fn hardware_facts(s: &Scoring) -> (Vec<(String, String)>, Option<String>) {
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
const ENGINE_FACTS: [(&str, &[&str]); 15] = [
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
fn engine_facts(s: &Scoring) -> Vec<(String, String)> {
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
fn run_facts(s: &Scoring) -> Vec<(String, String)> {
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
fn imported_facts(run: &mut Vec<(String, String)>, i: &tokentrace_schemas::manifest::Imported) {
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
const HARDWARE_FACTS: [(&str, &str); 11] = [
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

/// The GPU power matrix, format-free: per context, per concurrency level, the GPUs'
/// mean draw over the window and output tokens per joule ("2,600 W · 1.17 tok/J"); or,
/// when the run has no GPU telemetry, the line that says so and why.
pub(crate) fn power_rows(s: &Scoring) -> Result<Vec<(u32, Vec<String>)>, String> {
    if !s.run.gpu_telemetry {
        let why = tokentrace_schemas::manifest::fact(&s.run.facts, "gpu.telemetry")
            .and_then(|v| v.strip_prefix("none: "))
            .map_or_else(
                || "the recorder did not sample GPUs in this run".to_string(),
                |w| format!("the recorder had none ({w})"),
            );
        return Err(format!(
            "No GPU telemetry: {why}, so there are no power or tokens-per-joule figures."
        ));
    }
    let (contexts, levels) = matrix_axes(s);
    Ok(contexts
        .iter()
        .map(|ctx| {
            let cells = levels
                .iter()
                .map(|n| {
                    let f = decode_cell(s, *ctx, *n).and_then(shown);
                    match (
                        f.and_then(|f| f.gpu_power_w),
                        f.and_then(|f| f.tokens_per_joule),
                    ) {
                        (Some(w), Some(t)) => {
                            format!("{} W · {} tok/J", thousands(w.round() as i64), fixed(t, 2))
                        }
                        (Some(w), None) => format!("{} W", thousands(w.round() as i64)),
                        _ => DASH.to_string(),
                    }
                })
                .collect();
            (*ctx, cells)
        })
        .collect())
}

/// The heading line of the GPU power section.
pub(crate) const POWER_INTRO: &str =
    "mean GPU power over each window, all GPUs together · output tokens per joule of GPU energy";

/// The decode cell at (`context`, `concurrency`), if the run has it.
pub(crate) fn decode_cell(s: &Scoring, context: u32, concurrency: u32) -> Option<&CellScore> {
    s.cells
        .iter()
        .find(|c| c.phase == Phase::Decode && c.context == context && c.concurrency == concurrency)
}

/// A matrix cell's parts when it shows figures: total tok/s, the verdict's label when
/// not Valid, and "N ms TTFT".
pub(crate) fn matrix_parts(c: &CellScore) -> Option<(String, Option<&'static str>, String)> {
    crate::figures::matrix_parts(c).map(|(rate, v, ttft)| (rate, v.map(Verdict::label), ttft))
}

/// The lines under the decode matrix: the legend of the verdicts it shows, and what its
/// TTFT means.
pub(crate) fn matrix_footer(s: &Scoring) -> Vec<String> {
    let present = |v: Verdict| {
        s.cells
            .iter()
            .any(|c| c.phase == Phase::Decode && c.verdict == Some(v))
    };
    let legend: Vec<&str> = LEGEND
        .iter()
        .filter(|(v, _)| present(*v))
        .map(|(_, text)| *text)
        .collect();
    let mut footer: Vec<String> = Vec::new();
    if !legend.is_empty() {
        footer.push(legend.join(" "));
    }
    if s.cells.iter().any(|c| c.phase == Phase::Prefill) {
        footer.push(
            if s.run.prefill_mode == PrefillMode::Warmup {
                "TTFT is measured after the warm-up filled the server's prompt cache, so it mostly excludes prefill."
            } else {
                "TTFT is measured after the prefill scout warmed the server's prompt cache, so it mostly excludes prefill."
            }
            .to_string(),
        );
    }
    footer
}

/// What each verdict of the matrix means, for the legend.
pub(crate) const LEGEND: [(Verdict, &str); 4] = [
    (
        Verdict::RequestsQueued,
        "Requests queued: the server could not run all requests at once, so some waited in a queue.",
    ),
    (
        Verdict::Looped,
        "Looped: the model kept repeating the same text, so this measurement was discarded.",
    ),
    (
        Verdict::BadOutput,
        "Bad output: answers broke a content rule (a foreign script, empty, stopped early), so this measurement was discarded.",
    ),
    (
        Verdict::Error,
        "Error: a stream failed or disconnected inside the window, so this measurement was discarded.",
    ),
];

/// The "All measurements" table: its headers, and per cell each column's text with the
/// number it shows (for sorting), in the scoring's cell order.
pub(crate) type Row = Vec<(String, Option<f64>)>;

pub(crate) fn measurements(s: &Scoring) -> (Vec<String>, Vec<Row>) {
    let columns: Vec<(&Figure, Column)> = FIGURES
        .iter()
        .filter_map(|f| f.column.map(|c| (f, c)))
        .collect();
    let mut headers: Vec<String> = ["Phase", "Context", "Requests at once", "Status"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    headers.extend(columns.iter().map(|(_, c)| c.header.to_string()));
    let rows = s
        .cells
        .iter()
        .map(|c| {
            let f = shown(c);
            let mut row: Row = vec![
                (phase_label(c), None),
                (context_label(c.context), Some(f64::from(c.context))),
                // A rate or replay cell's requests at once vary: its cap is in the run's
                // settings.
                if matches!(c.phase, Phase::Rate | Phase::Replay) {
                    (DASH.to_string(), None)
                } else {
                    (c.concurrency.to_string(), Some(f64::from(c.concurrency)))
                },
                (c.status_label(), None),
            ];
            row.extend(columns.iter().map(|(figure, column)| {
                let value = f
                    .filter(|_| column.phases.contains(&c.phase))
                    .map(|f| figure.value(f));
                (
                    value
                        .as_ref()
                        .and_then(|v| v.show(column.show))
                        .unwrap_or_else(|| DASH.to_string()),
                    value.and_then(|v| v.number()),
                )
            }));
            row
        })
        .collect();
    (headers, rows)
}

/// Every note line of the report, cell by cell, then the figures some cells could not
/// give and why.
pub(crate) fn notes(s: &Scoring) -> Vec<String> {
    let mut out: Vec<String> = s.cells.iter().flat_map(cell_notes).collect();
    out.extend(unavailable_notes(s));
    if s.run.cached_tokens_missing {
        out.push(cached_tokens_note(s.run.engine.as_deref()));
    }
    if s.run.checksums_skipped {
        out.push(
            "Checksums not verified (--no-verify): each cell's files were read as they are, without checking them against the SHA-256 their commit marks record.".to_string(),
        );
    }
    out
}

/// Why no request has `cached_tokens`, and the server flag that reports it.
fn cached_tokens_note(engine: Option<&str>) -> String {
    let flag = match engine {
        Some("vllm") => "start vLLM with `--enable-prompt-tokens-details`",
        Some("sglang") => "start SGLang with `--enable-cache-report`",
        _ => {
            "vLLM reports it with `--enable-prompt-tokens-details`, SGLang with `--enable-cache-report`"
        }
    };
    format!(
        "No request says how much of its prompt the prefix cache served (`cached_tokens` in usage): {flag}. Without it, no scout can be found served from cache (verdict Served from cache), and replay cells have no cache figures."
    )
}

/// One line per reason that some cells could not give figures, naming the figures
/// (those with a column) and the cells: `Spec acceptance and Acceptance length are — in
/// 9 cells (Decode 1K × 1, …): why`.
fn unavailable_notes(s: &Scoring) -> Vec<String> {
    // (reason, cells) -> the figures' headers, in figure-table order.
    type Group<'a> = ((&'a str, Vec<String>), Vec<&'static str>);
    let mut groups: Vec<Group> = Vec::new();
    for figure in FIGURES {
        let Some(column) = figure.column else {
            continue;
        };
        let mut by_reason: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for c in &s.cells {
            if let Some(why) = c
                .figures
                .as_ref()
                .and_then(|f| f.unavailable.get(figure.name))
            {
                by_reason.entry(why).or_default().push(cell_name(c));
            }
        }
        for key in by_reason {
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, headers)) => headers.push(column.header),
                None => groups.push((key, vec![column.header])),
            }
        }
    }
    groups
        .into_iter()
        .map(|((why, cells), headers)| {
            let shown: Vec<&str> = cells.iter().take(3).map(String::as_str).collect();
            let names = match headers.split_last() {
                Some((last, rest)) if !rest.is_empty() => {
                    format!("{} and {last} are", rest.join(", "))
                }
                _ => format!("{} is", headers.join("")),
            };
            format!(
                "{names} {DASH} in {} {} ({}{}): {why}.",
                cells.len(),
                if cells.len() == 1 { "cell" } else { "cells" },
                shown.join(", "),
                if cells.len() > 3 { ", …" } else { "" }
            )
        })
        .collect()
}

/// The report's last line: who scored it, under which rules, which run.
pub(crate) fn scored_by(s: &Scoring) -> String {
    format!(
        "Scored by {} under rule set {} {} · run {}",
        s.scored_by, s.rules.name, s.rules.version, s.run.run_id
    )
}

fn cell_name(c: &CellScore) -> String {
    match (c.phase, c.rate) {
        (Phase::Prefill, _) => format!("Prefill {}", context_label(c.context)),
        (Phase::Decode, _) => format!("Decode {} × {}", context_label(c.context), c.concurrency),
        (Phase::Burst, _) => format!("Burst {} × {}", context_label(c.context), c.concurrency),
        (Phase::Rate, r) => format!(
            "Rate {} at {} req/s",
            context_label(c.context),
            r.map_or_else(dash, |r| r.to_string())
        ),
        (Phase::Replay, _) => format!("Replay {}", c.replay.unwrap_or(0)),
    }
}

/// The "Phase" column's text of a cell.
pub(crate) fn phase_label(c: &CellScore) -> String {
    match (c.phase, c.rate) {
        (Phase::Prefill, _) => "Prefill".to_string(),
        (Phase::Decode, _) => "Sustained decode".to_string(),
        (Phase::Burst, _) => "Burst / E2E".to_string(),
        (Phase::Rate, r) => format!("Rate {} req/s", r.map_or_else(dash, |r| r.to_string())),
        (Phase::Replay, _) => format!("Replay {}", c.replay.unwrap_or(0)),
    }
}

/// `p50 / p90 / p99 / max` of a summary in ms with `decimals` (`—` for what it lacks).
/// [`spread`] of the summary `pick` takes from a cell's shown figures; a dash without.
fn spread_of(
    f: Option<&Figures>,
    pick: fn(&Figures) -> &crate::contract::Summary,
    decimals: usize,
) -> String {
    f.map_or_else(|| DASH.to_string(), |f| spread(pick(f), decimals))
}

pub(crate) fn spread(s: &crate::contract::Summary, decimals: usize) -> String {
    let p = |k: &str| s.percentiles.get(k).copied();
    [s.median, p("p90"), p("p99"), s.max]
        .iter()
        .map(|v| opt(*v, |x| fixed(x, decimals)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `p50 / p99` of a summary in ms with `decimals` (`—` for what it lacks).
fn p50_p99(s: &crate::contract::Summary, decimals: usize) -> String {
    [s.median, s.percentiles.get("p99").copied()]
        .iter()
        .map(|v| opt(*v, |x| fixed(x, decimals)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// A table, format-free: its headers and the text of each row.
pub(crate) struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// The Burst / E2E section: one row per burst cell (context, then requests at once),
/// E2E latency, TTFT, ITL and time between tokens as p50 / p90 / p99 / max in ms, the
/// completed request rate and output tok/s over the cell's span. `None` without burst
/// cells.
pub(crate) fn burst_table(s: &Scoring) -> Option<Table> {
    let cells: Vec<&CellScore> = s.cells.iter().filter(|c| c.phase == Phase::Burst).collect();
    if cells.is_empty() {
        return None;
    }
    let headers = [
        "Context",
        "Requests at once",
        "Requests",
        "Status",
        "E2E ms (p50 / p90 / p99 / max)",
        "TTFT ms",
        "ITL ms",
        "Time between tokens ms",
        "Requests/s",
        "Output tok/s",
    ]
    .map(str::to_string)
    .to_vec();
    let rows = cells
        .iter()
        .map(|c| {
            let f = shown(c);
            let sp = |pick, decimals| spread_of(f, pick, decimals);
            vec![
                context_label(c.context),
                c.concurrency.to_string(),
                f.map_or_else(|| DASH.to_string(), |f| thousands(f.completed_requests)),
                c.status_label(),
                sp(|f| &f.e2e_latency_ms, 0),
                sp(|f| &f.ttft_ms, 0),
                sp(|f| &f.itl_ms, 1),
                sp(|f| &f.time_between_tokens_ms, 1),
                opt(f.and_then(|f| f.request_rate), |x| fixed(x, 2)),
                opt(f.and_then(|f| f.total_tok_s), |x| rate(x, false)),
            ]
        })
        .collect();
    Some(Table { headers, rows })
}

/// The source of replay cell `index`, from the run's replay settings.
fn replay_source(s: &Scoring, index: u32) -> Option<&tokentrace_schemas::manifest::ReplaySource> {
    s.run
        .replay
        .as_ref()
        .and_then(|r| r.sources.iter().find(|x| x.index == index))
}

/// The lines under the Replay heading: what was replayed, how, and which sources ran
/// closed loop (replayed open loop at their recorded send times).
pub(crate) fn replay_intro(s: &Scoring) -> Vec<String> {
    let Some(r) = &s.run.replay else {
        return Vec::new();
    };
    let scale = r.time_scale_ppm as f64 / 1e6;
    let window = match (r.window_start_ns, r.window_end_ns) {
        (None, None) => String::new(),
        (a, b) => format!(
            " · trace time {}..{}",
            a.map_or_else(String::new, |v| format!("{} s", fixed(v as f64 / 1e9, 1))),
            b.map_or_else(String::new, |v| format!("{} s", fixed(v as f64 / 1e9, 1)))
        ),
    };
    let mut lines = vec![format!(
        "{} workload from `{}`, open loop at its own times × {}{window}{}{} · latencies in ms as p50 / p90 / p99 / max",
        r.format,
        r.from,
        g(scale),
        r.max_requests
            .map_or_else(String::new, |n| format!(" · at most {n} requests")),
        r.max_concurrency
            .map_or_else(String::new, |n| format!(" · at most {n} in flight")),
    )];
    for src in &r.sources {
        let what = match &src.source_cell {
            Some(cell) => format!("cell {cell} of the run"),
            None => format!("`{}`", src.file),
        };
        let mut line = format!(
            "Replay {}: {what} (SHA-256 {}…), {} requests",
            src.index,
            &src.sha256[..src.sha256.len().min(12)],
            thousands(i64::from(src.requests))
        );
        if src.skipped > 0 {
            let _ = write!(line, ", {} not sent (the Notes say why)", src.skipped);
        }
        if src.closed_loop {
            line.push_str(
                "; it ran closed loop and is replayed open loop at its recorded send times, so \
                 a request no longer waits for the one before it",
            );
        }
        lines.push(line);
    }
    lines
}

/// The Replay section: one row per replay cell, its requests sent and skipped, offered
/// and achieved rate, goodput under the SLO, TTFT, time between tokens and E2E latency
/// (p50 / p90 / p99 / max), the schedule's lag (p50 / p99), and the prefix cache's hits
/// against the workload's sharing. `None` without replay cells.
pub(crate) fn replay_table(s: &Scoring) -> Option<Table> {
    let cells: Vec<&CellScore> = s
        .cells
        .iter()
        .filter(|c| c.phase == Phase::Replay)
        .collect();
    if cells.is_empty() {
        return None;
    }
    let headers = [
        "Replay",
        "Context",
        "Requests",
        "Status",
        "Offered req/s",
        "Achieved req/s",
        "Goodput req/s",
        "TTFT ms (p50 / p90 / p99 / max)",
        "Time between tokens ms",
        "E2E ms",
        "Schedule lag ms (p50 / p99)",
        "Cached / expected tokens",
    ]
    .map(str::to_string)
    .to_vec();
    let rows = cells
        .iter()
        .map(|c| {
            let f = shown(c);
            let sp = |pick, decimals| spread_of(f, pick, decimals);
            let index = c.replay.unwrap_or(0);
            let source = replay_source(s, index);
            let requests = match (f, source) {
                (Some(f), _) => format!(
                    "{}{}",
                    thousands(f.requests_scored as i64),
                    f.replay_skipped
                        .filter(|n| *n > 0)
                        .map_or_else(String::new, |n| format!(" (+{n} skipped)"))
                ),
                (None, Some(src)) => thousands(i64::from(src.requests)),
                (None, None) => DASH.to_string(),
            };
            let cache = match f.and_then(|f| f.cached_tokens.zip(f.expected_cached_tokens)) {
                Some((got, want)) if want > 0 => format!(
                    "{} / {} ({}%)",
                    thousands(got),
                    thousands(want),
                    fixed(100.0 * got as f64 / want as f64, 1)
                ),
                Some((got, want)) => format!("{} / {}", thousands(got), thousands(want)),
                None => DASH.to_string(),
            };
            vec![
                index.to_string(),
                if c.context == 0 {
                    "mixed".to_string()
                } else {
                    context_label(c.context)
                },
                requests,
                c.status_label(),
                opt(f.and_then(|f| f.offered_rate), |x| fixed(x, 2)),
                opt(f.and_then(|f| f.request_rate), |x| fixed(x, 2)),
                opt(f.and_then(|f| f.goodput), |x| fixed(x, 2)),
                sp(|f| &f.ttft_ms, 0),
                sp(|f| &f.time_between_tokens_ms, 1),
                sp(|f| &f.e2e_latency_ms, 0),
                f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.schedule_lag_ms, 2)),
                cache,
            ]
        })
        .collect();
    Some(Table { headers, rows })
}

/// One context's latency-versus-rate curve: its table (one row per offered rate) and
/// the line naming its knee.
pub(crate) struct RateCurve {
    pub context: u32,
    pub table: Table,
    pub knee: String,
    /// One point per rate cell that shows figures.
    pub points: Vec<RatePoint>,
}

/// One rate cell on the latency-versus-rate curve.
pub(crate) struct RatePoint {
    /// The offered rate as written (`4`, `inf`).
    pub label: String,
    /// The offered rate, req/s (`inf` plotted at twice the largest finite rate).
    pub x: f64,
    /// E2E latency p50 and p99, TTFT p99, ms.
    pub e2e_p50: Option<f64>,
    pub e2e_p99: Option<f64>,
    pub ttft_p99: Option<f64>,
    /// This rate is the context's knee.
    pub knee: bool,
}

/// The Request rate section, per context: offered and achieved rate, the SLO, TTFT,
/// time between tokens and E2E latency (p50 / p99), the schedule's lag, output tok/s;
/// and the knee, the highest offered rate whose cell meets the rule set's SLO.
pub(crate) fn rate_curves(s: &Scoring) -> Vec<RateCurve> {
    let cells = || s.cells.iter().filter(|c| c.phase == Phase::Rate);
    let contexts: BTreeSet<u32> = cells().map(|c| c.context).collect();
    let slo = s.rules.slo.is_set().then(|| s.rules.slo.describe());
    let finite_max = cells()
        .filter_map(|c| c.rate.filter(|r| !r.is_inf()))
        .map(|r| r.per_second())
        .fold(0.0f64, f64::max);
    contexts
        .into_iter()
        .map(|ctx| {
            let mut row_cells: Vec<&CellScore> = cells().filter(|c| c.context == ctx).collect();
            row_cells.sort_by_key(|c| c.rate);
            let headers = [
                "Offered req/s",
                "Achieved req/s",
                "Status",
                "SLO",
                "TTFT ms (p50 / p99)",
                "Time between tokens ms (p50 / p99)",
                "E2E ms (p50 / p99)",
                "Schedule lag ms (p50 / p99)",
                "Output tok/s",
            ]
            .map(str::to_string)
            .to_vec();
            // The capacity and the knee are the scoring's (`score/capacity.rs`).
            let judged = s.rate_capacity.iter().find(|r| r.context == ctx);
            let above = |c: &CellScore| {
                c.figures.as_ref().and_then(|f| f.capacity.as_deref()) == Some(CAPACITY_ABOVE)
            };
            let met = |c: &CellScore| c.figures.as_ref().and_then(|f| f.slo_met) == Some(true);
            let at_rate = |r: Option<Rate>| {
                r.and_then(|r| row_cells.iter().copied().find(|c| c.rate == Some(r)))
            };
            let knee_rate = judged.and_then(|j| j.knee);
            let knee_cell = at_rate(knee_rate);
            let first_miss = at_rate(judged.and_then(|j| j.first_miss));
            let capacity = judged
                .and_then(|j| j.capacity_req_s.zip(at_rate(j.capacity_rate)));
            let mut points = Vec::new();
            let rows = row_cells
                .iter()
                .map(|c| {
                    let f = shown(c);
                    let r = c.rate.map_or_else(dash, |r| r.to_string());
                    if let (Some(f), Some(rate)) = (f, c.rate) {
                        let x = if rate.is_inf() {
                            (finite_max * 2.0).max(1.0)
                        } else {
                            rate.per_second()
                        };
                        points.push(RatePoint {
                            label: r.clone(),
                            x,
                            e2e_p50: f.e2e_latency_ms.median,
                            e2e_p99: f.e2e_latency_ms.percentiles.get("p99").copied(),
                            ttft_p99: f.ttft_ms.percentiles.get("p99").copied(),
                            knee: slo.is_some() && knee_rate == Some(rate),
                        });
                    }
                    let slo_text = match c.figures.as_ref().and_then(|f| f.slo_met) {
                        Some(true) if above(c) => "met, above capacity".to_string(),
                        Some(true) => "met".to_string(),
                        Some(false) => "missed".to_string(),
                        None => DASH.to_string(),
                    };
                    vec![
                        r,
                        opt(f.and_then(|f| f.request_rate), |x| fixed(x, 2)),
                        c.status_label(),
                        slo_text,
                        f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.ttft_ms, 0)),
                        f.map_or_else(|| DASH.to_string(), |f| {
                            p50_p99(&f.time_between_tokens_ms, 1)
                        }),
                        f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.e2e_latency_ms, 0)),
                        f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.schedule_lag_ms, 2)),
                        opt(f.and_then(|f| f.total_tok_s), |x| rate(x, false)),
                    ]
                })
                .collect();
            let knee = match &slo {
                None => format!(
                    "{}: no knee, the rule set {} has no SLO ([slo] in a rule file, then `tokentrace rescore`)",
                    context_label(ctx),
                    s.rules.id()
                ),
                Some(slo) => {
                    let why = |m: &CellScore| {
                        let r = m.rate.map_or_else(dash, |r| r.to_string());
                        if !met(m) {
                            format!(
                                "{r} req/s misses it ({})",
                                m.figures
                                    .as_ref()
                                    .map(|f| f.slo_misses.join(", "))
                                    .filter(|t| !t.is_empty())
                                    .unwrap_or_else(|| m.status_label())
                            )
                        } else {
                            format!(
                                "{r} req/s is above the server's capacity: it meets the SLO over its {} requests, but its queue grows with every one",
                                m.figures
                                    .as_ref()
                                    .map_or(0, |f| f.completed_requests)
                            )
                        }
                    };
                    match (knee_cell, first_miss) {
                        (Some(k), miss) => format!(
                            "{}: knee at {} req/s, the highest offered rate that meets the SLO ({slo}) within the server's capacity{}",
                            context_label(ctx),
                            k.rate.map_or_else(dash, |r| r.to_string()),
                            miss.map_or_else(
                                || "; every rate recorded meets it".to_string(),
                                |m| format!("; {}", why(m))
                            )
                        ),
                        (None, miss) => format!(
                            "{}: no rate recorded meets the SLO ({slo}) within the server's capacity; {}",
                            context_label(ctx),
                            miss.map_or_else(dash, why)
                        ),
                    }
                }
            };
            let knee = match capacity {
                Some((a, c)) => format!(
                    "{knee}. Completed requests level off at {} req/s (at {} req/s offered): the server's capacity at this context",
                    fixed(a, 2),
                    c.rate.map_or_else(dash, |r| r.to_string())
                ),
                None => knee,
            };
            RateCurve {
                context: ctx,
                table: Table { headers, rows },
                knee,
                points,
            }
        })
        .collect()
}

/// The requests of a cache warning: each with its cached share and TTFT (and its role,
/// when `roles`), then how many more.
fn cache_list(requests: &[ColdRequest], more: usize, roles: bool) -> String {
    let listed: Vec<String> = requests
        .iter()
        .map(|r| {
            format!(
                "{}request {} ({} of {} cached, TTFT {})",
                if roles {
                    format!("{} ", r.role)
                } else {
                    String::new()
                },
                r.request_id,
                thousands(r.cached_tokens),
                thousands(r.prompt_tokens),
                opt(r.ttft_ms, ms_whole)
            )
        })
        .collect();
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}{more}", listed.join(", "))
}

fn g(v: f64) -> String {
    fixed(v, if v.fract() == 0.0 { 0 } else { 2 })
}

/// The words of a `rechunked` warning: how the reads came, the server's own pace, the
/// requests, and what the figures did with them.
fn rechunk_words(e: &RechunkEvidence, phase: Phase) -> String {
    let listed: Vec<String> = e
        .requests
        .iter()
        .map(|r| {
            format!(
                "{} request {} ({} token events in {} reads, up to {} in one, over {} ms; TTFT {})",
                r.role,
                r.request_id,
                thousands(r.token_events),
                thousands(r.reads),
                thousands(r.largest_read),
                opt(r.span_ms, ms_whole),
                opt(r.ttft_ms, ms_whole)
            )
        })
        .collect();
    let more = if e.more > 0 {
        format!(" and {} more", e.more)
    } else {
        String::new()
    };
    let server = e.server_token_interval_ms.map_or_else(String::new, |s| {
        format!(
            ", where the server made each request's next token every {} ms",
            fixed(s, 1)
        )
    });
    format!(
        "the network re-chunked {} of {} streams ({}: token events came {} to a read on average, limit {}{server}), so their timing is the network's: {}{more}; {}",
        e.requests.len() + e.more,
        e.of,
        e.fault,
        fixed(e.mean_events_per_read, 1),
        g(e.events_per_read),
        listed.join(", "),
        match (e.excluded_from_latency, phase) {
            (true, Phase::Prefill) => "left out of TTFT and prompt tok/s",
            (true, _) =>
                "left out of TTFT, time between tokens, per-request tok/s and ITL (total tok/s counts their tokens)",
            (false, _) => "included in every figure",
        }
    )
}

/// One line per verdict reason and warning of a cell, for the Notes section.
/// A repetition in words: who repeats what, how often, where.
fn loop_words(l: &LoopEvidence) -> String {
    format!(
        "{} request {} repeats a {}-character passage {} times ({} characters) in its {}",
        l.role,
        l.request_id,
        thousands(l.cycle_chars as i64),
        l.cycles,
        thousands(l.span_chars as i64),
        l.channel.as_str()
    )
}

/// What a content check found, in words: how many requests, and the first one's
/// evidence with its excerpt.
fn content_words(found: &crate::contract::ContentFindings) -> String {
    let what = match found.check.as_str() {
        "script_mix" => "answered in a script the prompt does not use",
        "empty_output" => "finished without output",
        "stop_early" => "stopped before max_tokens although the request asked ignore_eos",
        other => other,
    };
    let n = found.findings.len() + found.more;
    let first = found.findings.first().map_or_else(String::new, |f| {
        format!(
            ": request {}{} ({}), \"{}\"",
            f.request_id,
            f.channel
                .map(|c| format!(" {}", c.as_str()))
                .unwrap_or_default(),
            f.detail,
            f.excerpt
        )
    });
    format!("{n} of {} requests {what}{first}", found.of)
}

/// Why a cell is not Valid, in one line of words; the samples behind it are in the JSON
/// scoring's `evidence`.
fn verdict_note(c: &CellScore) -> Option<String> {
    let verdict = c.verdict.filter(|v| *v != Verdict::Valid)?;
    let (mut failed, mut loops, mut queued, mut why) = (vec![], vec![], vec![], vec![]);
    for e in &c.evidence {
        match e {
            Evidence::FailedStream { .. } => failed.push(e),
            Evidence::Loop(l) => loops.push(l),
            Evidence::WarmupNotReady { .. }
            | Evidence::RunningNeverReachedN { .. }
            | Evidence::RunningMeanBelow { .. }
            | Evidence::WaitingMeanAbove { .. }
            | Evidence::WaitingSampleAbove { .. }
            | Evidence::KvBudget { .. } => queued.push(e),
            Evidence::Missing { what } => why.push(what.clone()),
            Evidence::Imported { said, .. } => why.push(said.clone()),
            Evidence::Content(found) => why.push(content_words(found)),
            Evidence::ScoutCached {
                request_id,
                cached_tokens,
                prompt_tokens,
                max_fraction,
            } => why.push(format!(
                "the scout (request {request_id}) had {} of its {} prompt tokens served from the prefix cache (more than {}%), so prefill was not measured",
                thousands(*cached_tokens),
                thousands(*prompt_tokens),
                g(max_fraction * 100.0)
            )),
        }
    }
    let more = |listed: usize| {
        let n = listed.saturating_sub(1) + c.evidence_omitted;
        if n > 0 {
            format!(", and {n} more")
        } else {
            String::new()
        }
    };
    if let Some(Evidence::FailedStream {
        request_id,
        role,
        end_reason,
        error,
        end_s,
    }) = failed.first()
    {
        why.push(format!(
            "{role} request {request_id} ended `{end_reason}`{}{}{}",
            end_s
                .map(|s| format!(" {} s into the window", fixed(s, 2)))
                .unwrap_or_default(),
            error
                .as_deref()
                .map(|e| format!(": {}", e.replace(['\n', '|'], " ")))
                .unwrap_or_default(),
            more(failed.len())
        ));
    }
    if let Some(l) = loops.first() {
        why.push(format!("{}{}", loop_words(l), more(loops.len())));
    }
    let clauses: Vec<String> = queued
        .iter()
        .filter_map(|e| match e {
            Evidence::WarmupNotReady { detail } => Some(format!(
                "the warm-up ended before every stream had a token ({detail})"
            )),
            Evidence::RunningNeverReachedN {
                max, concurrency, ..
            } => Some(format!(
                "at most {} of the {concurrency} requests ran at once",
                g(*max)
            )),
            Evidence::RunningMeanBelow {
                mean, threshold, ..
            } => Some(format!(
                "{} requests ran on average (fewer than {})",
                fixed(*mean, 2),
                g(*threshold)
            )),
            Evidence::WaitingMeanAbove {
                mean, threshold, ..
            } => Some(format!(
                "{} requests waited on average (more than {})",
                fixed(*mean, 2),
                g(*threshold)
            )),
            Evidence::WaitingSampleAbove {
                samples_above,
                samples,
                ..
            } => Some(format!(
                "requests waited in {samples_above} of {samples} scrapes"
            )),
            Evidence::KvBudget {
                need_tokens,
                budget_tokens,
                source,
            } => Some(if need_tokens > budget_tokens {
                format!(
                    "its prompts take {} tokens of KV cache, more than the server's {} ({source})",
                    thousands(i64::try_from(*need_tokens).unwrap_or(i64::MAX)),
                    thousands(i64::try_from(*budget_tokens).unwrap_or(i64::MAX))
                )
            } else {
                format!(
                    "its prompts take {} of the server's {} tokens of KV cache ({source})",
                    thousands(i64::try_from(*need_tokens).unwrap_or(i64::MAX)),
                    thousands(i64::try_from(*budget_tokens).unwrap_or(i64::MAX))
                )
            }),
            _ => None,
        })
        .collect();
    if !clauses.is_empty() {
        why.push(clauses.join(", "));
    }
    if why.is_empty() {
        return Some(format!("{}: see the JSON scoring", verdict.label()));
    }
    Some(format!(
        "{}: {}; samples in the JSON scoring",
        verdict.label(),
        why.join("; ")
    ))
}

pub(crate) fn cell_notes(c: &CellScore) -> Vec<String> {
    let name = cell_name(c);
    let mut out = Vec::new();
    if c.verdict.is_none() {
        out.push(format!(
            "{name}: {}{}",
            c.status_label(),
            c.reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        ));
    }
    if let Some(line) = verdict_note(c) {
        out.push(format!("{name}: {line}"));
    }
    for w in &c.warnings {
        let line = match w {
            Warning::ClientLag {
                tick_lateness_max_ms,
                queue_delay_p99_ms,
                tick_threshold_ms,
                queue_threshold_ms,
                late_tick_share,
                late_tick_ms,
                late_tick_share_max,
            } => match (late_tick_share, late_tick_ms, late_tick_share_max) {
                (Some(share), Some(ms), Some(max)) => format!(
                    "warning: the recorder lagged ({}% of its ticks were over {} ms late, limit {}%; chunk queueing p99 {} ms, limit {}): its timings may be distorted",
                    fixed(share * 100.0, 1),
                    g(*ms),
                    g(max * 100.0),
                    opt(*queue_delay_p99_ms, |v| fixed(v, 3)),
                    g(*queue_threshold_ms)
                ),
                _ => format!(
                    "warning: the recorder lagged (tick lateness max {} ms, limit {}; chunk queueing p99 {} ms, limit {}): its timings may be distorted",
                    opt(*tick_lateness_max_ms, |v| fixed(v, 2)),
                    g(*tick_threshold_ms),
                    opt(*queue_delay_p99_ms, |v| fixed(v, 3)),
                    g(*queue_threshold_ms)
                ),
            },
            Warning::SuspectedLoop(l) => format!("warning: suspected loop, {}", loop_words(l)),
            Warning::NoServerMetrics { missing } => format!(
                "warning: no server samples of {} inside the window: queueing not judged from the server; active requests counted by the client",
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Warning::DrainIncomplete { detail } => {
                format!("warning: the server did not drain after the cell ({detail})")
            }
            Warning::ColdPrefill {
                requests,
                more,
                min_fraction,
                excluded_from_ttft,
            } => {
                format!(
                    "warning: {} requests prefilled cold (less than {}% of the prompt cached), so their TTFT holds a prefill: {}; {}",
                    requests.len() + more,
                    g(min_fraction * 100.0),
                    cache_list(requests, *more, true),
                    if *excluded_from_ttft {
                        "left out of the TTFT figures"
                    } else {
                        "included in the TTFT figures"
                    }
                )
            }
            Warning::WarmPrefill {
                requests,
                more,
                of,
                min_fraction,
            } => {
                format!(
                    "warning: {} of {of} requests had {}% or more of the prompt served from the prefix cache, so their TTFT and E2E latency are a warm prefix's, not a cold prefill's (a run recorded with one prompt per context, or a server that caches across requests): {}",
                    requests.len() + more,
                    g(min_fraction * 100.0),
                    cache_list(requests, *more, false)
                )
            }
            Warning::ScheduleLag {
                lag_ms,
                percentile,
                max_lag_ms,
                worst_ms,
                late,
                of,
            } => format!(
                "warning: the replay fell behind its schedule: p{} lag {} ms (limit {} ms), the latest request {} ms late; {late} of {of} requests left more than {} ms late, so the server did not see the workload's load",
                g(*percentile),
                fixed(*lag_ms, 1),
                g(*max_lag_ms),
                fixed(*worst_ms, 1),
                g(*max_lag_ms)
            ),
            Warning::ReplaySkipped { skipped, of, first } => format!(
                "{skipped} of the workload's {of} requests were not sent (never cut to fit): {first}{}",
                if *skipped > 1 { ", and others" } else { "" }
            ),
            Warning::Content(found) => format!("warning: {}", content_words(found)),
            Warning::Rechunked(e) => format!("warning: {}", rechunk_words(e, c.phase)),
            Warning::Connections {
                retries,
                reconnects,
                connections_opened,
                max_retries,
                max_reconnects,
            } => format!(
                "warning: {retries} {} sent again on a new connection (the kept-alive one closed under {}; limit {}), {} reconnects by its workers (limit {}), {connections_opened} connections opened: each retry paid a failed send and a connect inside its latency",
                if *retries == 1 {
                    "request was"
                } else {
                    "requests were"
                },
                if *retries == 1 { "it" } else { "them" },
                max_retries.map_or_else(dash, |m| m.to_string()),
                reconnects.map_or_else(dash, |r| r.to_string()),
                max_reconnects.map_or_else(dash, |m| m.to_string()),
            ),
        };
        out.push(format!("{name}: {line}"));
    }
    out
}
