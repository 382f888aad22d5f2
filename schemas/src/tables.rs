//! Trace format v1: the four tables of a cell and the closed value sets their string
//! columns use. Column meanings, units and null rules are documented in FORMAT.md; a
//! test keeps that document and these definitions in step.

use crate::{str_enum, table};

str_enum! {
    /// What an SSE event was.
    pub enum ChunkKind {
        /// A `data:` event carrying JSON.
        Data = "data",
        /// A comment line (`: ...`), e.g. a keep-alive.
        Comment = "comment",
        /// An error event: an `event: error` or a `data:` JSON object with an `error` key.
        Error = "error",
        /// The `data: [DONE]` terminator.
        Done = "done",
    }
}

str_enum! {
    /// Why a request was sent.
    pub enum Role {
        /// The cold first request of a context: its TTFT measures prefill.
        Scout = "scout",
        /// Sent during the readiness warm-up, before the window opened.
        Warmup = "warmup",
        /// Sent by a worker once the window was open.
        Measured = "measured",
        /// A capability probe (stream options, tokenizer), outside the matrix.
        Probe = "probe",
        /// A short request of a decode cell, sent before the warm-up so that the
        /// server's prompt cache holds the prompt for every stream (every slot, on
        /// engines with per-slot caches). Not part of any figure.
        Prime = "prime",
    }
}

str_enum! {
    /// The OpenAI-compatible endpoint a request went to.
    pub enum Endpoint {
        Completions = "completions",
        Chat = "chat",
    }
}

str_enum! {
    /// How a request ended.
    pub enum EndReason {
        /// The server finished with `finish_reason: stop`.
        FinishedStop = "finished_stop",
        /// The server finished with `finish_reason: length`.
        FinishedLength = "finished_length",
        /// The server finished with any other finish reason (kept in `finish_reason`).
        FinishedOther = "finished_other",
        /// The recorder closed the connection at window close.
        Cancelled = "cancelled",
        /// The response status was not 2xx.
        HttpError = "http_error",
        /// The stream carried an error event.
        StreamError = "stream_error",
        /// The connection ended before a finish reason or `[DONE]`.
        Disconnect = "disconnect",
        /// No bytes arrived for longer than the stall timeout.
        StallTimeout = "stall_timeout",
    }
}

str_enum! {
    /// Prometheus metric family type, as declared by `# TYPE`.
    pub enum MetricType {
        Counter = "counter",
        Gauge = "gauge",
        Histogram = "histogram",
        Summary = "summary",
        /// No `# TYPE` line, or `untyped`.
        Untyped = "untyped",
    }
}

str_enum! {
    /// A mark in a cell's (or the run's) life.
    pub enum EventKind {
        RunStart = "run_start",
        CellStart = "cell_start",
        WarmupStart = "warmup_start",
        WarmupEnd = "warmup_end",
        WindowOpen = "window_open",
        WindowClose = "window_close",
        DrainStart = "drain_start",
        DrainEnd = "drain_end",
        CellEnd = "cell_end",
        /// Something went wrong that does not end the run (detail says what).
        Fault = "fault",
        /// Free-form information.
        Note = "note",
    }
}

table!(
    /// The `requests` table: one row per HTTP request.
    Requests,
    /// One request's lifecycle.
    RequestRow, "requests", added = 4 {
        /// Recorder-assigned id, unique within the run.
        request_id: i64,
        /// Closed-loop worker that sent it; null for scouts and probes.
        slot: Option<i32>,
        role: Role,
        endpoint: Endpoint,
        /// Prompt length the recorder asked for.
        prompt_tokens_requested: i32,
        /// `usage.prompt_tokens` as reported by the server.
        prompt_tokens_server: Option<i32>,
        /// `usage.prompt_tokens_details.cached_tokens`.
        cached_tokens_server: Option<i32>,
        /// Final `usage.completion_tokens`.
        completion_tokens_server: Option<i32>,
        max_tokens: Option<i32>,
        scheduled_ns: i64,
        sent_ns: Option<i64>,
        headers_ns: Option<i64>,
        first_chunk_ns: Option<i64>,
        first_token_ns: Option<i64>,
        last_token_ns: Option<i64>,
        end_ns: Option<i64>,
        end_reason: EndReason,
        finish_reason: Option<String>,
        http_status: Option<i32>,
        error: Option<String>,
        server_request_id: Option<String>,
        /// Recorder-assigned id of the TCP connection that carried the request.
        connection_id: Option<i64>,
        /// When a new connection began connecting; null when an open one was reused.
        connect_start_ns: Option<i64>,
        /// When the connection was obtained: connected, or taken open from the worker.
        connection_ns: Option<i64>,
        /// Times the request was sent again on a new connection after its reused one
        /// turned out closed before any response byte.
        retries: Option<i32>,
    }
);

