//! The reference tool's results file (llm-inference-bench's `llm_decode_bench.py --output
//! FILE`, versions 0.4.x to 0.6.x) read into plain cells in the file's own units, for
//! `tokentrace import`: pure bytes -> data, each missing or mistyped field named by its path.

use serde_json::{Map, Value};

/// The tool, as a run folder's manifest names it.
pub const TOOL: &str = "llm-inference-bench";

/// The versions whose writer was read (FORMAT.md, "Imported cells"): every field of
/// theirs below is known. Another version is read by the fields it shares with these.
pub const KNOWN_VERSIONS: [&str; 4] = ["0.4.18", "0.6.0", "0.6.1", "0.6.2"];

/// The top-level keys of the known versions' results files.
const TOP_KEYS: [&str; 14] = [
    "metadata",
    "startup_diagnostics",
    "nvidia_p2p_override",
    "p2pmark",
    "amd_fabric",
    "hardware_run_summary",
    "event_log",
    "prefill",
    "results",
    "summary_table",
    "burst_results",
    "burst_summary_table",
    "methodology",
    "coding_peak",
];

/// The fields of a decode or burst cell (`CellResult`) in the known versions: 0.4.18's,
/// then 0.6.0's additions, then 0.6.1's `failure_reason`.
const CELL_KEYS: [&str; 83] = [
    "concurrency",
    "context_tokens",
    "benchmark_mode",
    "request_count_target",
    "warmup_request_count",
    "measurement_seconds",
    "measurement_wall_seconds",
    "client_output_tokens",
    "server_output_tokens",
    "aggregate_source",
    "aggregate_tps",
    "per_request_avg_tps",
    "ttft_avg",
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "time_to_second_token_avg",
    "time_to_second_token_p50",
    "time_to_second_token_p90",
    "time_to_second_token_p99",
    "request_latency_avg",
    "request_latency_p50",
    "request_latency_p90",
    "request_latency_p99",
    "inter_token_latency_avg",
    "inter_token_latency_p50",
    "inter_token_latency_p90",
    "inter_token_latency_p99",
    "output_tps_per_user_avg",
    "output_tps_per_user_p50",
    "output_tps_per_user_p90",
    "output_tps_per_user_p99",
    "e2e_output_tps_per_user_avg",
    "e2e_output_tps_per_user_p50",
    "e2e_output_tps_per_user_p90",
    "e2e_output_tps_per_user_p99",
    "chunk_inter_token_latency_avg",
    "chunk_inter_token_latency_p50",
    "chunk_inter_token_latency_p90",
    "chunk_inter_token_latency_p99",
    "input_seq_len_avg",
    "output_seq_len_avg",
    "output_seq_len_p50",
    "output_seq_len_p90",
    "output_seq_len_p99",
    "request_count",
    "completed_request_count",
    "request_samples",
    "total_tokens",
    "wall_time",
    "num_completed",
    "num_errors",
    "server_gen_throughput",
    "server_utilization",
    "server_spec_accept_rate",
    "server_spec_accept_length",
    "avg_running_reqs",
    "max_running_reqs",
    "effective_concurrency",
    "avg_queue_reqs",
    "max_queue_reqs",
    "queue_fraction",
    "underfilled",
    "warmup_timed_out",
    "warmup_duration",
    "ready_reason",
    "timeout_reason",
    "capacity_limited",
    "hardware_summary",
    // 0.6.0
    "server_spec_drafts",
    "server_spec_draft_tokens",
    "server_spec_accepted_tokens",
    "server_spec_pos_accept",
    "server_engine_steps",
    "server_steps_per_s",
    "server_accept_len_effective",
    "accept_norm_tps",
    "accept_norm_ref_len",
    "loop_detection_enabled",
    "loop_detected",
    "loop_diagnostics",
    "loop_diagnostics_omitted",
    // 0.6.1
    "failure_reason",
];

