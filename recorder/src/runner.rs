//! The run: probe the server, plan the cells (skipping what exceeds its context), write
//! the manifest, then per context build the prompt and record its cells (prefill scout
//! and decode cells, burst cells, rate cells, as the modes ask), updating the manifest
//! as each cell commits. `resume` skips cells already complete and redoes the rest.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::manifest::{
    BurstConfig, CellEntry, CellStatus, Fact, Manifest, PrefillMode, RateConfig, RunConfig, Target,
    ToolInfo, fact,
};
use tokentrace_schemas::redact::{redact_command, redact_url};
use tokentrace_schemas::tables::Endpoint;
use tokentrace_schemas::{CellKey, Phase, SCHEMA_VERSION};

use crate::cell::{self, CellError, CellPlan, RunCtx};
use crate::http::Transport;
use crate::probe::{self, ProbeError};
use crate::prompt::{self, PromptError};
use crate::request::{endpoint_url, stream_body};

/// Defaults of the reference methodology.
pub const DEFAULT_CONTEXTS: [u32; 5] = [8192, 16384, 32768, 65536, 131072];
pub const DEFAULT_CONCURRENCY: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(30);
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
pub const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_WARMUP_TIMEOUT: Duration = Duration::from_secs(600);
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
pub const DEFAULT_PROMPT_TOLERANCE: u32 = 8;
/// Request ids of cell k start at k × this (unique within the run, stable on resume).
pub const REQUEST_ID_STRIDE: i64 = 1_000_000_000;
/// Measured requests per burst cell when `--requests` is not given.
pub const DEFAULT_BURST_REQUESTS: u32 = 100;

/// A kind of workload a run records; each is a kind of cell in the same run folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// The context × concurrency matrix: prefill cells and closed-loop decode cells.
    Matrix,
    /// Burst / E2E: exactly N requests per context × concurrency, run to completion.
    Burst,
    /// Open-loop request rates, one cell per context × rate.
    Rate,
    /// A workload from a file (`--replay`): a recorded run's cells or a production
    /// trace, one replay cell per source.
    Replay,
}

impl Mode {
    /// Parses `matrix`, `burst`, `rate` or `replay`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim() {
            "matrix" => Some(Mode::Matrix),
            "burst" => Some(Mode::Burst),
            "rate" => Some(Mode::Rate),
            "replay" => Some(Mode::Replay),
            _ => None,
        }
    }
}

/// How to record.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub target: String,
    pub out: PathBuf,
    pub model: Option<String>,
    pub endpoint: Endpoint,
    pub contexts: Vec<u32>,
    pub concurrency: Vec<u32>,
    pub window: Duration,
    pub max_tokens: u32,
    pub metrics_url: Option<String>,
    pub scrape_interval: Duration,
    pub stall_timeout: Duration,
    pub warmup_timeout: Duration,
    pub drain_timeout: Duration,
    pub prompt_tolerance: u32,
    pub resume: bool,
    /// Hardware / engine / run facts as the user gave them (`--describe key=value`).
    pub describe: Vec<(String, String)>,
    /// The server's launch command, redacted before it is stored.
    pub launch_command: Option<String>,
    /// Sent as a bearer token; never written anywhere.
    pub api_key: Option<String>,
    /// How prefill is measured.
    pub prefill_mode: PrefillMode,
    /// Counts tokens as they are written, for a progress display.
    pub progress: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The session's cell writers (a commit may outlive a stopped recording): an
    /// interrupt stops them and waits for none to run before it settles the manifest.
    pub writers: Arc<cell::Writers>,
    /// Where GPU facts and telemetry come from.
    pub gpus: GpuChoice,
    /// Object-store URL each committed cell and the manifest are uploaded to
    /// (`--upload`); a `--resume` into a folder without a run downloads it from there.
    pub upload: Option<String>,
    /// Skip cells whose context × concurrency exceeds the engine's KV-cache budget.
    pub skip_over_capacity: bool,
    /// The kinds of cell to record (matrix, burst, rate), in that order per context.
    pub modes: Vec<Mode>,
    /// Measured requests per burst cell.
    pub burst_requests: u32,
    /// The rate cells' settings (rates, arrivals, seed, length, cap); needed with
    /// [`Mode::Rate`].
    pub rate: Option<RateConfig>,
    /// Probe the server and plan the cells, then stop: nothing is sent beyond the
    /// probe, and nothing is written (`--plan`).
    pub plan_only: bool,
    /// The workload to replay (`--replay`), read and checked before the run starts;
    /// needed with [`Mode::Replay`].
    pub replay: Option<ReplaySetup>,
}

