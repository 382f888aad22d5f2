//! `manifest.json` (one per run) and `cell.json` (one per cell, the commit mark): serde
//! types decoded strictly, with the schema version checked before anything else so a
//! newer file gives "upgrade" rather than a confusing unknown-field error.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::digest::Sha256;
use crate::error::{Error, Result};
use crate::layout::{CellKey, Phase, Rate};
use crate::str_enum;
use crate::tables::Endpoint;
use crate::{SCHEMA_VERSION, fsutil};

/// Which program wrote a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
    /// The git commit the build was made from (12 hex digits); absent when the build did
    /// not know it, and in runs recorded before builds kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// What the build can do, as its `--version` lists it (`s3`, `rustls`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

impl ToolInfo {
    /// This build of tokentrace's recorder.
    pub fn current() -> Self {
        ToolInfo {
            name: "tokentrace".to_string(),
            version: crate::TOOL_VERSION.to_string(),
            commit: crate::build::commit().map(str::to_string),
            features: crate::build::RECORDER_FEATURES
                .iter()
                .map(|f| f.to_string())
                .collect(),
        }
    }

    /// `name version`, and the commit in brackets where known.
    pub fn label(&self) -> String {
        match &self.commit {
            Some(c) => format!("{} {} ({c})", self.name, self.version),
            None => format!("{} {}", self.name, self.version),
        }
    }
}

/// Maps the run's monotonic clock to wall time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clock {
    /// UTC time (RFC 3339, nanoseconds) at which the monotonic clock read 0 ns.
    pub utc_at_zero: String,
    /// The host's CLOCK_MONOTONIC (ns) at the zero: subtract it from a CLOCK_MONOTONIC
    /// reading of another process on the same host to get run time. Null if unknown.
    pub monotonic_at_zero_ns: Option<i64>,
}

/// The server that was measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Base URL, with any user-info (credentials) removed.
    pub url: String,
    /// Whether an API key was sent (the key itself is never written).
    pub api_key: bool,
}

/// What is known about the serving engine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineInfo {
    /// `vllm`, `sglang`, `tgi`, `llama.cpp`, `tokentrace-sim`, or null when unknown.
    pub name: Option<String>,
    pub version: Option<String>,
    /// Anything else reported (`/version` fields, build info), as strings.
    #[serde(default)]
    pub details: BTreeMap<String, String>,
}

/// What the recorder found the server supports (filled by its probe).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerCapabilities {
    /// The server returned cumulative usage on every chunk when asked.
    pub continuous_usage_stats: Option<bool>,
    /// The server returned token ids per chunk when asked.
    pub return_token_ids: Option<bool>,
    /// `GET /metrics` answered with Prometheus text.
    pub metrics: Option<bool>,
    /// Which tokenize API shape worked, if any.
    pub tokenize: Option<TokenizeShape>,
    /// The server's maximum context (prompt + output) of one request, in tokens.
    pub max_model_len: Option<u32>,
    /// Where `max_model_len` came from (`max_model_len`, `llama.cpp per-slot n_ctx`,
    /// `TGI max_total_tokens`, `llama.cpp n_ctx_train`); absent in older runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len_source: Option<String>,
    /// How `chunks.tokens` was obtained.
    pub token_counting: Option<TokenCounting>,
}

/// Where a `--describe KEY=VALUE` pair is kept in the manifest: each key has one home,
/// decided here for the recorder that writes it and the analyzer that reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Described {
    /// `hardware`: the manifest's `hardware` line.
    Hardware,
    /// `host.*`, `gpu.*`, `engine.*`: the fact of that key (source `--describe`), in
    /// place of what the recorder found.
    Fact,
    /// Any other key: `engine.details["describe.KEY"]`, shown with the hardware.
    Detail,
}

impl Described {
    /// The prefix of a described detail's key in `engine.details`.
    pub const DETAIL_PREFIX: &'static str = "describe.";

    /// Where `key` is kept.
    pub fn of(key: &str) -> Described {
        if key == "hardware" {
            Described::Hardware
        } else if ["host.", "gpu.", "engine."]
            .iter()
            .any(|p| key.starts_with(p))
        {
            Described::Fact
        } else {
            Described::Detail
        }
    }