/// What went wrong reading a results file; each names the field by its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("not JSON ({0})")]
    NotJson(String),
    #[error(
        "not an llm-inference-bench results file: expected a JSON object with `metadata`, `results` and `summary_table` (what `llm_decode_bench.py --output FILE` writes){0}"
    )]
    NotResults(String),
    #[error(
        "a checkpoint of a run still in progress (llm-inference-bench's `<output>.resume.json`), not its results file: import the file the run writes when it ends"
    )]
    InProgress,
    #[error("a `{0}` report of llm-inference-bench, not a decode matrix")]
    OtherMode(String),
    #[error("no results: the file holds no prefill, decode or burst cell")]
    Empty,
    #[error("{path}: {message}")]
    Field { path: String, message: String },
}

/// A number as the file has it: a statistic of 0.0 means "no data" there, never a
/// measured zero (FORMAT.md, "Imported cells").
pub type Seconds = f64;

/// Average and percentiles of one per-request quantity, in the file's unit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    pub avg: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// One prefill row (`prefill["<context>"]`).
#[derive(Debug, Clone, PartialEq)]
pub struct RefPrefill {
    pub context: u32,
    pub ttft_s: Seconds,
    pub tok_per_sec: f64,
    pub prompt_tokens: i64,
    pub samples: i64,
    /// `integrated_scout`, `scout_only`, `client`, `prometheus`.
    pub method: String,
}

/// One decode or burst cell (`results[i]`, `burst_results[i]`).
#[derive(Debug, Clone, PartialEq)]
pub struct RefCell {
    /// Where it was in the file (`results[3]`).
    pub path: String,
    pub context: u32,
    pub concurrency: u32,
    /// `duration`, `request-count`, `burst-e2e`.
    pub mode: String,
    pub aggregate_tps: f64,
    pub per_request_avg_tps: f64,
    pub ttft_s: Stats,
    pub itl_s: Stats,
    pub latency_s: Stats,
    pub tps_per_user: Stats,
    pub client_output_tokens: i64,
    pub measurement_s: Seconds,
    pub request_count: i64,
    pub completed_request_count: i64,
    pub num_errors: i64,
    pub avg_running: f64,
    pub max_running: f64,
    pub avg_queue: f64,
    pub max_queue: f64,
    pub queue_fraction: f64,
    pub warmup_timed_out: bool,
    pub timeout_reason: String,
    pub ready_reason: String,
    pub capacity_limited: bool,
    /// 0.6.x: a confirmed loop; 0.6.1 on: why a stream failed.
    pub loop_detected: bool,
    pub failure_reason: String,
}

/// A results file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct RefRun {
    /// `metadata.version`.
    pub version: String,
    /// Whether the version's writer was read ([`KNOWN_VERSIONS`]).
    pub known: bool,
    pub engine: String,
    pub model: String,
    /// The server's base URL (`startup_diagnostics.server_url`, else `metadata.server`).
    pub server: String,
    /// `metadata.timestamp`: when the file was saved, local time, no zone.
    pub saved_at: String,
    /// False when the run was interrupted (Ctrl-C or `q`): the tool saves what it
    /// finished, with an empty engine and event log.
    pub complete: bool,
    pub duration_s: Option<f64>,
    pub max_tokens: Option<i64>,
    pub contexts: Vec<u32>,
    pub concurrency: Vec<u32>,
    /// One line per GPU of the machine that ran the tool (`nvidia-smi` CSV).
    pub gpus: Vec<String>,
    pub prefill: Vec<RefPrefill>,
    pub decode: Vec<RefCell>,
    pub burst: Vec<RefCell>,
    /// Fields of an unknown version that no known version has, by path: not imported.
    pub skipped: Vec<String>,
}