/// A replay's settings and its workload, read before any request.
#[derive(Debug, Clone)]
pub struct ReplaySetup {
    pub opts: crate::replay::ReplayOptions,
    pub workload: Arc<crate::replay::Workload>,
}

/// Prompt tokens of filler whose ids make the pool replay blocks are drawn from.
pub const REPLAY_POOL_TOKENS: u32 = 1024;
/// Prompt tokens of a replay cell's priming request (a prompt no other request shares).
pub const REPLAY_PRIME_TOKENS: u32 = 64;

/// Where GPU facts and telemetry come from.
#[derive(Debug, Clone, Default)]
pub enum GpuChoice {
    /// NVML when it loads; otherwise none, and the manifest says why.
    #[default]
    Auto,
    /// None (`--gpu-telemetry off`).
    Off,
    /// This source (a simulated box for tests and the built-in simulator).
    Given(Arc<dyn crate::gpu::GpuSource>),
}

impl GpuChoice {
    /// The source, or why there is none.
    fn open(&self) -> Result<Arc<dyn crate::gpu::GpuSource>, String> {
        match self {
            GpuChoice::Auto => crate::gpu::Nvml::load().map(|n| Arc::new(n) as _),
            GpuChoice::Off => Err("turned off (--gpu-telemetry off)".to_string()),
            GpuChoice::Given(g) => Ok(g.clone()),
        }
    }
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error(transparent)]
    Trace(#[from] tokentrace_schemas::Error),
    #[error("{0}: already exists; give a new --out, or --resume to finish it")]
    Exists(PathBuf),
    #[error("{0}: cannot resume: {1}")]
    Resume(PathBuf, String),
    #[error("cannot build the prompt of {context} tokens: {source}")]
    Prompt {
        context: u32,
        #[source]
        source: PromptError,
    },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(
        "the run is complete in {0}, but uploading it failed: {1}; `--resume` with the same --out and --upload sends the rest"
    )]
    Upload(PathBuf, String),
}

/// The matrix as cells: a context that does not fit the server's longest request is
/// skipped whole; with `--skip-over-capacity`, so is each cell whose context × streams
/// exceeds the KV-cache budget (`kv`: tokens and where the number came from).
fn cell_list(
    opts: &RecordOptions,
    limit: Option<u32>,
    source: Option<&str>,
    kv: Option<(u64, &str)>,
    workload: Option<&crate::replay::Workload>,
) -> Vec<CellEntry> {
    let mut cells = Vec::new();
    for &ctx in &opts.contexts {
        let fits =
            limit.is_none_or(|m| u64::from(ctx) + u64::from(opts.max_tokens) <= u64::from(m));
        let reason = (!fits).then(|| {
            format!(
                "context {ctx} + max tokens {} exceeds the server's {} {}",
                opts.max_tokens,
                source.unwrap_or("max_model_len"),
                limit.unwrap_or(0)
            )
        });
        let status = if fits {
            CellStatus::Planned
        } else {
            CellStatus::Skipped
        };
        let mut push = |key: CellKey, concurrency: u32| {
            let need = u64::from(ctx) * u64::from(concurrency);
            let over = kv.filter(|(budget, _)| opts.skip_over_capacity && need > *budget);
            let (status, reason) = match (status, over) {
                (CellStatus::Planned, Some((budget, from))) => (
                    CellStatus::Skipped,
                    Some(format!(
                        "context {ctx} × {concurrency} streams needs {need} tokens of KV cache; \
                         the server has {budget} ({from}) and --skip-over-capacity is set"
                    )),
                ),
                _ => (status, reason.clone()),
            };
            cells.push(CellEntry {
                status,
                reason,
                ..CellEntry::planned(key)
            });
        };
        if opts.modes.contains(&Mode::Matrix) {
            if opts.prefill_mode == PrefillMode::Scout {
                push(CellKey::new(Phase::Prefill, ctx, 1), 1);
            }
            for &n in &opts.concurrency {
                push(CellKey::new(Phase::Decode, ctx, n), n);
            }
        }
        if opts.modes.contains(&Mode::Burst) {
            for &n in &opts.concurrency {
                push(CellKey::new(Phase::Burst, ctx, n), n);
            }
        }
        if let Some(rate) = opts
            .rate
            .as_ref()
            .filter(|_| opts.modes.contains(&Mode::Rate))
        {
            // A rate cell holds at most `max_concurrency` prompts at once; uncapped, its
            // need is not known before it runs, and it is never skipped for capacity.
            for &r in &rate.rates {
                push(CellKey::rate(ctx, r), rate.max_concurrency.unwrap_or(0));
            }
        }
    }
    if let Some(w) = workload.filter(|_| opts.modes.contains(&Mode::Replay)) {
        for (key, c) in w.keys().into_iter().zip(&w.cells) {
            let all_skipped = c.items.iter().all(|i| i.skipped.is_some());
            cells.push(CellEntry {
                status: if all_skipped {
                    CellStatus::Skipped
                } else {
                    CellStatus::Planned
                },
                reason: all_skipped.then(|| {
                    format!(
                        "none of its {} requests can be sent ({})",
                        c.items.len(),
                        c.items
                            .first()
                            .and_then(|i| i.skipped.as_deref())
                            .unwrap_or("")
                    )
                }),
                ..CellEntry::planned(key)
            });
        }
    }
    cells
}

