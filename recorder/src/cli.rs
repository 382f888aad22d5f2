//! The recorder's command-line options, shared by `tokentrace record` and the slim
//! `tokentrace-record`, and the glue that runs a recording of a target until it ends or
//! Ctrl-C stops it (the built-in simulator is started by `tokentrace record`, not here).

use std::path::PathBuf;
use std::time::Duration;

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::manifest::{
    ConversationConfig, Manifest, PrefillMode, SessionsSource, Think, TraceFormat,
};
use tokentrace_schemas::tables::Endpoint;

use crate::run::runner;
use crate::run::session::{self, Mode, RecordOptions};
use tokentrace_schemas::Rate;
use tokentrace_schemas::manifest::RateConfig;
use tokentrace_schemas::schedule::Arrival;

mod values;
use values::{
    arrival, duration, endpoint, key_value, prefill_mode, replay_window, think, time_scale, turns,
};
pub use values::{parse_contexts, parse_list, parse_modes, parse_rates};

/// Record a context × concurrency matrix (and burst or rate cells) from an
/// OpenAI-compatible server.
#[derive(Debug, Clone, clap::Args)]
pub struct RecordArgs {
    /// Base URL of the server (e.g. http://127.0.0.1:8000). `tokentrace record` without
    /// it starts the built-in simulator on loopback and records a short demo matrix.
    #[arg(long)]
    pub target: Option<String>,
    /// Run folder to create (or to finish, with --resume).
    #[arg(long)]
    pub out: PathBuf,
    /// Model to request; default: the first one the server lists.
    #[arg(long)]
    pub model: Option<String>,
    /// Context lengths, comma-separated; K = 1,024 tokens [default: 8K,16K,32K,64K,128K].
    #[arg(long, value_parser = parse_contexts)]
    pub contexts: Option<std::vec::Vec<u32>>,
    /// Simultaneous requests of the decode cells [default: 1,2,4,8,16,32,64,128].
    #[arg(long, value_parser = parse_list)]
    pub concurrency: Option<std::vec::Vec<u32>>,
    /// Length of each decode measurement window [default: 30s].
    #[arg(long, value_parser = duration)]
    pub duration: Option<Duration>,
    /// max_tokens of each decode request.
    #[arg(long, default_value_t = session::DEFAULT_MAX_TOKENS)]
    pub max_tokens: u32,
    /// Endpoint to stream from: completions or chat.
    #[arg(long, value_parser = endpoint, default_value = "completions")]
    pub endpoint: Endpoint,
    /// Prometheus metrics URL [default: TARGET/metrics].
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Time between metric scrapes.
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub metrics_interval: Duration,
    /// A stream silent this long is ended and recorded as stall_timeout.
    #[arg(long, value_parser = duration, default_value = "10m")]
    pub stall_timeout: Duration,
    /// Longest readiness warm-up of a decode cell.
    #[arg(long, value_parser = duration, default_value = "10m")]
    pub warmup_timeout: Duration,
    /// Longest wait for the server to report nothing running or waiting after a cell
    /// (twice, 0.5 s apart, its token counters unmoved).
    #[arg(long, value_parser = duration, default_value = "5m")]
    pub drain_timeout: Duration,
    /// Most tokens a prompt may differ from its context, as the server counts.
    #[arg(long, default_value_t = session::DEFAULT_PROMPT_TOLERANCE)]
    pub prompt_tolerance: u32,
    /// How prefill is measured: `scout` (a cold scout request per context, in a prefill
    /// cell of its own) or `warmup` (the reference report's "Measured during decode
    /// warm-up": the first request of each context's first decode cell).
    #[arg(long, value_parser = prefill_mode, default_value = "scout")]
    pub prefill_mode: PrefillMode,
    /// Finish an interrupted run in --out: complete cells are kept, the rest redone.
    #[arg(long)]
    pub resume: bool,
    /// A fact for the report (hardware=…, gpu=…, quantization=…); repeatable. A key the
    /// recorder finds by itself (host.os, gpu.name, engine.version, …; see FORMAT.md)
    /// replaces what it found.
    #[arg(long, value_parser = key_value)]
    pub describe: Vec<(String, String)>,
    /// GPU facts and telemetry (utilisation, memory, power, energy, clock, temperature,
    /// throttling) with every metrics scrape: `auto` (through NVML when its library
    /// loads; none otherwise, and the manifest says why) or `off`.
    #[arg(long, value_parser = ["auto", "off"], default_value = "auto")]
    pub gpu_telemetry: String,
    /// Upload each cell as it commits, and the manifest, to this object store:
    /// `s3://bucket/prefix` (credentials, region and endpoint from the AWS_* environment
    /// variables only) or `file:///path`. With --resume into a folder without a run, the
    /// run is continued from there (a new box after the old one died).
    #[arg(long)]
    pub upload: Option<String>,
    /// What to record, comma-separated: `matrix` (prefill and closed-loop decode cells),
    /// `burst` (exactly --requests requests per context × concurrency, each run to
    /// completion: end-to-end latency) and `rate` (open-loop arrivals at each of --rates
    /// per context) [default: matrix, or rate when --rates is given].
    #[arg(long, value_parser = parse_modes)]
    pub mode: Option<std::vec::Vec<Mode>>,
    /// Measured requests of each burst cell.
    #[arg(long, default_value_t = session::DEFAULT_BURST_REQUESTS)]
    pub requests: u32,
    /// Request rates of the rate cells in requests per second, comma-separated; `inf`
    /// sends every request at once (e.g. 1,2,4,8,inf).
    #[arg(long, value_parser = parse_rates)]
    pub rates: Option<std::vec::Vec<Rate>>,
    /// How the rate cells' requests arrive: `poisson` (exponential gaps) or `constant`.
    #[arg(long, value_parser = arrival, default_value = "poisson")]
    pub arrival: Arrival,
    /// Seed of the Poisson arrivals (the same seed gives the same schedule).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Each rate cell sends this many requests (needed for rate `inf`) …
    #[arg(long)]
    pub rate_requests: Option<u32>,
    /// … or sends for this long, whichever ends first [default: --duration, when
    /// --rate-requests is not given].
    #[arg(long, value_parser = duration)]
    pub rate_duration: Option<Duration>,
    /// Most requests in flight in a rate or replay cell; a request due while that many
    /// run waits for one to end (as `vllm bench serve --max-concurrency`), and the wait
    /// is recorded as schedule lag [default: no cap].
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// Replay a workload: a tokentrace run folder (each cell's measured requests, sent
    /// again at their recorded send times with their prompt and completion lengths) or
    /// one cell of it, or a production trace file (Mooncake JSONL, Azure or BurstGPT
    /// CSV). Checked whole before any request; records one replay cell per source.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// The --replay file's format: auto (told from the content, and said), tokentrace,
    /// mooncake, azure or burstgpt.
    #[arg(long, value_parser = ["auto", "tokentrace", "mooncake", "azure", "burstgpt"], default_value = "auto")]
    pub trace_format: String,
    /// Trace time is multiplied by this: 0.5 plays the trace twice as fast, 2 half as
    /// fast.
    #[arg(long, value_parser = time_scale, default_value = "1")]
    pub time_scale: f64,
    /// Only the requests of this slice of the trace, in trace time from its first
    /// request: `START..END` (e.g. 10m..20m, ..90s, 1h..).
    #[arg(long, value_parser = replay_window)]
    pub replay_window: Option<(Option<Duration>, Option<Duration>)>,
    /// At most this many requests of the trace (per replayed cell).
    #[arg(long)]
    pub max_requests: Option<u32>,
    /// Prompt tokens per hash id of a Mooncake trace.
    #[arg(long, default_value_t = crate::send::replay::DEFAULT_BLOCK_TOKENS)]
    pub block_tokens: u32,
    /// The --replay workload, once read (by `check`).
    #[arg(skip)]
    pub workload: std::sync::OnceLock<std::sync::Arc<crate::send::replay::Workload>>,
    /// Probe the server, print the cells this command line would record and those it
    /// would skip (with the reason: a context over the server's limit, a cell over the
    /// KV-cache budget with --skip-over-capacity), and exit without recording or
    /// writing anything.
    #[arg(long)]
    pub plan: bool,
    /// Skip each cell whose context × concurrency (tokens of KV cache its prompts take)
    /// exceeds the engine's KV-cache budget, as the engine reports it (manifest fact
    /// `engine.kv_cache_tokens`); the manifest says why. Without it such cells run.
    #[arg(long)]
    pub skip_over_capacity: bool,
    /// File holding the server's launch command; secrets in it are redacted.
    #[arg(long)]
    pub launch_command_file: Option<PathBuf>,
    /// Environment variable holding the API key (never written anywhere).
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// File holding the API key, instead of the environment.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Record conversation cells: multi-turn sessions, each turn sending the whole
    /// history (with the server's real answers) plus a new message, one cell per number
    /// of live sessions, comma-separated (e.g. 1,4,16,64: the sweep shows where the KV
    /// cache stops holding the conversations). Each cell runs for --duration.
    #[arg(long, value_parser = parse_list)]
    pub conversations: Option<std::vec::Vec<u32>>,
    /// Turns of each conversation: `5`, or `3..8` drawn uniformly (seeded by --seed).
    #[arg(long, value_parser = turns, default_value = "5")]
    pub turns: (u32, u32),
    /// Tokens of each turn's new message (the server's tokenizer counts it alone).
    #[arg(long, value_parser = parse_contexts, default_value = "256")]
    pub message_tokens: std::vec::Vec<u32>,
    /// max_tokens of each conversation answer.
    #[arg(long, default_value_t = session::DEFAULT_ANSWER_TOKENS)]
    pub answer_tokens: u32,
    /// Let a conversation answer end at the model's end of sequence (without it,
    /// ignore_eos is sent and every answer has --answer-tokens tokens).
    #[arg(long)]
    pub stop_at_eos: bool,
    /// Tokens of a system prompt every conversation starts with, shared by all (the
    /// agent case: a long common prefix); 0: none.
    #[arg(long, default_value_t = 0)]
    pub system_tokens: u32,
    /// The agent case: each turn after the first sends a tool-result block of this many
    /// tokens instead of a user message (chat: a `tool` message); 0: user messages only.
    #[arg(long, default_value_t = 0)]
    pub tool_tokens: u32,
    /// Mean think time between an answer and the session's next turn (0s: at once).
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub think: Duration,
    /// Send recorded conversations again instead of filler sessions: a JSON array
    /// (ShareGPT: `conversations` of `from` / `value`) or JSON lines (OpenAI:
    /// `messages` of `role` / `content`). Each session is sent once, its user messages
    /// (and tool results) as its turns after its system prompt; the answers are the
    /// server's, generated live. Read and checked whole before any request.
    #[arg(long)]
    pub conversations_from: Option<PathBuf>,
    /// The --conversations-from sessions, once read (by `check`), with the file's
    /// SHA-256.
    #[arg(skip)]
    pub scripts: std::sync::OnceLock<Scripts>,
    /// How think times are drawn: `exponential` (seeded by --seed) or `fixed`.
    #[arg(long, value_parser = think, default_value = "exponential")]
    pub think_time: Think,
    /// How to show the recording: `screen` (full screen: the tables filling in, the
    /// server's gauges, the event log; keys q stop, s skip the cell, p pause), `live`
    /// (compact, in place) or `plain` (lines) [default: screen on a terminal, plain off
    /// one].
    #[arg(long, value_enum)]
    pub display: Option<crate::view::DisplayMode>,
    /// With --resume: record again the cells skipped with the screen's `s` (they stay
    /// skipped without it).
    #[arg(long)]
    pub retry_skipped: bool,
}