    /// The `--describe` key of an `engine.details` key that holds a described detail
    /// (older runs kept every described key there: only details count).
    pub fn detail_key(details_key: &str) -> Option<&str> {
        details_key
            .strip_prefix(Self::DETAIL_PREFIX)
            .filter(|k| Self::of(k) == Described::Detail)
    }
}

str_enum! {
    /// How a run's `chunks.tokens` were counted, chosen by the probe from what the
    /// server's stream carries.
    pub enum TokenCounting {
        /// `choices[0].token_ids` lengths.
        TokenIds = "token_ids",
        /// Increases of cumulative `usage.completion_tokens` (continuous usage stats).
        Usage = "usage",
        /// One token per event with text; the final usage, when sent, settles the rest on
        /// the finishing event (the EOS of a `stop` stream streams no text but counts).
        OnePerChunk = "one_per_chunk",
    }
}

impl TokenCounting {
    /// The policy in words, for people.
    pub fn describe(self) -> &'static str {
        match self {
            TokenCounting::TokenIds => "the token ids each streamed event carries",
            TokenCounting::Usage => {
                "the increase of the server's cumulative usage in each streamed event"
            }
            TokenCounting::OnePerChunk => {
                "one token per streamed event; the server's final usage settles the rest"
            }
        }
    }
}

str_enum! {
    /// The shape of `/tokenize` a server answers.
    pub enum TokenizeShape {
        /// vLLM's and SGLang's: `POST /tokenize {"model", "prompt"}` → `{"tokens"}`.
        Vllm = "vllm",
        /// llama.cpp's: `POST /tokenize {"content"}` → `{"tokens"}`.
        LlamaCpp = "llama.cpp",
    }
}

/// How the run was configured (the recorder's settings, after defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub endpoint: Endpoint,
    /// Context lengths in tokens.
    pub contexts: Vec<u32>,
    /// Concurrency levels of the decode phase.
    pub concurrency: Vec<u32>,
    /// Length of each decode measurement window.
    pub window_ns: i64,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    /// Interval between metric scrapes.
    pub scrape_interval_ns: i64,
    /// Longest the readiness warm-up may take.
    pub warmup_timeout_ns: i64,
    /// Longest the drain barrier waits for 0 running / 0 waiting.
    pub drain_timeout_ns: i64,
    /// A stream silent for longer than this ends as `stall_timeout`.
    pub stall_timeout_ns: i64,
    /// Allowed difference between requested and server-counted prompt tokens.
    pub prompt_tolerance_tokens: u32,
    /// The nonce at the start of every prompt, one per recording session (a resumed
    /// run adds its own): no prompt of this run can be served from a cache an earlier
    /// run warmed. Empty in runs recorded before nonces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_nonces: Vec<String>,
    /// How prefill was measured; absent in older runs, which used `scout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_mode: Option<PrefillMode>,
    /// The burst cells' settings; absent in a run without burst cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<BurstConfig>,
    /// The rate cells' settings; absent in a run without rate cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateConfig>,
    /// The replay cells' settings and sources; absent in a run without replay cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayConfig>,
    /// The conversation cells' settings; absent in a run without conversation cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationConfig>,
}

str_enum! {
    /// How a session's think times are drawn.
    pub enum Think {
        /// Every think time is the mean.
        Fixed = "fixed",
        /// Exponential draws of the mean (a user who answers at random moments).
        Exponential = "exponential",
    }
}

/// How a run's conversation cells were recorded (`--conversations`). Each cell keeps
/// its `concurrency` sessions live for `window_ns`: a session sends its turns one after
/// another (the whole history, then a new message), waits a think time after each
/// answer, and a session that ends is replaced by a new one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConversationConfig {
    /// Live sessions of each cell, one cell per level.
    pub sessions: Vec<u32>,
    /// A session's turns, drawn uniformly from `turns_min..=turns_max` (equal: fixed).
    pub turns_min: u32,
    pub turns_max: u32,
    /// Tokens of each turn's new message, as the server's tokenizer counts it alone
    /// (the cells' `context`).
    pub message_tokens: u32,
    /// `max_tokens` of every answer.
    pub answer_tokens: u32,
    /// Whether an answer may end at the model's end of sequence before `answer_tokens`;
    /// false sends `ignore_eos`.
    pub stop_at_eos: bool,
    /// Tokens of the system prompt every session starts with (0: none), shared by all
    /// sessions of the run.
    pub system_tokens: u32,
    /// The agent case: tokens of the tool-result block each turn after the first sends
    /// instead of a user message (chat: a `tool` message); 0: user messages only.
    pub tool_tokens: u32,
    /// How think times are drawn, and their mean.
    pub think: Think,
    pub think_ns: i64,
    /// Seeds the sessions' turn counts and think times, and each request's `seed`.
    pub seed: u64,
    /// Recorded sessions sent again (`--conversations-from`); absent: sessions of
    /// `message_tokens` filler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<SessionsSource>,
}