/// The engine's KV-cache budget from the probe's facts: tokens, and `fact source`.
fn kv_budget(facts: &[tokentrace_schemas::manifest::Fact]) -> Option<(u64, &str)> {
    let f = facts.iter().find(|f| f.key == "engine.kv_cache_tokens")?;
    Some((f.value.trim().parse().ok()?, f.source.as_str()))
}

/// A nonce for this recording session's prompts: its start time and process, mixed.
fn nonce(clock: &RunClock) -> String {
    use tokentrace_schemas::rng::mix;
    let utc = clock.anchor().utc_at_zero;
    let h = utc
        .bytes()
        .fold(u64::from(std::process::id()), |h, b| mix(h ^ u64::from(b)));
    format!("{:08x}", h >> 32)
}

fn http_client(api_key: Option<&str>) -> Result<reqwest::Client, RecordError> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key {
        let mut v =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                RecordError::Client("the API key is not a valid header value".to_string())
            })?;
        v.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    // Control-plane calls only (probe, tokenize, metrics); generation streams go through
    // `http::Transport`, which keeps connections alive per worker. No idle pooling here:
    // servers close kept-alive connections on their own terms (llama.cpp's HTTP library
    // after 5 requests), and these calls are too rare to gain from reuse.
    reqwest::Client::builder()
        .default_headers(headers)
        .tcp_nodelay(true)
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| RecordError::Client(e.to_string()))
}

/// The headers every generation request carries besides the fixed ones.
fn auth_headers(api_key: Option<&str>) -> Vec<(String, String)> {
    api_key
        .map(|k| ("authorization".to_string(), format!("Bearer {k}")))
        .into_iter()
        .collect()
}

/// What the runner reports as it goes (for a progress bar or log lines).
#[derive(Debug, Clone)]
pub enum Progress {
    /// Something to tell the user.
    Line(String),
    /// Cell `index` (0-based) of `total` starts recording.
    CellStart {
        index: usize,
        total: usize,
        key: CellKey,
    },
    /// Cell `index` is done (committed, failed or skipped); `line` says how.
    CellEnd {
        index: usize,
        total: usize,
        key: CellKey,
        line: String,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Line(l) => f.write_str(l),
            Progress::CellStart { index, total, key } => {
                write!(f, "[{}/{total}] {key}: recording", index + 1)
            }
            Progress::CellEnd {
                index,
                total,
                key,
                line,
            } => write!(f, "[{}/{total}] {key}: {line}", index + 1),
        }
    }
}