/// A command line that cannot be recorded: one line, exit code 2, nothing written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The base URL a target names: `http://` added when it has no scheme, a trailing `/v1`
/// (the OpenAI path prefix, which the recorder adds itself) and slashes removed. Returns
/// the URL and, when it changed, a note saying how.
pub fn normalize_target(target: &str) -> Result<(String, Option<String>), UsageError> {
    let given = target.trim();
    if given.is_empty() {
        return Err(UsageError("--target is empty".to_string()));
    }
    let mut url = if given.contains("://") {
        given.to_string()
    } else {
        format!("http://{given}")
    };
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| UsageError(format!("--target `{given}`: not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(UsageError(format!(
            "--target `{given}`: scheme `{}` is not http or https",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(UsageError(format!("--target `{given}`: no host")));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(UsageError(format!(
            "--target `{given}`: give the server's base URL, without a query or fragment"
        )));
    }
    while url.ends_with('/') {
        url.pop();
    }
    if let Some(base) = url.strip_suffix("/v1") {
        url = base.trim_end_matches('/').to_string();
    }
    let note = (url != given).then(|| format!("--target `{given}`: recording {url}"));
    Ok((url, note))
}

/// Recorded sessions read from `--conversations-from`, and the SHA-256 of the file.
pub type Scripts = (
    std::sync::Arc<Vec<tokentrace_wire::sessions::Script>>,
    String,
);

/// The shortest conversation message: long enough that rewording its words gives every
/// session and turn a message of its own.
pub const MIN_MESSAGE_TOKENS: u32 = 32;

/// The demo matrix recorded against the built-in simulator when no matrix option is given.
pub const DEMO_CONTEXTS: [u32; 2] = [8192, 32768];
pub const DEMO_CONCURRENCY: [u32; 3] = [1, 8, 32];
pub const DEMO_WINDOW: Duration = Duration::from_secs(5);

impl RecordArgs {
    /// Checks every option before any request is sent or file written: durations and
    /// max tokens above zero, a matrix with something in it, a target that is an
    /// http(s) URL, and an --out that is new (or resumed). Returns notes to print (a
    /// target that was normalized).
    pub fn check(&self) -> Result<Vec<String>, UsageError> {
        let mut notes = Vec::new();
        let durations = [
            ("--duration", self.duration),
            ("--metrics-interval", Some(self.metrics_interval)),
            ("--stall-timeout", Some(self.stall_timeout)),
            ("--warmup-timeout", Some(self.warmup_timeout)),
            ("--drain-timeout", Some(self.drain_timeout)),
            ("--rate-duration", self.rate_duration),
        ];
        for (name, d) in durations {
            if d.is_some_and(|d| d.is_zero()) {
                return Err(UsageError(format!(
                    "{name} 0s: it must be longer than zero"
                )));
            }
        }
        if self.max_tokens == 0 {
            return Err(UsageError(
                "--max-tokens 0: each decode request must ask for at least one token".to_string(),
            ));
        }
        if let Some(url) = &self.upload {
            crate::store::bucket::RunStore::open(url)
                .map_err(|e| UsageError(format!("--upload {e}")))?;
        }
        if self.contexts.as_ref().is_some_and(Vec::is_empty) {
            return Err(UsageError(
                "--contexts is empty: give at least one context length (e.g. 8K,32K)".to_string(),
            ));
        }
        if self.concurrency.as_ref().is_some_and(Vec::is_empty) {
            return Err(UsageError(
                "--concurrency is empty: give at least one level (e.g. 1,8,32)".to_string(),
            ));
        }
        self.check_modes()?;
        self.check_replay(&mut notes)?;
        if let Some(t) = &self.target {
            notes.extend(normalize_target(t)?.1);
        }
        if self.out.exists() && !self.resume && !self.plan {
            return Err(UsageError(format!(
                "--out {}: already exists; give a new folder, or --resume to finish it",
                self.out.display()
            )));
        }
        if self.out.exists() && !self.out.is_dir() {
            return Err(UsageError(format!(
                "--out {}: not a folder",
                self.out.display()
            )));
        }
        Ok(notes)
    }

    /// The modes asked for: --mode, or `replay` with --replay and `rate` with --rates
    /// when --mode is not given, or `matrix`.
    pub fn modes(&self) -> Vec<Mode> {
        if let Some(m) = &self.mode {
            return m.clone();
        }
        let mut modes = Vec::new();
        if self.rates.is_some() {
            modes.push(Mode::Rate);
        }
        if self.replay.is_some() {
            modes.push(Mode::Replay);
        }
        if self.conversations.is_some() {
            modes.push(Mode::Conversation);
        }
        if modes.is_empty() {
            modes.push(Mode::Matrix);
        }
        modes
    }

    /// The replay's settings as the command line gives them.
    pub fn replay_options(&self) -> Option<crate::send::replay::ReplayOptions> {
        let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        self.replay
            .as_ref()
            .map(|from| crate::send::replay::ReplayOptions {
                from: from.clone(),
                format: TraceFormat::parse(&self.trace_format),
                time_scale: self.time_scale,
                window: self
                    .replay_window
                    .map_or((None, None), |(a, b)| (a.map(ns), b.map(ns))),
                max_requests: self.max_requests,
                max_concurrency: self.max_concurrency,
                block_tokens: self.block_tokens,
            })
    }

    /// Reads and checks the --replay workload (once); notes say what was found.
    fn check_replay(&self, notes: &mut Vec<String>) -> Result<(), UsageError> {
        let replay = self.modes().contains(&Mode::Replay);
        let Some(opts) = self.replay_options() else {
            if replay {
                return Err(UsageError(
                    "--mode replay needs --replay FILE_OR_RUN (a run folder, or a Mooncake, Azure or BurstGPT trace)"
                        .to_string(),
                ));
            }
            for (given, name) in [
                (self.replay_window.is_some(), "--replay-window"),
                (self.max_requests.is_some(), "--max-requests"),
            ] {
                if given {
                    return Err(UsageError(format!("{name} is for --replay")));
                }
            }
            return Ok(());
        };
        if !replay {
            return Err(UsageError(
                "--replay is given but --mode has no `replay`: add it (e.g. --mode matrix,replay)"
                    .to_string(),
            ));
        }
        if self.endpoint != Endpoint::Completions {
            return Err(UsageError(
                "--replay sends token ids (exact prompt lengths and shared prefixes): it needs \
                 --endpoint completions"
                    .to_string(),
            ));
        }
        if self.max_requests == Some(0) {
            return Err(UsageError(
                "--max-requests 0: a replay needs at least one request".to_string(),
            ));
        }
        if self.workload.get().is_none() {
            let w = crate::send::replay::load(&opts, &mut |n| notes.push(n))
                .map_err(|e| UsageError(format!("--replay {e}")))?;
            let _ = self.workload.set(std::sync::Arc::new(w));
        }
        Ok(())
    }

    fn check_modes(&self) -> Result<(), UsageError> {
        let modes = self.modes();
        let bad = |m: &str| Err(UsageError(m.to_string()));
        if modes.is_empty() {
            return bad("--mode is empty: give matrix, burst, rate, replay or conversation");
        }
        self.check_conversations(&modes)?;
        let rate = modes.contains(&Mode::Rate);
        match &self.rates {
            None if rate => return bad("--mode rate needs --rates (e.g. --rates 1,2,4,8,inf)"),
            Some(r) if r.is_empty() => {
                return bad("--rates is empty: give at least one rate (e.g. 1,2,4)");
            }
            Some(_) if !rate => {
                return bad(
                    "--rates is given but --mode has no `rate`: add it (e.g. --mode matrix,rate)",
                );
            }
            _ => {}
        }
        if !rate {
            let open = modes.contains(&Mode::Replay);
            for (given, name) in [
                (self.rate_requests.is_some(), "--rate-requests"),
                (self.rate_duration.is_some(), "--rate-duration"),
                (self.max_concurrency.is_some() && !open, "--max-concurrency"),
            ] {
                if given {
                    return Err(UsageError(format!(
                        "{name} is for rate cells, but --mode has no `rate`"
                    )));
                }
            }
        }
        if modes.contains(&Mode::Burst) && self.requests == 0 {
            return bad("--requests 0: a burst cell needs at least one request");
        }
        if self.rate_requests == Some(0) {
            return bad("--rate-requests 0: a rate cell needs at least one request");
        }
        if self.max_concurrency == Some(0) {
            return bad("--max-concurrency 0: at least one request must be allowed in flight");
        }
        if rate
            && self.rate_requests.is_none()
            && self.rates.as_ref().is_some_and(|r| r.contains(&Rate::INF))
        {
            return bad(
                "--rates inf sends every request at once: give --rate-requests to say how many",
            );
        }
        Ok(())
    }

    /// Checks the conversation options: sessions given with the mode, one message
    /// length long enough to reword, answers of at least one token.
    fn check_conversations(&self, modes: &[Mode]) -> Result<(), UsageError> {
        let bad = |m: &str| Err(UsageError(m.to_string()));
        let on = modes.contains(&Mode::Conversation);
        match &self.conversations {
            None if on => {
                return bad(
                    "--mode conversation needs --conversations (e.g. --conversations 1,4,16)",
                );
            }
            Some(c) if c.is_empty() => {
                return bad("--conversations is empty: give at least one number of sessions");
            }
            Some(_) if !on => {
                return bad(
                    "--conversations is given but --mode has no `conversation`: add it \
                     (e.g. --mode matrix,conversation)",
                );
            }
            _ => {}
        }
        if self.conversations_from.is_some() && !on {
            return bad(
                "--conversations-from needs --conversations (the live sessions of each cell)",
            );
        }
        if !on {
            return Ok(());
        }
        self.read_scripts()?;
        if self.message_tokens.len() != 1 {
            return bad("--message-tokens takes one length (e.g. 256)");
        }
        if self
            .message_tokens
            .first()
            .is_some_and(|&m| m < MIN_MESSAGE_TOKENS)
        {
            return Err(UsageError(format!(
                "--message-tokens: at least {MIN_MESSAGE_TOKENS}, so that every session's \
                 messages are its own"
            )));
        }
        if self.answer_tokens == 0 {
            return bad("--answer-tokens 0: each answer must ask for at least one token");
        }
        if (1..MIN_MESSAGE_TOKENS).contains(&self.tool_tokens) {
            return Err(UsageError(format!(
                "--tool-tokens: 0, or at least {MIN_MESSAGE_TOKENS}, so that every tool \
                 result is its own"
            )));
        }
        Ok(())
    }

    /// Reads and checks the --conversations-from sessions (once).
    fn read_scripts(&self) -> Result<(), UsageError> {
        let Some(path) = &self.conversations_from else {
            return Ok(());
        };
        if self.scripts.get().is_some() {
            return Ok(());
        }
        let said = |e: String| UsageError(format!("--conversations-from {}: {e}", path.display()));
        let bytes = std::fs::read(path).map_err(|e| said(e.to_string()))?;
        let (scripts, _) =
            tokentrace_wire::sessions::parse(&bytes).map_err(|e| said(e.to_string()))?;
        let sha = tokentrace_schemas::digest::Sha256::of_bytes(&bytes).to_string();
        let _ = self.scripts.set((std::sync::Arc::new(scripts), sha));
        Ok(())
    }

    /// The conversation cells' settings as the command line gives them.
    fn conversation(&self) -> Option<ConversationConfig> {
        self.conversations
            .clone()
            .map(|sessions| ConversationConfig {
                sessions,
                turns_min: self.turns.0,
                turns_max: self.turns.1,
                message_tokens: self.message_tokens.first().copied().unwrap_or(256),
                answer_tokens: self.answer_tokens,
                stop_at_eos: self.stop_at_eos,
                system_tokens: self.system_tokens,
                tool_tokens: self.tool_tokens,
                think: self.think_time,
                think_ns: i64::try_from(self.think.as_nanos()).unwrap_or(i64::MAX),
                seed: self.seed,
                from: self
                    .conversations_from
                    .as_ref()
                    .zip(self.scripts.get())
                    .map(|(path, (scripts, sha))| SessionsSource {
                        file: path.display().to_string(),
                        sha256: sha.clone(),
                        sessions: u32::try_from(scripts.len()).unwrap_or(u32::MAX),
                    }),
            })
    }

    /// Options for a target (`target` replaces a missing --target).
    pub fn options(&self, target: &str) -> Result<RecordOptions, String> {
        let demo = self.target.is_none()
            && self.contexts.is_none()
            && self.concurrency.is_none()
            && self.duration.is_none();
        let api_key = match &self.api_key_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| format!("{}: {e}", f.display()))?
                    .trim()
                    .to_string(),
            ),
            None => std::env::var(&self.api_key_env)
                .ok()
                .filter(|k| !k.is_empty()),
        };
        let launch_command = match &self.launch_command_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| format!("{}: {e}", f.display()))?
                    .trim()
                    .to_string(),
            ),
            None => None,
        };
        let window = self.duration.unwrap_or(if demo {
            DEMO_WINDOW
        } else {
            session::DEFAULT_WINDOW
        });
        Ok(RecordOptions {
            target: normalize_target(target).map_err(|e| e.0)?.0,
            out: self.out.clone(),
            model: self.model.clone(),
            endpoint: self.endpoint,
            contexts: self.contexts.clone().unwrap_or_else(|| {
                if demo {
                    DEMO_CONTEXTS.to_vec()
                } else {
                    session::DEFAULT_CONTEXTS.to_vec()
                }
            }),
            concurrency: self.concurrency.clone().unwrap_or_else(|| {
                if demo {
                    DEMO_CONCURRENCY.to_vec()
                } else {
                    session::DEFAULT_CONCURRENCY.to_vec()
                }
            }),
            window,
            max_tokens: self.max_tokens,
            metrics_url: self.metrics_url.clone(),
            scrape_interval: self.metrics_interval,
            stall_timeout: self.stall_timeout,
            warmup_timeout: self.warmup_timeout,
            drain_timeout: self.drain_timeout,
            prompt_tolerance: self.prompt_tolerance,
            resume: self.resume,
            describe: self.describe.clone(),
            launch_command,
            api_key,
            prefill_mode: self.prefill_mode,
            progress: Default::default(),
            writers: Default::default(),
            steer: Default::default(),
            feed: Default::default(),
            retry_skipped: self.retry_skipped,
            upload: self.upload.clone(),
            skip_over_capacity: self.skip_over_capacity,
            modes: self.modes(),
            plan_only: self.plan,
            burst_requests: self.requests,
            rate: self.rates.clone().map(|rates| RateConfig {
                rates,
                arrival: self.arrival,
                seed: self.seed,
                requests: self.rate_requests,
                duration_ns: match (self.rate_duration, self.rate_requests) {
                    (Some(d), _) => Some(d),
                    (None, Some(_)) => None,
                    (None, None) => Some(window),
                }
                .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
                max_concurrency: self.max_concurrency,
            }),
            replay: match self.replay_options() {
                Some(opts) => Some(session::ReplaySetup {
                    workload: match self.workload.get() {
                        Some(w) => w.clone(),
                        None => std::sync::Arc::new(
                            crate::send::replay::load(&opts, &mut |_| {})
                                .map_err(|e| format!("--replay {e}"))?,
                        ),
                    },
                    opts,
                }),
                None => None,
            },
            conversation: self.conversation(),
            conversation_scripts: self.scripts.get().map(|(s, _)| s.clone()),
            gpus: if self.gpu_telemetry == "off" {
                session::GpuChoice::Off
            } else {
                session::GpuChoice::Auto
            },
        })
    }
}