/// A file of recorded sessions a conversation cell sends again: each session once, its
/// user messages (and tool results) as its turns and its system prompt first, the
/// answers generated live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsSource {
    /// The file as given.
    pub file: String,
    /// SHA-256 of its bytes, lower-case hex.
    pub sha256: String,
    /// Sessions read from it (with at least one user message).
    pub sessions: u32,
}

str_enum! {
    /// The kind of file a replay's workload came from.
    pub enum TraceFormat {
        /// A tokentrace run folder (or one cell of it): its measured requests.
        Tokentrace = "tokentrace",
        /// Mooncake's JSONL: `timestamp` (ms), `input_length`, `output_length`,
        /// `hash_ids` (one id per block of prompt tokens).
        Mooncake = "mooncake",
        /// Azure's LLM inference trace CSV: `TIMESTAMP`, `ContextTokens`,
        /// `GeneratedTokens`.
        Azure = "azure",
        /// BurstGPT's CSV: `Timestamp` (s), `Request tokens`, `Response tokens`.
        Burstgpt = "burstgpt",
    }
}

/// How a run's replay cells were recorded (`--replay`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// The file or run folder given, as given.
    pub from: String,
    pub format: TraceFormat,
    /// Trace time is multiplied by this (0.5 plays twice as fast), in millionths.
    pub time_scale_ppm: u64,
    /// The slice of the trace replayed, in trace time from its first request (ns);
    /// absent ends: from the start, to the end.
    pub window_start_ns: Option<i64>,
    pub window_end_ns: Option<i64>,
    /// At most this many requests per cell.
    pub max_requests: Option<u32>,
    /// Most requests in flight at once (a request due while that many run waits, and
    /// its lag is recorded); null: no cap.
    pub max_concurrency: Option<u32>,
    /// Prompt tokens per hash id (Mooncake's blocks).
    pub block_tokens: u32,
    /// One per replay cell, in cell-number order.
    pub sources: Vec<ReplaySource>,
}

/// Where one replay cell's workload came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaySource {
    /// The replay cell's number (its `replay=<i>` path level).
    pub index: u32,
    /// The source file's name (a run cell: its path from the run folder to the cell's
    /// `requests.parquet`).
    pub file: String,
    /// SHA-256 of that file's bytes, lower-case hex.
    pub sha256: String,
    /// The replayed cell of a tokentrace run (`decode context=1024 concurrency=4`);
    /// absent for a trace file.
    pub source_cell: Option<String>,
    /// Whether the source ran closed loop (a decode or burst cell): its requests are
    /// replayed open loop at their recorded send times.
    pub closed_loop: bool,
    /// Requests taken from the source (after the window and `max_requests`).
    pub requests: u32,
    /// Of those, requests not sent, with the reason in the `replay` table (a prompt and
    /// output over the server's longest request).
    pub skipped: u32,
}

/// How a run's burst cells were recorded (`--mode burst`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BurstConfig {
    /// Measured requests per cell, each run to completion.
    pub requests: u32,
}

/// How a run's rate cells were recorded (`--rates`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateConfig {
    /// The offered rates, one cell per rate and context.
    pub rates: Vec<Rate>,
    pub arrival: crate::schedule::Arrival,
    /// Seeds the Poisson gaps (mixed with each cell's rate).
    pub seed: u64,
    /// Each cell's schedule ends after this many requests …
    pub requests: Option<u32>,
    /// … or at this time after its start, whichever comes first.
    pub duration_ns: Option<i64>,
    /// Most requests in flight at once; a request due while that many run waits (and
    /// its `sent_ns` shows by how much). Null: no cap.
    pub max_concurrency: Option<u32>,
}

