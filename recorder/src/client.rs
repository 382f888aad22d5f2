//! One streamed request, recorded: sends it, stamps every socket read on the run clock
//! as soon as the read returns (before any parsing), frames and parses the SSE events,
//! and hands chunk rows, raw reads and finally the request's row to the cell's writer.
//! Every way a request can end (finish, HTTP error, error event, disconnect, stall,
//! cancel at window close) ends in a row with its reason; nothing here panics.

use std::time::Duration;

use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::tables::{ChunkKind, ChunkRow, EndReason, Endpoint, RequestRow, Role};
use tokio::sync::{mpsc, oneshot, watch};

use crate::parse::{Parsed, parse};
use crate::sse::SseFramer;

/// Longest error body kept from a non-2xx response.
pub const MAX_ERROR_BODY: usize = 64 * 1024;

/// What goes to a cell's writer.
#[derive(Debug, Clone)]
pub enum Record {
    Chunk(ChunkRow),
    Raw {
        request_id: i64,
        arrival_ns: i64,
        bytes: bytes::Bytes,
    },
    Request(RequestRow),
    /// Samples of one metrics scrape (the server's, or the recorder's own health).
    Metrics(Vec<tokentrace_schemas::tables::MetricRow>),
    Event(tokentrace_schemas::tables::EventRow),
    /// The cell ended normally: commit it. A writer whose channel closes without this
    /// (Ctrl-C, a crash) leaves the cell uncommitted, to be redone by `--resume`.
    Commit,
}

/// How chunk token counts are obtained (see the manifest's `token_counting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCounting {
    /// `choices[0].token_ids` lengths.
    TokenIds,
    /// Increases of cumulative `usage.completion_tokens` (continuous usage stats).
    Usage,
    /// One token per event with text; the final usage, when sent, settles the rest on
    /// the finishing event (the EOS of a `stop` stream streams no text but counts).
    OnePerChunk,
    /// Per event, whatever it carries: token ids, else continuous usage, else one per
    /// text event. For streams whose server was not probed yet (the probe itself).
    Auto,
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub request_id: i64,
    pub slot: Option<i32>,
    pub role: Role,
    pub endpoint: Endpoint,
    /// Full URL of the endpoint.
    pub url: String,
    /// JSON body.
    pub body: bytes::Bytes,
    pub prompt_tokens_requested: i32,
    pub max_tokens: Option<i32>,
}

/// Per-request state while its stream is read.
struct Stream<'a> {
    spec: &'a RequestSpec,
    counting: TokenCounting,
    clock: &'a RunClock,
    seq: i32,
    row: RequestRow,
    /// Cumulative completion tokens reported so far.
    last_cumulative: i32,
    /// Tokens attributed to chunks so far.
    attributed: i32,
    /// Cumulative usage came with text events (continuous usage stats).
    continuous: bool,
    /// The last data row, held back so a later usage chunk can settle its tokens.
    pending: Option<ChunkRow>,
    /// Told the arrival time of the first token, once.
    first_token: Option<oneshot::Sender<i64>>,
}