/// How a recording ended.
#[derive(Debug)]
pub enum Outcome {
    Done(Box<Manifest>),
    /// `--plan`: the cells that would be recorded; nothing was written.
    Planned(Box<Manifest>),
    /// Ctrl-C: lines saying what became of the cell in flight; `--resume` finishes the
    /// run.
    Interrupted(Vec<String>),
}

/// The plan of a run (`--plan`), one line per cell: `record` or `skip`, the cell, and
/// why it is skipped; then a count.
pub fn plan_lines(m: &Manifest) -> Vec<String> {
    use tokentrace_schemas::manifest::CellStatus;
    let mut lines: Vec<String> = m
        .cells
        .iter()
        .map(|c| match c.status {
            CellStatus::Skipped => {
                format!("skip    {}: {}", c.key(), c.reason.as_deref().unwrap_or(""))
            }
            _ => format!("record  {}", c.key()),
        })
        .collect();
    let skipped = m
        .cells
        .iter()
        .filter(|c| c.status == CellStatus::Skipped)
        .count();
    lines.push(format!(
        "{} cells: {} to record, {skipped} skipped (nothing was recorded: --plan)",
        m.cells.len(),
        m.cells.len() - skipped
    ));
    lines
}

/// Longest wait, after Ctrl-C, for a commit under way to finish.
pub const COMMIT_WAIT: Duration = Duration::from_secs(60);