str_enum! {
    /// How a run measures prefill.
    pub enum PrefillMode {
        /// One cold scout request per context, in a prefill cell of its own.
        Scout = "scout",
        /// The reference report's "Measured during decode warm-up": no prefill cells;
        /// the first request of each context's first decode cell prefilled cold, and its
        /// TTFT is the measurement.
        Warmup = "warmup",
    }
}

str_enum! {
    /// Where a cell stands.
    pub enum CellStatus {
        /// Not yet recorded.
        Planned = "planned",
        /// Committed: its folder is under cells/ with a complete cell.json.
        Complete = "complete",
        /// Recording failed (reason says why); the run went on.
        Failed = "failed",
        /// Not recorded on purpose (reason says why, e.g. over max_model_len).
        Skipped = "skipped",
        /// The run stopped while this cell was recording; `--resume` redoes it.
        Interrupted = "interrupted",
    }
}

/// One cell in the manifest's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellEntry {
    pub phase: Phase,
    pub context: u32,
    pub concurrency: u32,
    /// A rate cell's offered request rate (`"4"`, `"0.5"`, `"inf"`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// A replay cell's number (`config.replay.sources`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<u32>,
    pub status: CellStatus,
    pub reason: Option<String>,
    /// SHA-256 of the committed cell's `cell.json`, filled in from the folder each time
    /// the manifest is written ([`Manifest::write`]); absent for other cells and in runs
    /// written before checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_sha256: Option<Sha256>,
}

impl CellEntry {
    pub fn key(&self) -> CellKey {
        CellKey {
            phase: self.phase,
            context: self.context,
            concurrency: self.concurrency,
            rate: self.rate,
            replay: self.replay,
        }
    }

    /// A planned cell.
    pub fn planned(key: CellKey) -> Self {
        CellEntry {
            phase: key.phase,
            context: key.context,
            concurrency: key.concurrency,
            rate: key.rate,
            replay: key.replay,
            status: CellStatus::Planned,
            reason: None,
            cell_sha256: None,
        }
    }
}

/// `manifest.json`: what a run is, and the list of its cells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema_version: u32,
    pub tool: ToolInfo,
    pub run_id: String,
    pub clock: Clock,
    pub target: Target,
    /// Model name as served (`model` in requests).
    pub model: String,
    pub engine: EngineInfo,
    /// Hardware as described by the user (free text), if given.
    pub hardware: Option<String>,
    /// The server's launch command as given by the user, secrets redacted.
    pub launch_command: Option<String>,
    /// What the recorder found out by itself about the host, its GPUs and the engine,
    /// sorted by key (absent in runs recorded before facts were gathered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<Fact>,
    pub capabilities: ServerCapabilities,
    pub config: RunConfig,
    pub cells: Vec<CellEntry>,
    /// Set when this folder's `requests` and `chunks` were re-derived from another run
    /// folder's raw capture (`tokentrace reparse`); absent in a recording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reparsed: Option<Reparsed>,
    /// Set when the run was imported from another tool's results (`tokentrace
    /// import`): its cells hold that tool's figures, not a trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<Imported>,
    /// The run's digest: [`crate::digest::cells_digest`] over the committed cells'
    /// `cell_sha256`, so a copy is compared with the original by one line. Filled in by
    /// [`Manifest::write`]; absent in runs written before checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells_sha256: Option<Sha256>,
}

/// One fact about the host, its GPUs or the engine, and where it came from (FORMAT.md
/// lists the keys).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    pub key: String,
    pub value: String,
    /// Where the value came from: a file, an endpoint, `NVML`, `--describe`.
    pub source: String,
}

impl Fact {
    pub fn new(
        key: impl Into<String>,
        value: impl Into<String>,
        source: impl Into<String>,
    ) -> Self {
        Fact {
            key: key.into(),
            value: value.into(),
            source: source.into(),
        }
    }
}

