//! A run's setup, resolved once before any cell: the options, the folder (new, resumed, or
//! downloaded from the object store), the probe, the facts, the manifest (new or resumed)
//! and the settings a resumed run keeps. [`crate::run::runner`] then only loops over cells.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::manifest::{
    BurstConfig, CellEntry, CellStatus, Described, Fact, Manifest, PrefillMode, RateConfig,
    RunConfig, Target, TokenCounting, ToolInfo, fact,
};
use tokentrace_schemas::redact::{redact_command, redact_url};
use tokentrace_schemas::tables::Endpoint;
use tokentrace_schemas::{CellKey, Phase, SCHEMA_VERSION};

use crate::observe::probe::{self, ProbeError, ServerInfo};
use crate::send::http::Transport;
use crate::send::prompt::PromptError;
use crate::send::replay::Workload;
use crate::send::request::endpoint_url;
use crate::store::bucket::RunStore;
use crate::store::cell::{self, RunCtx};
use crate::store::queue::Record;

mod manifest;
use manifest::{new_manifest, resumed_manifest};

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
/// `max_tokens` of each conversation answer when `--answer-tokens` is not given.
pub const DEFAULT_ANSWER_TOKENS: u32 = 128;
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
    /// Multi-turn sessions (`--conversations`), one cell per number of live sessions.
    Conversation,
}

impl Mode {
    /// Parses `matrix`, `burst`, `rate`, `replay` or `conversation`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim() {
            "matrix" => Some(Mode::Matrix),
            "burst" => Some(Mode::Burst),
            "rate" => Some(Mode::Rate),
            "replay" => Some(Mode::Replay),
            "conversation" => Some(Mode::Conversation),
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
    /// The user's keys: skip the cell under way, pause before the next.
    pub steer: Arc<crate::view::steer::Steer>,
    /// The server's gauges as scraped, for the live view.
    pub feed: Arc<crate::observe::gauges::Feed>,
    /// With --resume: record again the cells the user skipped.
    pub retry_skipped: bool,
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
    /// The conversation cells' settings; needed with [`Mode::Conversation`].
    pub conversation: Option<tokentrace_schemas::manifest::ConversationConfig>,
    /// The recorded sessions the conversation cells send again (`--conversations-from`,
    /// read and checked before the run starts); `None`: sessions of filler.
    pub conversation_scripts: Option<Arc<Vec<tokentrace_wire::sessions::Script>>>,
}

/// A replay's settings and its workload, read before any request.
#[derive(Debug, Clone)]
pub struct ReplaySetup {
    pub opts: crate::send::replay::ReplayOptions,
    pub workload: Arc<crate::send::replay::Workload>,
}

/// Where GPU facts and telemetry come from.
#[derive(Debug, Clone, Default)]
pub enum GpuChoice {
    /// NVML when it loads; otherwise none, and the manifest says why.
    #[default]
    Auto,
    /// None (`--gpu-telemetry off`).
    Off,
    /// This source (a simulated box for tests and the built-in simulator).
    Given(Arc<dyn crate::observe::gpu::GpuSource>),
}

impl GpuChoice {
    /// The source, or why there is none.
    fn open(&self) -> Result<Arc<dyn crate::observe::gpu::GpuSource>, String> {
        match self {
            GpuChoice::Auto => crate::observe::gpu::Nvml::load().map(|n| Arc::new(n) as _),
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
    Store(#[from] crate::store::bucket::StoreError),
    #[error(
        "the run is complete in {0}, but uploading it failed: {1}; `--resume` with the same --out and --upload sends the rest"
    )]
    Upload(PathBuf, String),
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
pub(crate) fn auth_headers(api_key: Option<&str>) -> Vec<(String, String)> {
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
    /// The run is set up: its manifest, with every planned cell (nothing to print).
    Plan(Box<Manifest>),
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
        status: CellStatus,
        line: String,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Line(l) => f.write_str(l),
            Progress::Plan(m) => write!(f, "run {}: {} cells", m.run_id, m.cells.len()),
            Progress::CellStart { index, total, key } => {
                write!(f, "[{}/{total}] {key}: recording", index + 1)
            }
            Progress::CellEnd {
                index,
                total,
                key,
                line,
                ..
            } => write!(f, "[{}/{total}] {key}: {line}", index + 1),
        }
    }
}