impl Stream<'_> {
    async fn emit(&mut self, out: &mpsc::Sender<Record>, row: ChunkRow) {
        let _ = out.send(Record::Chunk(row)).await;
    }

    async fn flush_pending(&mut self, out: &mpsc::Sender<Record>) {
        if let Some(row) = self.pending.take() {
            self.emit(out, row).await;
        }
    }

    /// Turns one parsed event into a row, tracking the request's lifecycle.
    async fn on_event(
        &mut self,
        out: &mpsc::Sender<Record>,
        arrival_ns: i64,
        wire_bytes: usize,
        p: Parsed,
    ) {
        self.row.first_chunk_ns.get_or_insert(arrival_ns);
        if let Some(id) = &p.server_id {
            self.row.server_request_id.get_or_insert_with(|| id.clone());
        }
        let kind = p.kind();
        if let Some(u) = p.usage {
            if let Some(prompt) = u.prompt_tokens {
                self.row.prompt_tokens_server = Some(prompt);
            }
            if let Some(cached) = u.cached_tokens {
                self.row.cached_tokens_server = Some(cached);
            }
            if let Some(c) = u.completion_tokens {
                self.row.completion_tokens_server = Some(c);
            }
        }
        let cumulative = p.usage.and_then(|u| u.completion_tokens);
        // A final usage chunk: no text, no finish reason, only usage.
        let is_usage_only = kind == ChunkKind::Data
            && !p.has_text()
            && p.finish_reason.is_none()
            && p.usage.is_some();
        if p.has_text() && cumulative.is_some() {
            self.continuous = true;
        }
        let tokens = match self.counting {
            TokenCounting::TokenIds => {
                p.token_ids
                    .or(if kind == ChunkKind::Data && p.usage.is_none() {
                        Some(0)
                    } else {
                        None
                    })
            }
            TokenCounting::Usage => cumulative.map(|c| c - self.last_cumulative),
            TokenCounting::OnePerChunk => {
                (kind == ChunkKind::Data).then(|| i32::from(p.has_text()))
            }
            TokenCounting::Auto => match (p.token_ids, cumulative) {
                (Some(n), _) => Some(n),
                (None, Some(c)) if self.continuous => Some(c - self.last_cumulative),
                _ => (kind == ChunkKind::Data).then(|| i32::from(p.has_text())),
            },
        };
        // A final usage chunk settles what one-per-chunk counting could not see (the EOS
        // of a `stop` stream) on the held-back finishing row.
        if matches!(
            self.counting,
            TokenCounting::OnePerChunk | TokenCounting::Auto
        ) && is_usage_only
            && let (Some(total), Some(pending)) = (cumulative, self.pending.as_mut())
            && total > self.attributed
            && pending.finish_reason.is_some()
        {
            let extra = total - self.attributed;
            pending.tokens = Some(pending.tokens.unwrap_or(0) + extra);
            self.attributed += extra;
        }
        self.flush_pending(out).await;
        if let Some(c) = cumulative {
            self.last_cumulative = c;
        }
        if let Some(t) = tokens {
            self.attributed += t;
            if t > 0 {
                if let Some(tell) = self.first_token.take() {
                    let _ = tell.send(arrival_ns);
                }
                self.row.first_token_ns.get_or_insert(arrival_ns);
                self.row.last_token_ns = Some(arrival_ns);
            }
        }
        if let Some(f) = &p.finish_reason {
            self.row.finish_reason = Some(f.clone());
        }
        if kind == ChunkKind::Error {
            self.row.end_reason = EndReason::StreamError;
            self.row.error = p.error.clone();
        }
        let row = ChunkRow {
            request_id: self.spec.request_id,
            seq: self.seq,
            arrival_ns,
            // Stamped when the row is built: holding the last data row back (to settle
            // its tokens from a later usage chunk) is bookkeeping, not recorder delay.
            queue_delay_ns: Some(self.clock.now_ns() - arrival_ns),
            bytes: i32::try_from(wire_bytes).unwrap_or(i32::MAX),
            kind,
            tokens,
            completion_tokens: cumulative,
            content: p.content,
            reasoning: p.reasoning,
            finish_reason: p.finish_reason,
            error: p.error,
        };
        self.seq += 1;
        if kind == ChunkKind::Data {
            self.pending = Some(row);
        } else {
            self.emit(out, row).await;
        }
    }
}

/// Why reading stopped early.
enum Stop {
    Cancelled,
    Stalled,
    Failed(String),
}

/// How a request is run, beyond what it is.
#[derive(Debug)]
pub struct RunCtl {
    pub counting: TokenCounting,
    /// A stream silent this long ends as `stall_timeout`.
    pub stall_timeout: Duration,
    /// Turning true closes the connection (the server aborts the request): `cancelled`.
    pub cancel: watch::Receiver<bool>,
    /// Told the arrival time of the first token.
    pub first_token: Option<oneshot::Sender<i64>>,
}