/// Reads a results file.
pub fn parse(bytes: &[u8]) -> Result<RefRun, RefError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| RefError::NotJson(e.to_string()))?;
    let Some(top) = v.as_object() else {
        return Err(RefError::NotResults(format!(", found {}", kind(&v))));
    };
    if top.contains_key("signature") && top.contains_key("results") {
        return Err(RefError::InProgress);
    }
    let meta = match top.get("metadata") {
        Some(Value::Object(m)) => m,
        _ => return Err(RefError::NotResults(String::new())),
    };
    if let Some(mode) = meta.get("mode").and_then(Value::as_str) {
        return Err(RefError::OtherMode(mode.to_string()));
    }
    if !top.contains_key("results") || !top.contains_key("summary_table") {
        return Err(RefError::NotResults(String::new()));
    }
    let m = Obj::new(meta, "metadata".to_string());
    let version = m.string("version")?.unwrap_or_default();
    let known = KNOWN_VERSIONS.contains(&version.as_str());
    let mut skipped = Vec::new();
    if !known {
        skipped.extend(
            top.keys()
                .filter(|k| !TOP_KEYS.contains(&k.as_str()))
                .cloned(),
        );
    }
    let diag = match top.get("startup_diagnostics") {
        Some(Value::Object(d)) => Some(Obj::new(d, "startup_diagnostics".to_string())),
        _ => None,
    };
    let server_url = match &diag {
        Some(d) => d.string("server_url")?,
        None => None,
    };
    let gpus = match diag.as_ref().and_then(|d| d.map.get("nvidia_smi_query")) {
        Some(Value::Object(q)) => q
            .get("stdout")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    let engine = m.string("engine")?.unwrap_or_default();
    let event_log_empty = match top.get("event_log") {
        Some(Value::Array(a)) => a.is_empty(),
        _ => true,
    };
    let cells = |key: &str, skipped: &mut Vec<String>| -> Result<Vec<RefCell>, RefError> {
        match top.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, c)| cell(c, key, i, known, skipped))
                .collect(),
            Some(other) => Err(RefError::Field {
                path: key.to_string(),
                message: format!("expected an array of cells, found {}", kind(other)),
            }),
        }
    };
    let decode = cells("results", &mut skipped)?;
    let burst = cells("burst_results", &mut skipped)?;
    let prefill = prefill(top.get("prefill"))?;
    if decode.is_empty() && burst.is_empty() && prefill.is_empty() {
        return Err(RefError::Empty);
    }
    skipped.sort();
    skipped.dedup();
    Ok(RefRun {
        known,
        engine: engine.clone(),
        model: m.string("model")?.unwrap_or_default(),
        server: server_url.or(m.string("server")?).unwrap_or_default(),
        saved_at: m.string("timestamp")?.unwrap_or_default(),
        complete: !engine.is_empty() && !event_log_empty,
        duration_s: m.number("duration_per_test")?,
        max_tokens: m.number("max_tokens")?.map(|x| x as i64),
        contexts: m.u32s("context_lengths")?,
        concurrency: m.u32s("concurrency_levels")?,
        gpus,
        prefill,
        decode,
        burst,
        skipped,
        version,
    })
}

/// The `prefill` object: one row per context (keys are the contexts, as strings).
fn prefill(v: Option<&Value>) -> Result<Vec<RefPrefill>, RefError> {
    let rows = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(rows)) => rows,
        Some(other) => {
            return Err(RefError::Field {
                path: "prefill".to_string(),
                message: format!("expected an object keyed by context, found {}", kind(other)),
            });
        }
    };
    let mut out = Vec::with_capacity(rows.len());
    for (ctx, row) in rows {
        let path = format!("prefill[\"{ctx}\"]");
        let context = ctx.parse::<u32>().map_err(|_| RefError::Field {
            path: path.clone(),
            message: "the key is not a context length".to_string(),
        })?;
        let Value::Object(row) = row else {
            return Err(RefError::Field {
                path,
                message: format!("expected an object, found {}", kind(row)),
            });
        };
        let o = Obj::new(row, path);
        out.push(RefPrefill {
            context,
            ttft_s: o.number("ttft_seconds")?.unwrap_or(0.0),
            tok_per_sec: o.number("tok_per_sec")?.unwrap_or(0.0),
            prompt_tokens: o.number("prompt_tokens")?.unwrap_or(0.0) as i64,
            samples: o.number("samples")?.unwrap_or(0.0) as i64,
            method: o.string("method")?.unwrap_or_default(),
        });
    }
    out.sort_by_key(|p| p.context);
    Ok(out)
}