/// Records the matrix; `progress` hears of every step.
pub async fn record(
    opts: &RecordOptions,
    mut progress: impl FnMut(Progress),
) -> Result<Manifest, RecordError> {
    // Uploads: a resume into a folder without a run continues the run in the store
    // (a new box after the old one died): its complete cells come down first.
    let store = match &opts.upload {
        Some(url) => Some(crate::store::RunStore::open(url)?),
        None => None,
    };
    let manifest_path = opts.out.join(tokentrace_schemas::layout::MANIFEST_FILE);
    if let Some(store) = &store
        && opts.resume
        && !manifest_path.exists()
        && store.has_run().await?
    {
        let n = store.download_run(&opts.out).await?;
        progress(Progress::Line(format!(
            "resuming {}: {n} complete cells downloaded into {}",
            store.url(),
            opts.out.display()
        )));
    }
    // A resumed folder without a manifest was stopped before anything was recorded in
    // it: the run starts afresh there.
    let resume = opts.resume
        && opts
            .out
            .join(tokentrace_schemas::layout::MANIFEST_FILE)
            .exists();
    // Staging folders of an earlier session (killed mid-cell or mid-commit) hold
    // nothing committed: they go.
    if opts.resume {
        let staging = opts.out.join(tokentrace_schemas::layout::STAGING_DIR);
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .map_err(|e| tokentrace_schemas::Error::io(&staging, e))?;
        }
    }
    if !opts.resume && !opts.plan_only && opts.out.exists() {
        return Err(RecordError::Exists(opts.out.clone()));
    }
    let client = http_client(opts.api_key.as_deref())?;
    let transport = Arc::new(
        Transport::new(
            &endpoint_url(&opts.target, opts.endpoint),
            &auth_headers(opts.api_key.as_deref()),
        )
        .map_err(|e| RecordError::Client(e.to_string()))?,
    );
    let clock = RunClock::start();
    let info = probe::probe(
        &client,
        &transport,
        &clock,
        probe::ProbeTarget {
            base: &opts.target,
            model: opts.model.as_deref(),
            endpoint: opts.endpoint,
            metrics_url: opts.metrics_url.as_deref(),
            stall_timeout: opts.stall_timeout,
        },
    )
    .await?;
    let engine: Vec<&str> = [
        info.engine.name.as_deref().or(Some("unknown")),
        info.engine.version.as_deref(),
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.is_empty())
    .collect();
    progress(Progress::Line(format!(
        "server: model {} · engine {} · longest request {} · tokens counted as {}",
        info.model,
        engine.join(" "),
        match (info.max_model_len, &info.capabilities.max_model_len_source) {
            (Some(m), Some(s)) => format!("{m} tokens ({s})"),
            (Some(m), None) => format!("{m} tokens"),
            _ => "unknown".to_string(),
        },
        info.capabilities
            .token_counting
            .as_deref()
            .and_then(tokentrace_wire::TokenCounting::from_name)
            .map_or("unknown", tokentrace_wire::TokenCounting::describe),
    )));
    // The host's and the GPUs' facts, and the GPU telemetry source.
    let gpus = opts.gpus.open();
    let mut found = info.facts.clone();
    found.extend(crate::host::facts());
    match &gpus {
        Ok(g) => {
            let gpu_facts = g.facts();
            let source = gpu_facts
                .first()
                .map_or_else(|| "NVML".to_string(), |f| f.source.clone());
            found.extend(gpu_facts);
            found.push(Fact::new(
                "gpu.telemetry",
                format!("sampled with every scrape ({source})"),
                source,
            ));
        }
        Err(why) => found.push(Fact::new("gpu.telemetry", format!("none: {why}"), "NVML")),
    }
    let facts = crate::facts::apply_describe(found, &opts.describe);
    progress(Progress::Line(match &gpus {
        Ok(_) => format!(
            "GPUs: {} × {} · telemetry with every scrape",
            fact(&facts, "gpu.count").unwrap_or("?"),
            fact(&facts, "gpu.name").unwrap_or("unnamed"),
        ),
        Err(why) => format!("GPUs: no telemetry ({why})"),
    }));
    let gpus = gpus.ok();
    // The workload, with every request over the server's longest request marked
    // skipped (never cut to fit).
    let workload = opts.replay.as_ref().map(|r| {
        let mut w = (*r.workload).clone();
        w.skip_over(
            info.max_model_len,
            info.capabilities.max_model_len_source.as_deref(),
        );
        Arc::new(w)
    });
    let mut manifest = if resume && !opts.plan_only {
        let m = Manifest::read(&opts.out)?;
        if m.model != info.model {
            return Err(RecordError::Resume(
                opts.out.clone(),
                format!(
                    "it recorded model `{}`, the server serves `{}`",
                    m.model, info.model
                ),
            ));
        }
        if let (Some(kept), Some(w)) = (&m.config.replay, &workload) {
            let given: Vec<&str> = w.cells.iter().map(|c| c.source.sha256.as_str()).collect();
            let recorded: Vec<&str> = kept.sources.iter().map(|s| s.sha256.as_str()).collect();
            if given != recorded {
                return Err(RecordError::Resume(
                    opts.out.clone(),
                    format!(
                        "it replays {} (SHA-256 {}), not the workload given",
                        kept.from,
                        recorded.join(", ")
                    ),
                ));
            }
        }
        m
    } else {
        if !opts.plan_only {
            std::fs::create_dir_all(&opts.out)
                .map_err(|e| tokentrace_schemas::Error::io(&opts.out, e))?;
        }
        let mut engine = info.engine.clone();
        for (k, v) in &opts.describe {
            engine.details.insert(format!("describe.{k}"), v.clone());
        }
        Manifest {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo::current(),
            run_id: format!("run-{}", clock.anchor().utc_at_zero.replace([':', '.'], "")),
            clock: clock.anchor(),
            target: Target {
                url: redact_url(&opts.target),
                api_key: opts.api_key.is_some(),
            },
            model: info.model.clone(),
            engine,
            hardware: opts
                .describe
                .iter()
                .find(|(k, _)| k == "hardware")
                .map(|(_, v)| v.clone()),
            launch_command: opts.launch_command.as_deref().map(redact_command),
            facts,
            capabilities: info.capabilities.clone(),
            config: RunConfig {
                endpoint: opts.endpoint,
                contexts: opts.contexts.clone(),
                concurrency: opts.concurrency.clone(),
                window_ns: i64::try_from(opts.window.as_nanos()).unwrap_or(i64::MAX),
                max_tokens: opts.max_tokens,
                ignore_eos: true,
                scrape_interval_ns: i64::try_from(opts.scrape_interval.as_nanos())
                    .unwrap_or(i64::MAX),
                warmup_timeout_ns: i64::try_from(opts.warmup_timeout.as_nanos())
                    .unwrap_or(i64::MAX),
                drain_timeout_ns: i64::try_from(opts.drain_timeout.as_nanos()).unwrap_or(i64::MAX),
                stall_timeout_ns: i64::try_from(opts.stall_timeout.as_nanos()).unwrap_or(i64::MAX),
                prompt_tolerance_tokens: opts.prompt_tolerance,
                prompt_nonces: Vec::new(),
                prefill_mode: Some(opts.prefill_mode),
                burst: opts.modes.contains(&Mode::Burst).then_some(BurstConfig {
                    requests: opts.burst_requests,
                }),
                rate: opts
                    .rate
                    .clone()
                    .filter(|_| opts.modes.contains(&Mode::Rate)),
                replay: workload
                    .as_ref()
                    .zip(opts.replay.as_ref())
                    .filter(|_| opts.modes.contains(&Mode::Replay))
                    .map(|(w, r)| w.config(&r.opts)),
            },
            cells: cell_list(
                opts,
                info.max_model_len,
                info.capabilities.max_model_len_source.as_deref(),
                kv_budget(&info.facts),
                workload.as_deref(),
            ),
            reparsed: None,
        }
    };
    manifest.schema_version =
        tokentrace_schemas::manifest::json_version(manifest.cells.iter().map(|c| c.phase));
    if opts.plan_only {
        return Ok(manifest);
    }
    // This session's prompts start with a nonce of their own.
    let nonce = nonce(&clock);
    manifest.config.prompt_nonces.push(nonce.clone());
    manifest.write(&opts.out)?;
    // The store gets the manifest, and whatever complete cells it lacks (a resumed
    // run's earlier uploads may have been cut short).
    let mut upload_failed = None;
    if let Some(store) = &store {
        upload_failed = sync(store, &opts.out, &mut progress).await;
    }
    // A resumed run keeps the endpoint it was recorded with.
    let transport = if manifest.config.endpoint == opts.endpoint {
        transport
    } else {
        Arc::new(
            Transport::new(
                &endpoint_url(&opts.target, manifest.config.endpoint),
                &auth_headers(opts.api_key.as_deref()),
            )
            .map_err(|e| RecordError::Client(e.to_string()))?,
        )
    };
    // A resumed run keeps the settings it was recorded with, so that every cell of it
    // was measured alike and its manifest tells the truth about all of them.
    let c = &manifest.config;
    let setting = |ns: i64| Duration::from_nanos(u64::try_from(ns).unwrap_or(0));
    let kept = [
        (
            "--metrics-interval",
            c.scrape_interval_ns,
            opts.scrape_interval,
        ),
        ("--stall-timeout", c.stall_timeout_ns, opts.stall_timeout),
        ("--warmup-timeout", c.warmup_timeout_ns, opts.warmup_timeout),
        ("--drain-timeout", c.drain_timeout_ns, opts.drain_timeout),
    ];
    for (name, recorded, given) in kept {
        if setting(recorded) != given {
            progress(Progress::Line(format!(
                "{name} {}: the run was recorded with {}, which it keeps",
                humantime::format_duration(given),
                humantime::format_duration(setting(recorded))
            )));
        }
    }
    if c.prompt_tolerance_tokens != opts.prompt_tolerance {
        progress(Progress::Line(format!(
            "--prompt-tolerance {}: the run was recorded with {}, which it keeps",
            opts.prompt_tolerance, c.prompt_tolerance_tokens
        )));
    }
    let prompt_tolerance = c.prompt_tolerance_tokens;
    let ctx = RunCtx {
        client: client.clone(),
        clock,
        transport,
        endpoint: manifest.config.endpoint,
        metrics_url: info.metrics_url.clone(),
        scrape_interval: setting(c.scrape_interval_ns),
        stall_timeout: setting(c.stall_timeout_ns),
        warmup_timeout: setting(c.warmup_timeout_ns),
        drain_timeout: setting(c.drain_timeout_ns),
        counting: info.counting,
        tokens: opts.progress.clone(),
        writers: opts.writers.clone(),
        gpus,
    };
    let total = manifest.cells.len();
    let mut prompts: std::collections::BTreeMap<u32, (Value, u32)> = Default::default();
    // The probe's stream goes into the first cell this session records.
    let mut probe_records = Some(info.probe_records.clone());
    // Contexts whose prefill scout the server refused as a wrong request: their decode
    // cells fail without a request (the same prompt would be refused again).
    let mut refused_contexts: std::collections::BTreeMap<u32, String> = Default::default();
    // The replay cells' prompt builder, made with the first replay cell.
    let mut replay_prompts: Option<Arc<crate::replay::Prompts>> = None;
    for i in 0..total {
        let entry = manifest.cells[i].clone();
        let key = entry.key();
        if entry.status == CellStatus::Complete && key.dir(&opts.out).join("cell.json").exists() {
            progress(Progress::CellEnd {
                index: i,
                total,
                key,
                line: "complete, kept".to_string(),
            });
            continue;
        }
        if entry.status == CellStatus::Skipped {
            progress(Progress::CellEnd {
                index: i,
                total,
                key,
                line: format!("skipped ({})", entry.reason.as_deref().unwrap_or("")),
            });
            continue;
        }
        // A committed folder the manifest did not record (a crash between the two) counts.
        if key.dir(&opts.out).join("cell.json").exists() {
            manifest.cells[i].status = CellStatus::Complete;
            manifest.write(&opts.out)?;
            continue;
        }
        if let Some(why) = refused_contexts.get(&key.context) {
            manifest.cells[i].status = CellStatus::Failed;
            manifest.cells[i].reason = Some(format!(
                "not recorded: the server refused this context's prefill scout ({why})"
            ));
            manifest.write(&opts.out)?;
            progress(Progress::CellEnd {
                index: i,
                total,
                key,
                line: "FAILED: not recorded, the server refused this context".to_string(),
            });
            continue;
        }
        let replay_plan = if key.phase == Phase::Replay {
            let (Some(w), Some(index)) = (&workload, key.replay) else {
                manifest.cells[i].status = CellStatus::Failed;
                manifest.cells[i].reason = Some(
                    "not recorded: a replay cell needs its workload (--replay, as first given)"
                        .to_string(),
                );
                manifest.write(&opts.out)?;
                progress(Progress::CellEnd {
                    index: i,
                    total,
                    key,
                    line: "FAILED: no --replay workload given".to_string(),
                });
                continue;
            };
            let prompts = match &replay_prompts {
                Some(p) => p.clone(),
                None => {
                    let pool = replay_pool(&client, &opts.target, &manifest, &nonce).await?;
                    let block_tokens = manifest
                        .config
                        .replay
                        .as_ref()
                        .map_or(crate::replay::DEFAULT_BLOCK_TOKENS, |r| r.block_tokens);
                    let p = Arc::new(crate::replay::Prompts::new(pool, &nonce, block_tokens));
                    replay_prompts = Some(p.clone());
                    p
                }
            };
            let items = w
                .cells
                .iter()
                .find(|c| c.source.index == index)
                .map(|c| c.items.clone())
                .unwrap_or_default();
            Some(Arc::new(cell::ReplayPlan {
                items,
                prompts,
                model: manifest.model.clone(),
                max_concurrency: manifest
                    .config
                    .replay
                    .as_ref()
                    .and_then(|r| r.max_concurrency),
            }))
        } else {
            None
        };
        let (mut plan, tokens) = match &replay_plan {
            Some(r) => {
                // The priming request's prompt shares no block with the workload.
                let prime = crate::replay::Item {
                    source_row: 0,
                    trace_ns: 0,
                    offset_ns: 0,
                    input_tokens: REPLAY_PRIME_TOKENS,
                    output_tokens: u32::try_from(cell::PRIME_MAX_TOKENS).unwrap_or(16),
                    blocks: vec![u64::MAX - u64::from(key.replay.unwrap_or(0))],
                    expected_cached: 0,
                    skipped: None,
                };
                let body = r.body(&prime);
                (
                    CellPlan {
                        key,
                        body: body.clone(),
                        scout_body: body.clone(),
                        prime_body: body,
                        solo_first_prime: false,
                        prompt_tokens: i32::try_from(REPLAY_PRIME_TOKENS).unwrap_or(64),
                        max_tokens: cell::PRIME_MAX_TOKENS,
                        window: Duration::ZERO,
                        first_request_id: (i as i64 + 1) * REQUEST_ID_STRIDE,
                        requests: 0,
                        rate: None,
                        variants: None,
                        preamble: Vec::new(),
                        replay: replay_plan.clone(),
                    },
                    key.context,
                )
            }
            None => {
                let (prompt, tokens) = match prompts.get(&key.context) {
                    Some(p) => p.clone(),
                    None => {
                        let p = prompt::build(
                            &client,
                            &opts.target,
                            &manifest.model,
                            manifest.config.endpoint,
                            manifest.capabilities.tokenize.as_deref(),
                            key.context,
                            prompt::Seed {
                                context: u64::from(key.context),
                                nonce: &nonce,
                            },
                        )
                        .await
                        .map_err(|source| RecordError::Prompt {
                            context: key.context,
                            source,
                        })?;
                        prompts.insert(key.context, (p.value.clone(), p.tokens));
                        (p.value, p.tokens)
                    }
                };
                let body = |n: u32| -> bytes::Bytes {
                    stream_body(&manifest.model, manifest.config.endpoint, &prompt, n)
                        .to_string()
                        .into()
                };
                // Burst and rate cells give each measured request a prompt of its own, so that
                // their TTFT and E2E latency include a cold prefill, as in `vllm bench serve`;
                // matrix cells share one prompt (primed, as the reference tool measures decode).
                let full = stream_body(
                    &manifest.model,
                    manifest.config.endpoint,
                    &prompt,
                    manifest.config.max_tokens,
                );
                let variants = matches!(key.phase, Phase::Burst | Phase::Rate)
                    .then(|| prompt::Variants::new(&full, manifest.config.endpoint))
                    .flatten()
                    .map(Arc::new);
                let plan = CellPlan {
                    key,
                    body: full.to_string().into(),
                    scout_body: body(u32::try_from(cell::SCOUT_MAX_TOKENS).unwrap_or(16)),
                    prime_body: body(u32::try_from(cell::PRIME_MAX_TOKENS).unwrap_or(16)),
                    solo_first_prime: manifest.config.prefill_mode == Some(PrefillMode::Warmup),
                    prompt_tokens: i32::try_from(tokens).unwrap_or(i32::MAX),
                    max_tokens: i32::try_from(manifest.config.max_tokens).unwrap_or(i32::MAX),
                    window: Duration::from_nanos(
                        u64::try_from(manifest.config.window_ns).unwrap_or(0),
                    ),
                    first_request_id: (i as i64 + 1) * REQUEST_ID_STRIDE,
                    requests: manifest
                        .config
                        .burst
                        .as_ref()
                        .map_or(DEFAULT_BURST_REQUESTS, |b| b.requests),
                    rate: manifest.config.rate.clone(),
                    variants,
                    preamble: Vec::new(),
                    replay: None,
                };
                (plan, tokens)
            }
        };
        // The probe's records go into the first cell this session records.
        plan.preamble = probe_records
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.with_request_id((i as i64 + 2) * REQUEST_ID_STRIDE - 1))
            .collect();
        progress(Progress::CellStart {
            index: i,
            total,
            key,
        });
        let started = std::time::Instant::now();
        let result = match key.phase {
            Phase::Prefill => cell::record_prefill(&ctx, &plan, &opts.out).await,
            Phase::Decode => cell::record_decode(&ctx, &plan, &opts.out).await,
            Phase::Burst => cell::record_burst(&ctx, &plan, &opts.out).await,
            Phase::Rate => cell::record_rate(&ctx, &plan, &opts.out).await,
            Phase::Replay => cell::record_replay(&ctx, &plan, &opts.out).await,
        };
        let prompt_miss = tokens.abs_diff(key.context);
        match result {
            Ok(done) => {
                manifest.cells[i].status = CellStatus::Complete;
                manifest.cells[i].reason = (prompt_miss > 0)
                    .then(|| format!("prompt is {tokens} tokens, {prompt_miss} off the context"));
                let rows = done.meta.files.get("chunks.parquet").map_or(0, |f| f.rows);
                progress(Progress::CellEnd {
                    index: i,
                    total,
                    key,
                    line: format!(
                        "committed: {rows} chunks, {} in {:.1} s",
                        done.tally.requests_line(),
                        started.elapsed().as_secs_f64()
                    ),
                });
            }
            Err(CellError::Abandoned) => {
                return Err(RecordError::Resume(
                    opts.out.clone(),
                    "interrupted".to_string(),
                ));
            }
            Err(e) => {
                // Nothing of a failed cell is kept: its staging folder goes.
                let _ = std::fs::remove_dir_all(key.staging_dir(&opts.out));
                if key.phase == Phase::Prefill
                    && let CellError::Refused(why) = &e
                    && why.permanent
                {
                    refused_contexts.insert(key.context, why.message.clone());
                }
                manifest.cells[i].status = CellStatus::Failed;
                manifest.cells[i].reason = Some(e.to_string());
                progress(Progress::CellEnd {
                    index: i,
                    total,
                    key,
                    line: format!("FAILED: {e}"),
                });
            }
        }
        if prompt_miss > prompt_tolerance {
            manifest.cells[i].status = CellStatus::Failed;
            manifest.cells[i].reason = Some(format!(
                "the prompt is {tokens} tokens by the server's count, {prompt_miss} off the asked {} (tolerance {})",
                key.context, prompt_tolerance
            ));
        }
        manifest.write(&opts.out)?;
        // Uploaded before the next cell starts, so the upload's traffic and CPU do not
        // share a measurement window; a failed upload is tried again after each cell.
        if let Some(store) = &store {
            upload_failed = sync(store, &opts.out, &mut progress).await;
        }
    }
    if let Some(why) = upload_failed {
        return Err(RecordError::Upload(opts.out.clone(), why));
    }
    Ok(manifest)
}