/// How a finished run ends for the shell: 0 when every cell is complete, 1 when any cell
/// failed, 3 when some were skipped and none failed; with a line naming them.
pub fn finished(m: &Manifest) -> (u8, Option<String>) {
    use tokentrace_schemas::manifest::CellStatus;
    let count = |s: CellStatus| m.cells.iter().filter(|c| c.status == s).count();
    let (failed, skipped) = (count(CellStatus::Failed), count(CellStatus::Skipped));
    let total = m.cells.len();
    let first = |s: CellStatus| {
        m.cells
            .iter()
            .find(|c| c.status == s)
            .map(|c| {
                format!(
                    "{}: {}",
                    c.key(),
                    c.reason.as_deref().unwrap_or("no reason")
                )
            })
            .unwrap_or_default()
    };
    if failed > 0 {
        (
            1,
            Some(format!(
                "{failed} of {total} cells failed (first: {})",
                first(CellStatus::Failed)
            )),
        )
    } else if skipped > 0 {
        (
            3,
            Some(format!(
                "{skipped} of {total} cells skipped (first: {})",
                first(CellStatus::Skipped)
            )),
        )
    } else {
        (0, None)
    }
}

/// Runs a recording of `--target` on `rt`. The slim recorder has no simulator: without a
/// target it says where the built-in one is.
pub fn run(args: &RecordArgs, rt: &tokio::runtime::Runtime) -> Result<Outcome, String> {
    match &args.target {
        Some(t) => run_at(args, t, None, rt),
        None => Err(
            "no --target: name the server to record (`tokentrace record` without --target \
             records the built-in simulator)"
                .to_string(),
        ),
    }
}