/// Sends `spec` and records it until it ends; the request row is the last record sent.
pub async fn run(
    client: &reqwest::Client,
    spec: &RequestSpec,
    ctl: RunCtl,
    clock: &RunClock,
    out: &mpsc::Sender<Record>,
) {
    let RunCtl {
        counting,
        stall_timeout,
        mut cancel,
        first_token,
    } = ctl;
    let scheduled = clock.now_ns();
    let mut st = Stream {
        spec,
        counting,
        clock,
        seq: 0,
        row: RequestRow {
            request_id: spec.request_id,
            slot: spec.slot,
            role: spec.role,
            endpoint: spec.endpoint,
            prompt_tokens_requested: spec.prompt_tokens_requested,
            prompt_tokens_server: None,
            cached_tokens_server: None,
            completion_tokens_server: None,
            max_tokens: spec.max_tokens,
            scheduled_ns: scheduled,
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
        },
        last_cumulative: 0,
        attributed: 0,
        continuous: false,
        pending: None,
        first_token,
    };
    let request = client
        .post(&spec.url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(spec.body.clone());
    // reqwest writes the request as part of `send`; its start is the closest observable
    // "sent" mark (the body is small and goes out in one write).
    st.row.sent_ns = Some(clock.now_ns());
    let response = tokio::select! {
        r = tokio::time::timeout(stall_timeout, request.send()) => r,
        () = cancelled(&mut cancel) => {
            finish(&mut st, out, Some(Stop::Cancelled)).await;
            return;
        }
    };
    let mut response = match response {
        Err(_) => return finish(&mut st, out, Some(Stop::Stalled)).await,
        Ok(Err(e)) => {
            return finish(
                &mut st,
                out,
                Some(Stop::Failed(format!("request failed: {e}"))),
            )
            .await;
        }
        Ok(Ok(r)) => r,
    };
    st.row.headers_ns = Some(clock.now_ns());
    let status = response.status();
    st.row.http_status = Some(i32::from(status.as_u16()));
    if let Some(id) = response
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
    {
        st.row.server_request_id = Some(id.to_string());
    }
    if !status.is_success() {
        st.row.end_reason = EndReason::HttpError;
        let mut body = Vec::new();
        while let Ok(Some(b)) = response.chunk().await {
            let arrival = clock.now_ns();
            let _ = out
                .send(Record::Raw {
                    request_id: spec.request_id,
                    arrival_ns: arrival,
                    bytes: b.clone(),
                })
                .await;
            body.extend_from_slice(&b[..b.len().min(MAX_ERROR_BODY.saturating_sub(body.len()))]);
        }
        st.row.error = Some(String::from_utf8_lossy(&body).into_owned());
        return finish(&mut st, out, None).await;
    }
    let mut framer = SseFramer::new();
    let stop = loop {
        let read = tokio::select! {
            r = tokio::time::timeout(stall_timeout, response.chunk()) => r,
            () = cancelled(&mut cancel) => break Some(Stop::Cancelled),
        };
        match read {
            Err(_) => break Some(Stop::Stalled),
            Ok(Err(e)) => break Some(Stop::Failed(format!("stream failed: {e}"))),
            Ok(Ok(None)) => break None,
            Ok(Ok(Some(bytes))) => {
                let arrival = clock.now_ns();
                let events = framer.push(&bytes, arrival);
                let _ = out
                    .send(Record::Raw {
                        request_id: spec.request_id,
                        arrival_ns: arrival,
                        bytes,
                    })
                    .await;
                match events {
                    Ok(events) => {
                        for ev in events {
                            let p = parse(&ev);
                            st.on_event(out, ev.arrival_ns, ev.wire_bytes, p).await;
                        }
                    }
                    Err(e) => break Some(Stop::Failed(e.to_string())),
                }
            }
        }
    };
    if stop.is_none() && framer.leftover() > 0 {
        st.row.error = Some(format!(
            "the stream ended inside an event ({} bytes)",
            framer.leftover()
        ));
    }
    finish(&mut st, out, stop).await;
}

/// Resolves when `cancel` turns true; never, if its sender is gone.
async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn finish(st: &mut Stream<'_>, out: &mpsc::Sender<Record>, stop: Option<Stop>) {
    st.flush_pending(out).await;
    st.row.end_ns = Some(st.clock.now_ns());
    match stop {
        Some(Stop::Cancelled) => st.row.end_reason = EndReason::Cancelled,
        Some(Stop::Stalled) => st.row.end_reason = EndReason::StallTimeout,
        Some(Stop::Failed(e)) => {
            if st.row.end_reason != EndReason::StreamError {
                st.row.end_reason = EndReason::Disconnect;
            }
            st.row.error.get_or_insert(e);
        }
        None => {
            if !matches!(
                st.row.end_reason,
                EndReason::StreamError | EndReason::HttpError
            ) {
                st.row.end_reason = match st.row.finish_reason.as_deref() {
                    Some("stop") => EndReason::FinishedStop,
                    Some("length") => EndReason::FinishedLength,
                    Some(_) => EndReason::FinishedOther,
                    None => EndReason::Disconnect,
                };
            }
        }
    }
    let _ = out.send(Record::Request(st.row.clone())).await;
}

impl Record {
    /// The record with its request id replaced (the probe's rows, placed in a cell).
    pub fn with_request_id(self, id: i64) -> Record {
        match self {
            Record::Chunk(mut c) => {
                c.request_id = id;
                Record::Chunk(c)
            }
            Record::Raw {
                arrival_ns, bytes, ..
            } => Record::Raw {
                request_id: id,
                arrival_ns,
                bytes,
            },
            Record::Request(mut q) => {
                q.request_id = id;
                Record::Request(q)
            }
            other => other,
        }
    }
}