/// The token ids replay blocks are drawn from: the server's own ids for filler text of
/// [`REPLAY_POOL_TOKENS`] tokens (the first left out: it may be a BOS the tokenizer
/// added).
async fn replay_pool(
    client: &reqwest::Client,
    target: &str,
    manifest: &Manifest,
    nonce: &str,
) -> Result<Vec<u32>, RecordError> {
    let p = prompt::build(
        client,
        target,
        &manifest.model,
        Endpoint::Completions,
        manifest.capabilities.tokenize.as_deref(),
        REPLAY_POOL_TOKENS,
        prompt::Seed {
            context: u64::from(REPLAY_POOL_TOKENS),
            nonce,
        },
    )
    .await
    .map_err(|source| RecordError::Prompt {
        context: REPLAY_POOL_TOKENS,
        source,
    })?;
    let pool: Vec<u32> = p
        .value
        .as_array()
        .map(|ids| {
            ids.iter()
                .skip(1)
                .filter_map(|v| v.as_u64().and_then(|v| u32::try_from(v).ok()))
                .collect()
        })
        .unwrap_or_default();
    if pool.is_empty() {
        return Err(RecordError::Prompt {
            context: REPLAY_POOL_TOKENS,
            source: PromptError::NoTokenizer,
        });
    }
    Ok(pool)
}