/// A run set up to record: everything the cell loop needs, resolved once.
pub(crate) struct Session {
    /// Where committed cells and the manifest are uploaded (`--upload`).
    pub store: Option<RunStore>,
    /// Control-plane calls (tokenize, metrics).
    pub client: reqwest::Client,
    /// The run's manifest, new or resumed, with this session's prompt nonce added.
    pub manifest: Manifest,
    /// This session's prompt nonce.
    pub nonce: String,
    /// What every cell is recorded with: the settings kept, the transport, the clock.
    pub ctx: RunCtx,
    /// The probe's stream, written into the first cell this session records.
    pub probe_records: Vec<Record>,
    /// The replay workload, with requests over the server's limit marked skipped.
    pub workload: Option<Arc<Workload>>,
    /// Why the last upload failed, if it did (tried again after each cell).
    pub upload_failed: Option<String>,
}

/// What [`open`] resolved: a plan (`--plan`: nothing sent beyond the probe, nothing
/// written), or a session to record.
pub(crate) enum Opened {
    Plan(Box<Manifest>),
    Run(Box<Session>),
}

/// Resolves the run's setup: the folder, the probe, the facts, the manifest and the
/// settings kept; writes the manifest and uploads what the store lacks.
pub(crate) async fn open(
    opts: &RecordOptions,
    progress: &mut impl FnMut(Progress),
) -> Result<Opened, RecordError> {
    let store = match &opts.upload {
        Some(url) => Some(RunStore::open(url)?),
        None => None,
    };
    let resume = prepare_folder(opts, store.as_ref(), progress).await?;
    let client = http_client(opts.api_key.as_deref())?;
    let transport = transport(opts, opts.endpoint)?;
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
    progress(Progress::Line(server_line(&info)));
    let (facts, gpus) = gather_facts(opts, &info, progress);
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
        resumed_manifest(opts, &info, workload.as_deref())?
    } else {
        if !opts.plan_only {
            std::fs::create_dir_all(&opts.out)
                .map_err(|e| tokentrace_schemas::Error::io(&opts.out, e))?;
        }
        new_manifest(opts, &info, facts, &clock, workload.as_deref())
    };
    manifest.schema_version =
        tokentrace_schemas::manifest::json_version(manifest.cells.iter().map(|c| c.phase));
    if opts.plan_only {
        return Ok(Opened::Plan(Box::new(manifest)));
    }
    // This session's prompts start with a nonce of their own.
    let nonce = nonce(&clock);
    manifest.config.prompt_nonces.push(nonce.clone());
    manifest.write(&opts.out)?;
    // The store gets the manifest, and whatever complete cells it lacks (a resumed
    // run's earlier uploads may have been cut short).
    let mut upload_failed = None;
    if let Some(store) = &store {
        upload_failed = sync(store, &opts.out, progress).await;
    }
    // A resumed run keeps the endpoint it was recorded with.
    let transport = if manifest.config.endpoint == opts.endpoint {
        transport
    } else {
        self::transport(opts, manifest.config.endpoint)?
    };
    let settings = kept_settings(opts, &manifest, progress);
    let ctx = RunCtx {
        client: client.clone(),
        clock,
        transport,
        endpoint: manifest.config.endpoint,
        metrics_url: info.metrics_url.clone(),
        scrape_interval: settings.scrape_interval,
        stall_timeout: settings.stall_timeout,
        warmup_timeout: settings.warmup_timeout,
        drain_timeout: settings.drain_timeout,
        counting: info.counting,
        tokens: opts.progress.clone(),
        writers: opts.writers.clone(),
        gpus,
        steer: opts.steer.clone(),
        feed: opts.feed.clone(),
    };
    Ok(Opened::Run(Box::new(Session {
        store,
        client,
        manifest,
        nonce,
        ctx,
        probe_records: info.probe_records,
        workload,
        upload_failed,
    })))
}