table!(
    /// The `chunks` table: one row per SSE event.
    Chunks,
    /// One SSE event of one request.
    ChunkRow, "chunks", order = Chunks::storage_order {
        request_id: i64,
        /// 0-based position of the event within its request.
        seq: i32,
        /// When the read that completed the event returned.
        arrival_ns: i64,
        /// Time from arrival until the row was handed to the writer.
        queue_delay_ns: Option<i64>,
        /// Bytes of the event on the wire, terminator included.
        bytes: i32,
        kind: ChunkKind,
        /// Tokens carried by this event.
        tokens: Option<i32>,
        /// Cumulative completion tokens after this event, as the server reported.
        completion_tokens: Option<i32>,
        content: Option<String>,
        reasoning: Option<String>,
        finish_reason: Option<String>,
        error: Option<String>,
    }
);

table!(
    /// The `metrics` table: one row per Prometheus sample, long format.
    Metrics,
    /// One sample of one scrape.
    MetricRow, "metrics" {
        scrape_start_ns: i64,
        scrape_end_ns: i64,
        /// Family name from `# TYPE` (histogram samples share their family).
        family: String,
        /// Sample name as exposed (`..._bucket`, `..._sum`, `..._count` for histograms).
        name: String,
        /// Canonical labels: `k="v"` pairs sorted by key, comma-separated, Prometheus escaping.
        labels: String,
        value: f64,
        metric_type: MetricType,
    }
);

table!(
    /// The `events` table: lifecycle marks of the cell.
    Events,
    /// One mark.
    EventRow, "events" {
        time_ns: i64,
        kind: EventKind,
        request_id: Option<i64>,
        detail: Option<String>,
    }
);

table!(
    /// The `gpu` table (optional, added after format v1 first shipped): GPU telemetry,
    /// one row per GPU per sample, on the metrics clock. Absent when the recorder had no
    /// GPU library (NVML) to ask.
    Gpu,
    /// One GPU at one sample.
    GpuRow, "gpu" {
        /// When the sample was read.
        sample_ns: i64,
        /// The GPU's index as NVML numbers them.
        gpu: i32,
        /// The GPU's UUID (`GPU-…`).
        uuid: Option<String>,
        /// Share of the last sample period the GPU ran a kernel, percent.
        utilization_pct: Option<f64>,
        /// Device memory in use, bytes.
        memory_used_bytes: Option<i64>,
        /// Power draw, watts.
        power_w: Option<f64>,
        /// Energy used since the driver loaded, millijoules (a counter).
        energy_mj: Option<i64>,
        /// Streaming-multiprocessor clock, MHz.
        sm_clock_mhz: Option<i32>,
        /// GPU temperature, degrees Celsius.
        temperature_c: Option<i32>,
        /// NVML's clock throttle reasons as a bit mask (0: not throttled).
        throttle_reasons: Option<i64>,
    }
);