/// One cell of `results` or `burst_results`.
fn cell(
    v: &Value,
    list: &str,
    index: usize,
    known: bool,
    skipped: &mut Vec<String>,
) -> Result<RefCell, RefError> {
    let path = format!("{list}[{index}]");
    let Value::Object(map) = v else {
        return Err(RefError::Field {
            path,
            message: format!("expected a cell object, found {}", kind(v)),
        });
    };
    if !known {
        skipped.extend(
            map.keys()
                .filter(|k| !CELL_KEYS.contains(&k.as_str()))
                .map(|k| format!("{list}[].{k}")),
        );
    }
    let o = Obj::new(map, path.clone());
    let num = |k: &str| o.number(k).map(|x| x.unwrap_or(0.0));
    let stats = |stem: &str| -> Result<Stats, RefError> {
        Ok(Stats {
            avg: num(&format!("{stem}_avg"))?,
            p50: num(&format!("{stem}_p50"))?,
            p90: num(&format!("{stem}_p90"))?,
            p99: num(&format!("{stem}_p99"))?,
        })
    };
    let required = |k: &str| -> Result<f64, RefError> {
        o.number(k)?.ok_or_else(|| RefError::Field {
            path: format!("{path}.{k}"),
            message: "missing".to_string(),
        })
    };
    let uint = |k: &str| -> Result<u32, RefError> {
        let x = required(k)?;
        if x.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&x) {
            return Err(RefError::Field {
                path: format!("{path}.{k}"),
                message: format!("expected a whole number, found {x}"),
            });
        }
        Ok(x as u32)
    };
    Ok(RefCell {
        context: uint("context_tokens")?,
        concurrency: uint("concurrency")?,
        mode: o.string("benchmark_mode")?.unwrap_or_default(),
        aggregate_tps: required("aggregate_tps")?,
        per_request_avg_tps: num("per_request_avg_tps")?,
        ttft_s: stats("ttft")?,
        itl_s: stats("inter_token_latency")?,
        latency_s: stats("request_latency")?,
        tps_per_user: stats("output_tps_per_user")?,
        client_output_tokens: num("client_output_tokens")? as i64,
        measurement_s: num("measurement_seconds")?,
        request_count: num("request_count")? as i64,
        completed_request_count: num("completed_request_count")? as i64,
        num_errors: num("num_errors")? as i64,
        avg_running: num("avg_running_reqs")?,
        max_running: num("max_running_reqs")?,
        avg_queue: num("avg_queue_reqs")?,
        max_queue: num("max_queue_reqs")?,
        queue_fraction: num("queue_fraction")?,
        warmup_timed_out: o.boolean("warmup_timed_out")?.unwrap_or(false),
        timeout_reason: o.string("timeout_reason")?.unwrap_or_default(),
        ready_reason: o.string("ready_reason")?.unwrap_or_default(),
        capacity_limited: o.boolean("capacity_limited")?.unwrap_or(false),
        loop_detected: o.boolean("loop_detected")?.unwrap_or(false),
        failure_reason: o.string("failure_reason")?.unwrap_or_default(),
        path,
    })
}

/// A JSON object and its path, read field by field with the path in every error.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn new(map: &'a Map<String, Value>, path: String) -> Self {
        Obj { map, path }
    }

    fn wrong(&self, key: &str, expected: &str, found: &Value) -> RefError {
        RefError::Field {
            path: format!("{}.{key}", self.path),
            message: format!("expected {expected}, found {}", kind(found)),
        }
    }

    /// A number (absent or null: `None`).
    fn number(&self, key: &str) -> Result<Option<f64>, RefError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(other) => Err(self.wrong(key, "a number", other)),
        }
    }

    fn string(&self, key: &str) -> Result<Option<String>, RefError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.wrong(key, "a string", other)),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, RefError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(key, "true or false", other)),
        }
    }

    /// A list of whole numbers (absent: empty).
    fn u32s(&self, key: &str) -> Result<Vec<u32>, RefError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| self.wrong(key, "a list of whole numbers", x))
                })
                .collect(),
            Some(other) => Err(self.wrong(key, "a list of whole numbers", other)),
        }
    }
}

/// What a JSON value is, for an error.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