/// Uploads the complete cells the store lacks and the manifest; on failure, says so
/// and returns why (the recording goes on: everything is on the local disk).
async fn sync(
    store: &crate::store::RunStore,
    run: &std::path::Path,
    progress: &mut impl FnMut(Progress),
) -> Option<String> {
    match store.sync(run).await {
        Ok(0) => None,
        Ok(n) => {
            progress(Progress::Line(format!(
                "uploaded {n} cell{} to {}",
                if n == 1 { "" } else { "s" },
                store.url()
            )));
            None
        }
        Err(e) => {
            progress(Progress::Line(format!(
                "upload to {} failed (tried again after the next cell): {e}",
                store.url()
            )));
            Some(e.to_string())
        }
    }
}

/// Parses a context list like `8K,16K,1000` (K = 1,024 tokens).
pub fn parse_contexts(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (num, mult) = match p.strip_suffix(['K', 'k']) {
                Some(n) => (n, 1024u64),
                None => match p.strip_suffix(['M', 'm']) {
                    Some(n) => (n, 1024 * 1024),
                    None => (p, 1),
                },
            };
            let n: u64 = num
                .parse()
                .map_err(|_| format!("`{p}` is not a token count (e.g. 8K, 16384)"))?;
            u32::try_from(n * mult)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("`{p}` is out of range"))
        })
        .collect()
}

/// Parses a list of request rates like `1,2,4,8,inf` (requests per second, at most
/// three decimals), sorted, without repeats.
pub fn parse_rates(s: &str) -> Result<Vec<tokentrace_schemas::Rate>, String> {
    let mut rates = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            tokentrace_schemas::Rate::parse(p).ok_or_else(|| {
                format!(
                    "`{p}` is not a request rate (requests per second above 0, at most three \
                     decimals, or inf)"
                )
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    rates.sort_unstable();
    rates.dedup();
    Ok(rates)
}

/// Parses a list of modes like `matrix,burst`.
pub fn parse_modes(s: &str) -> Result<Vec<Mode>, String> {
    let mut modes = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            Mode::parse(p).ok_or_else(|| format!("`{p}`: expected matrix, burst, rate or replay"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    modes.sort_unstable();
    modes.dedup();
    Ok(modes)
}

/// Parses a list of positive integers like `1,2,4`.
pub fn parse_list(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<u32>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("`{p}` is not a positive integer"))
        })
        .collect()
}