/// The value of fact `key`, if found.
pub fn fact<'a>(facts: &'a [Fact], key: &str) -> Option<&'a str> {
    facts
        .iter()
        .find(|f| f.key == key)
        .map(|f| f.value.as_str())
}

/// Where an imported run's figures came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Imported {
    /// The tool that computed them (`llm-inference-bench`) and its version, as its file
    /// says.
    pub tool: String,
    pub version: String,
    /// The file's name as given, its SHA-256, and where the run folder keeps it byte for
    /// byte (`source/<name>`).
    pub file: String,
    pub sha256: Sha256,
    pub kept_as: String,
    /// When the tool saved the file, as it wrote it (local time, no zone).
    pub saved_at: String,
    /// Whether the tool's run finished (false: interrupted; the cells it had not
    /// finished are missing).
    pub complete: bool,
    /// The fields not imported because no version known to this build has them (a
    /// newer tool's), by path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The tokentrace that imported it.
    pub by: ToolInfo,
}

impl Imported {
    /// The tool and its version, as reports name them (`llm-inference-bench 0.4.18`).
    pub fn source(&self) -> String {
        format!("{} {}", self.tool, self.version)
    }
}

/// Where a reparsed run folder came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reparsed {
    /// The folder it was derived from, as given on the command line.
    pub from: String,
    /// That folder's `run_id` (the same recording: this run keeps it).
    pub from_run_id: String,
    /// The token-counting policy the original recorded.
    pub recorded_token_counting: Option<TokenCounting>,
    /// The policy applied here (also in `capabilities.token_counting`).
    pub token_counting: TokenCounting,
    /// The tool that reparsed it.
    pub tool: ToolInfo,
}

/// Size and checksum of one file of a committed cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileStat {
    /// Rows (tables) or frames (raw capture).
    pub rows: u64,
    pub bytes: u64,
    /// SHA-256 of the file's bytes as committed; absent in cells written before
    /// checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Sha256>,
}

/// `cell.json`: the commit mark of a cell, written last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellMeta {
    pub schema_version: u32,
    /// `tokentrace <version>` of the writer.
    pub created_by: String,
    pub phase: Phase,
    pub context: u32,
    pub concurrency: u32,
    /// A rate cell's offered request rate; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// A replay cell's number; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<u32>,
    /// True only when every file below was written, synced and renamed into place.
    pub complete: bool,
    /// Every file of the cell by name (tables and raw capture).
    pub files: BTreeMap<String, FileStat>,
}

impl CellMeta {
    pub fn key(&self) -> CellKey {
        CellKey {
            phase: self.phase,
            context: self.context,
            concurrency: self.concurrency,
            rate: self.rate,
            replay: self.replay,
        }
    }
}

/// The JSON version a run's manifest (or a cell's commit mark) is written with: the
/// newest its cells need ([`Phase::json_version`]), so that readers which do not know a
/// kind of cell refuse the run as newer, while a matrix-only run stays readable by every
/// v1 reader ([`SCHEMA_VERSION`]).
pub fn json_version<I: IntoIterator<Item = Phase>>(phases: I) -> u32 {
    phases
        .into_iter()
        .map(Phase::json_version)
        .max()
        .unwrap_or(SCHEMA_VERSION)
}

#[derive(Deserialize)]
struct VersionOnly {
    schema_version: Option<serde_json::Value>,
}

/// Reads a JSON file of this format, checking `schema_version` first.
pub fn read_json<T: DeserializeOwned>(path: &Path, what: &'static str) -> Result<T> {
    let bytes = fsutil::read(path, what)?;
    let json_err = |source| Error::Json {
        path: path.to_path_buf(),
        source,
    };
    let v: VersionOnly = serde_json::from_slice(&bytes).map_err(json_err)?;
    match v.schema_version {
        Some(serde_json::Value::Number(n)) => match n.as_u64() {
            Some(found) if found > u64::from(crate::NEWEST_VERSION) => {
                return Err(Error::NewerVersion {
                    path: path.to_path_buf(),
                    found: u32::try_from(found).unwrap_or(u32::MAX),
                    supported: crate::NEWEST_VERSION,
                });
            }
            Some(found) if found >= u64::from(SCHEMA_VERSION) => {}
            _ => {
                return Err(Error::BadVersion {
                    path: path.to_path_buf(),
                    found: n.to_string(),
                    supported: SCHEMA_VERSION,
                });
            }
        },
        Some(other) => {
            return Err(Error::BadVersion {
                path: path.to_path_buf(),
                found: other.to_string(),
                supported: SCHEMA_VERSION,
            });
        }
        None => {
            return Err(Error::BadVersion {
                path: path.to_path_buf(),
                found: "(none)".to_string(),
                supported: SCHEMA_VERSION,
            });
        }
    }
    serde_json::from_slice(&bytes).map_err(json_err)
}