table!(
    /// The `replay` table (replay cells only): one row per request taken from the
    /// replayed workload, sent or skipped, with where it came from and what its prompt
    /// shares with the workload's earlier requests.
    Replay,
    /// One request of a replayed workload.
    ReplayRow, "replay" {
        /// The id of the request sent for it (its `requests` row); a skipped request
        /// keeps the id it would have had, and has no `requests` row.
        request_id: i64,
        /// Where it is in the source: the 1-based line of a trace file (a CSV's header
        /// is line 1), or the source run's `request_id`.
        source_row: i64,
        /// Its time in the trace, from the trace's first request, before the time
        /// scale and the window.
        trace_ns: i64,
        /// When it was due, from the cell's schedule start (after scale and window).
        offset_ns: i64,
        /// Prompt tokens the source gives it (and the prompt it was sent).
        input_tokens: i32,
        /// Completion tokens the source gives it (sent as `max_tokens`, with
        /// `ignore_eos`).
        output_tokens: i32,
        /// Leading prompt tokens it shares with an earlier request of the workload (its
        /// leading hash ids × block tokens, capped at its prompt): what a prefix cache
        /// that kept everything could serve.
        expected_cached_tokens: i32,
        /// Why it was not sent (null: it was).
        skipped: Option<String>,
    }
);

table!(
    /// The `turns` table (conversation cells only): one row per turn sent, saying which
    /// session and turn its request was and what of its prompt the session had sent
    /// before.
    Turns,
    /// One turn of one session.
    TurnRow, "turns" {
        /// The turn's request (its `requests` row).
        request_id: i64,
        /// The session, numbered from 1 within the cell in the order sessions started.
        session: i64,
        /// The turn's place in its session, from 1.
        turn: i32,
        /// Turns the session was drawn to run.
        turns: i32,
        /// Tokens of the turn's new message (or tool-result block) as the server's
        /// tokenizer counts it alone (no chat template); null for a message taken from a
        /// sessions file (not counted).
        message_tokens: Option<i32>,
        /// Leading prompt tokens the turn repeats from before: on turn 1 the shared
        /// system prompt's; then the previous turn's `prompt_tokens_server` plus its
        /// `completion_tokens_server` (its prompt and the answer now in the history).
        history_tokens: i32,
        /// Time the session waited between the end of the previous turn's answer and
        /// this turn's send (the think time, as waited); null on turn 1.
        think_ns: Option<i64>,
    }
);

impl RequestRow {
    /// A request about to be sent: what the recorder knows before any byte moves. Every
    /// other field is unknown (null), `end_reason` is `disconnect` until it ends.
    pub fn unsent(request_id: i64, role: Role, endpoint: Endpoint, scheduled_ns: i64) -> Self {
        RequestRow {
            request_id,
            slot: None,
            role,
            endpoint,
            prompt_tokens_requested: 0,
            prompt_tokens_server: None,
            cached_tokens_server: None,
            completion_tokens_server: None,
            max_tokens: None,
            scheduled_ns,
            sent_ns: None,
            headers_ns: None,
            first_chunk_ns: None,
            first_token_ns: None,
            last_token_ns: None,
            end_ns: None,
            end_reason: EndReason::Disconnect,
            finish_reason: None,
            http_status: None,
            error: None,
            server_request_id: None,
            connection_id: None,
            connect_start_ns: None,
            connection_ns: None,
            retries: None,
        }
    }
}

impl Chunks {
    /// Storage order within a block: by request, then position. Consecutive events of
    /// one request make `request_id` a run, `seq` and `completion_tokens` steps of one,
    /// and `arrival_ns` one request's inter-token gaps, which all compress far better than
    /// the interleaved arrival order of N streams.
    pub fn storage_order(a: &ChunkRow, b: &ChunkRow) -> std::cmp::Ordering {
        (a.request_id, a.seq).cmp(&(b.request_id, b.seq))
    }
}

/// The names of every table a cell always has, in documentation order.
pub const TABLE_NAMES: [&str; 4] = ["requests", "chunks", "metrics", "events"];
/// The names of the tables a cell may lack (written only when there is something to
/// write: `gpu` when the recorder read GPU telemetry, `replay` in replay cells, `turns`
/// in conversation cells).
pub const OPTIONAL_TABLE_NAMES: [&str; 3] = ["gpu", "replay", "turns"];

/// Canonical label text: pairs sorted by key (then value), `k="v"` joined by commas,
/// with Prometheus text escaping (`\\`, `\"`, `\n`) of values. No labels gives "".
pub fn canonical_labels<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> String {
    let mut sorted: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .collect();
    sorted.sort_unstable();
    let mut out = String::new();
    for (i, (k, v)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out
}