/// Readies the output folder; returns whether the run resumes one. A resume into a
/// folder without a run continues the run in the store (a new box after the old one
/// died): its complete cells come down first.
async fn prepare_folder(
    opts: &RecordOptions,
    store: Option<&RunStore>,
    progress: &mut impl FnMut(Progress),
) -> Result<bool, RecordError> {
    let manifest_path = opts.out.join(tokentrace_schemas::layout::MANIFEST_FILE);
    if let Some(store) = store
        && opts.resume
        && !manifest_path.exists()
        && store.has_run().await?
    {
        let pulled = store.download_run_verified(&opts.out).await?;
        progress(Progress::Line(format!(
            "resuming {}: {} complete cells downloaded into {}",
            store.url(),
            pulled.cells,
            opts.out.display()
        )));
        for (key, reason) in &pulled.refused {
            progress(Progress::Line(format!(
                "resuming {}: cell {key} in the store does not verify, un-committed there and recorded again: {reason}",
                store.url()
            )));
        }
    }
    // A resumed folder without a manifest was stopped before anything was recorded in
    // it: the run starts afresh there.
    let resume = opts.resume && manifest_path.exists();
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
    Ok(resume)
}

/// The measured connection to the generation endpoint.
fn transport(opts: &RecordOptions, endpoint: Endpoint) -> Result<Arc<Transport>, RecordError> {
    Transport::new(
        &endpoint_url(&opts.target, endpoint),
        &auth_headers(opts.api_key.as_deref()),
    )
    .map(Arc::new)
    .map_err(|e| RecordError::Client(e.to_string()))
}

/// What the probe found, in one line for the user.
fn server_line(info: &ServerInfo) -> String {
    let engine: Vec<&str> = [
        info.engine.name.as_deref().or(Some("unknown")),
        info.engine.version.as_deref(),
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.is_empty())
    .collect();
    format!(
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
            .map_or("unknown", TokenCounting::describe),
    )
}

/// The engine's, the host's and the GPUs' facts with the user's `--describe` applied,
/// and the GPU telemetry source (none, and a fact saying why, without one).
fn gather_facts(
    opts: &RecordOptions,
    info: &ServerInfo,
    progress: &mut impl FnMut(Progress),
) -> (Vec<Fact>, Option<Arc<dyn crate::observe::gpu::GpuSource>>) {
    let gpus = opts.gpus.open();
    let mut found = info.facts.clone();
    found.extend(crate::observe::host::facts());
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
    let facts = crate::observe::facts::apply_describe(found, &opts.describe);
    progress(Progress::Line(match &gpus {
        Ok(_) => format!(
            "GPUs: {} × {} · telemetry with every scrape",
            fact(&facts, "gpu.count").unwrap_or("?"),
            fact(&facts, "gpu.name").unwrap_or("unnamed"),
        ),
        Err(why) => format!("GPUs: no telemetry ({why})"),
    }));
    (facts, gpus.ok())
}

/// The settings every cell is recorded with.
struct Settings {
    scrape_interval: Duration,
    stall_timeout: Duration,
    warmup_timeout: Duration,
    drain_timeout: Duration,
}

/// A resumed run keeps the settings it was recorded with, so that every cell of it was
/// measured alike and its manifest tells the truth about all of them; each given
/// setting that differs is named.
fn kept_settings(
    opts: &RecordOptions,
    manifest: &Manifest,
    progress: &mut impl FnMut(Progress),
) -> Settings {
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
    Settings {
        scrape_interval: setting(c.scrape_interval_ns),
        stall_timeout: setting(c.stall_timeout_ns),
        warmup_timeout: setting(c.warmup_timeout_ns),
        drain_timeout: setting(c.drain_timeout_ns),
    }
}

/// Uploads the complete cells the store lacks and the manifest; on failure, says so
/// and returns why (the recording goes on: everything is on the local disk).
pub(crate) async fn sync(
    store: &crate::store::bucket::RunStore,
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