/// Writes pretty JSON atomically: temporary name, fsync, rename, fsync of the folder.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    fsutil::write_atomic(path, &bytes)
}

impl Manifest {
    /// Reads `run/manifest.json`.
    pub fn read(run: &Path) -> Result<Self> {
        read_json(&run.join(crate::layout::MANIFEST_FILE), "run manifest")
    }

    /// Writes `run/manifest.json` atomically, with the version its cells need
    /// ([`json_version`]) and the checksums of its committed cells' `cell.json` as they
    /// are in `run` now ([`Manifest::sealed`]).
    pub fn write(&self, run: &Path) -> Result<()> {
        let mut sealed = self.sealed(run)?;
        sealed.schema_version = if self.imported.is_some() {
            crate::IMPORTED_VERSION
        } else {
            json_version(self.cells.iter().map(|c| c.phase))
        };
        write_json(&run.join(crate::layout::MANIFEST_FILE), &sealed)
    }

    /// This manifest with each complete cell's `cell_sha256` read from its `cell.json`
    /// in `run` (none where the folder has none), and the run's `cells_sha256` over them.
    pub fn sealed(&self, run: &Path) -> Result<Manifest> {
        let mut sealed = self.clone();
        for entry in &mut sealed.cells {
            let path = entry.key().dir(run).join(crate::layout::CELL_FILE);
            entry.cell_sha256 = if entry.status == CellStatus::Complete && path.is_file() {
                Some(Sha256::of_file(&path)?)
            } else {
                None
            };
        }
        sealed.cells_sha256 = sealed.cells_digest();
        Ok(sealed)
    }

    /// The SHA-256 the manifest records for cell `key`'s commit mark, if any.
    pub fn cell_sha256(&self, key: CellKey) -> Option<Sha256> {
        self.cells
            .iter()
            .find(|c| c.key() == key)
            .and_then(|c| c.cell_sha256)
    }

    /// The run's digest over the committed cells' `cell_sha256` as listed (see
    /// [`crate::digest::cells_digest`]); `None` when no cell has one.
    pub fn cells_digest(&self) -> Option<Sha256> {
        let cells: Vec<(String, &Sha256)> = self
            .cells
            .iter()
            .filter_map(|c| {
                let sha = c.cell_sha256.as_ref()?;
                Some((c.key().partition_path().display().to_string(), sha))
            })
            .collect();
        (!cells.is_empty()).then(|| crate::digest::cells_digest(cells))
    }
}

impl CellMeta {
    /// Whether the cell was imported from another tool's results (`tokentrace import`):
    /// it holds that tool's figures (`figures.json`), no tables.
    pub fn is_imported(&self) -> bool {
        self.files.contains_key(crate::layout::FIGURES_FILE)
    }

    /// Rows of the table whose first file is `first` (`chunks.parquet`), its later parts
    /// included, as the commit mark lists them.
    pub fn table_rows(&self, first: &str) -> u64 {
        self.files
            .iter()
            .filter(|(name, _)| {
                *name == first || crate::layout::split_part(name).is_some_and(|(of, _)| of == first)
            })
            .map(|(_, stat)| stat.rows)
            .sum()
    }

    /// Reads `cell_dir/cell.json` and checks that it marks a complete cell.
    pub fn read_complete(cell_dir: &Path) -> Result<Self> {
        let path = cell_dir.join(crate::layout::CELL_FILE);
        let meta: CellMeta = read_json(&path, "cell commit mark (cell.json)")?;
        if !meta.complete {
            return Err(Error::Incomplete {
                path: cell_dir.to_path_buf(),
                reason: "cell.json says complete: false".to_string(),
            });
        }
        Ok(meta)
    }
}