/// Runs a recording of `target` on `rt` (the built-in simulator's URL when `args` has no
/// --target: the demo matrix applies then).
pub fn run_at(
    args: &RecordArgs,
    target: &str,
    gpus: Option<session::GpuChoice>,
    rt: &tokio::runtime::Runtime,
) -> Result<Outcome, String> {
    rt.block_on(async {
        let mut opts = args.options(target)?;
        // A given GPU source (the built-in simulator's) replaces NVML, unless turned off.
        if let Some(g) = gpus
            && args.gpu_telemetry != "off"
        {
            opts.gpus = g;
        }
        // A plan is printed, not watched: no screen to flash up and away.
        let (mode, note) = if opts.plan_only {
            (crate::view::DisplayMode::Plain, None)
        } else {
            crate::view::choose(args.display)
        };
        if let Some(n) = note {
            eprintln!("{n}");
        }
        let mut view = crate::view::View::new(mode, &opts);
        let outcome = tokio::select! {
            r = runner::record(&opts, |p| view.show(p)) => {
                r.map(|m| if opts.plan_only {
                    Outcome::Planned(Box::new(m))
                } else {
                    Outcome::Done(Box::new(m))
                })
                .map_err(|e| e.to_string())
            }
            _ = tokio::signal::ctrl_c() => Ok(Outcome::Interrupted(Vec::new())),
            () = opts.steer.quit.notified() => Ok(Outcome::Interrupted(Vec::new())),
        };
        view.finish(match &outcome {
            Ok(Outcome::Interrupted(_)) => Some(
                "stopped: the cell under way is not kept; finish the run with --resume".to_string(),
            ),
            Ok(_) => Some("finished".to_string()),
            Err(e) => Some(format!("stopped: {e}")),
        });
        if matches!(outcome, Ok(Outcome::Interrupted(_))) {
            // A commit already under way finishes (its writer is a thread of its own);
            // a cell that had not reached its commit is dropped. Then the manifest is
            // made to say what is on disk.
            use std::sync::atomic::Ordering;
            opts.writers.stop.store(true, Ordering::Release);
            let deadline = std::time::Instant::now() + COMMIT_WAIT;
            while opts.writers.running.load(Ordering::Acquire) > 0
                && std::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            return Ok(Outcome::Interrupted(settle_interrupted(&opts.out)));
        }
        outcome
    })
}

/// After Ctrl-C, once no cell writer runs: the manifest is made to match the disk. A
/// cell whose commit finished is `complete`; a cell that was recording (its staging
/// folder exists) is `interrupted` and its staging folder goes. Returns what it did, one
/// line per cell.
pub fn settle_interrupted(run: &std::path::Path) -> Vec<String> {
    use tokentrace_schemas::layout::{CELL_FILE, STAGING_DIR};
    use tokentrace_schemas::manifest::CellStatus;
    let Ok(mut m) = Manifest::read(run) else {
        return vec!["stopped before the manifest was written: nothing recorded".to_string()];
    };
    let staging = run.join(STAGING_DIR);
    let mut said = Vec::new();
    let mut changed = false;
    for c in &mut m.cells {
        let key = c.key();
        let committed = key.dir(run).join(CELL_FILE).exists();
        if committed && c.status != CellStatus::Complete {
            c.status = CellStatus::Complete;
            c.reason = None;
            changed = true;
            said.push(format!("{key}: its commit finished before the stop; kept"));
        } else if !committed && key.staging_dir(run).exists() {
            c.status = CellStatus::Interrupted;
            c.reason = Some("stopped by Ctrl-C while recording; --resume redoes it".to_string());
            changed = true;
            said.push(format!(
                "{key}: stopped before its commit; not kept, --resume redoes it"
            ));
        }
    }
    if changed && let Err(e) = m.write(run) {
        said.push(format!("could not update the manifest: {e}"));
    }
    if staging.exists()
        && let Err(e) = std::fs::remove_dir_all(&staging)
    {
        said.push(format!("could not remove {}: {e}", staging.display()));
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_normalized_or_refused() {
        let ok = |t: &str| normalize_target(t).map(|(u, _)| u).map_err(|e| e.0);
        assert_eq!(
            ok("http://127.0.0.1:8000").as_deref(),
            Ok("http://127.0.0.1:8000")
        );
        assert_eq!(ok("localhost:8000").as_deref(), Ok("http://localhost:8000"));
        assert_eq!(
            ok("https://h.example/v1/").as_deref(),
            Ok("https://h.example")
        );
        assert_eq!(ok("http://h:1/serve/v1").as_deref(), Ok("http://h:1/serve"));
        assert!(normalize_target("http://h:1").expect("ok").1.is_none());
        assert!(normalize_target("h:1").expect("ok").1.is_some(), "a note");
        assert!(ok("ftp://h").is_err_and(|e| e.contains("ftp")));
        assert!(ok("http://h/?x=1").is_err());
        assert!(ok("").is_err());
        assert!(ok("http://").is_err());
    }
}
