//! One request's timestamped body reads -> its `chunks` rows and the `requests` fields
//! they determine (first chunk and token times, usage, finish and end reason, errors),
//! under a token-counting policy. The recorder feeds it live, `reparse` feeds it from
//! `raw.sse.zst`: both get the same rows from the same bytes.

use std::borrow::Cow;

use tokentrace_schemas::manifest::TokenCounting;
use tokentrace_schemas::tables::{ChunkKind, ChunkRow, EndReason, RequestRow};

use crate::event::{Parsed, parse};
use crate::sse::{EventTooLong, SseFramer};

/// Longest error body kept from a non-2xx response.
pub const MAX_ERROR_BODY: usize = 64 * 1024;

/// How the assembler counts a stream's tokens: by a run's recorded policy, or `Auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// The policy the probe chose (the manifest's `capabilities.token_counting`).
    Policy(TokenCounting),
    /// Per event, whatever it carries: token ids, else continuous usage, else one per
    /// text event. For streams whose server was not probed yet (the probe itself).
    Auto,
}

impl From<TokenCounting> for Counting {
    fn from(policy: TokenCounting) -> Self {
        Counting::Policy(policy)
    }
}

/// How the transport saw the request end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The response ended as HTTP says it should (or the server closed a body that
    /// runs to the end of the connection).
    Clean,
    /// The recorder closed the connection (window close).
    Cancelled,
    /// No bytes for longer than the stall timeout; where it stalled, in words (the row's
    /// error unless the server's error body says more).
    Stalled(Option<String>),
    /// The transport failed (connect, write, read, a body cut short): why.
    Failed(String),
}

/// What a stream's text events carried, as the assembler saw them: what the probe
/// learns a server's streams hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// Token ids (`choices[0].token_ids`).
    pub token_ids: bool,
    /// Cumulative usage (continuous usage stats).
    pub continuous_usage: bool,
    /// A reasoning channel (`reasoning_content` or `reasoning`).
    pub reasoning: bool,
}

/// One request's stream being assembled.
#[derive(Debug)]
pub struct Assembler {
    counting: Counting,
    framer: SseFramer,
    row: RequestRow,
    seq: i32,
    /// Cumulative completion tokens reported so far.
    last_cumulative: i32,
    /// Tokens attributed to chunks so far.
    attributed: i32,
    /// What the text events carried; `seen.continuous_usage` decides `Auto` counting.
    seen: Seen,
    /// The last data row, held back so a later usage chunk can settle its tokens.
    pending: Option<ChunkRow>,
    /// The body of a non-2xx response, up to [`MAX_ERROR_BODY`] bytes.
    error_body: Option<Vec<u8>>,
}

impl Assembler {
    /// Starts a request whose row holds what the transport knows (ids, role, times,
    /// connection). The fields the stream determines (usage, first chunk and token
    /// times, finish, status, error, end) are cleared here and set from the reads on, so
    /// a recorded row can be given as it is (`reparse`).
    pub fn new(counting: impl Into<Counting>, row: RequestRow) -> Self {
        Assembler {
            counting: counting.into(),
            framer: SseFramer::new(),
            row: RequestRow {
                prompt_tokens_server: None,
                cached_tokens_server: None,
                completion_tokens_server: None,
                first_chunk_ns: None,
                first_token_ns: None,
                last_token_ns: None,
                end_ns: None,
                end_reason: EndReason::Disconnect,
                finish_reason: None,
                http_status: None,
                error: None,
                ..row
            },
            seq: 0,
            last_cumulative: 0,
            attributed: 0,
            seen: Seen::default(),
            pending: None,
            error_body: None,
        }
    }

    /// The row as assembled so far (the transport sets its times through this).
    pub fn row_mut(&mut self) -> &mut RequestRow {
        &mut self.row
    }

    /// The row as assembled so far.
    pub fn row(&self) -> &RequestRow {
        &self.row
    }

    /// Arrival of the first event that carried a token, once one has.
    pub fn first_token_ns(&self) -> Option<i64> {
        self.row.first_token_ns
    }

    /// The response status: a non-2xx one makes the body an error text, not a stream.
    pub fn status(&mut self, status: u16) {
        self.row.http_status = Some(i32::from(status));
        if !(200..300).contains(&status) {
            self.row.end_reason = EndReason::HttpError;
            self.error_body = Some(Vec::new());
        }
    }

    /// Takes one read of the response body, and appends the rows of the events it
    /// completed to `out`. `stamp` gives the run clock's time when a row is built (its
    /// queue delay). An event longer than the framer's bound is an error: the transport
    /// stops reading and ends the request as failed with it.
    pub fn read(
        &mut self,
        arrival_ns: i64,
        bytes: &[u8],
        stamp: &mut impl FnMut() -> i64,
        out: &mut Vec<ChunkRow>,
    ) -> Result<(), EventTooLong> {
        if let Some(body) = &mut self.error_body {
            let room = MAX_ERROR_BODY.saturating_sub(body.len());
            body.extend_from_slice(&bytes[..bytes.len().min(room)]);
            return Ok(());
        }
        let mut framer = std::mem::take(&mut self.framer);
        let r = framer.push_each(bytes, arrival_ns, |ev| {
            let p = parse(&ev);
            self.on_event(ev.arrival_ns, ev.wire_bytes, p, stamp, out);
        });
        self.framer = framer;
        r
    }

    /// Turns one parsed event into a row, tracking the request's lifecycle.
    fn on_event(
        &mut self,
        arrival_ns: i64,
        wire_bytes: usize,
        p: Parsed<'_>,
        stamp: &mut impl FnMut() -> i64,
        out: &mut Vec<ChunkRow>,
    ) {
        self.row.first_chunk_ns.get_or_insert(arrival_ns);
        if let Some(id) = &p.server_id {
            self.row
                .server_request_id
                .get_or_insert_with(|| id.to_string());
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
        let has_text = p.has_text();
        // A final usage chunk: no text, no finish reason, only usage.
        let is_usage_only =
            kind == ChunkKind::Data && !has_text && p.finish_reason.is_none() && p.usage.is_some();
        if has_text {
            self.seen.token_ids |= p.token_ids.is_some();
            self.seen.continuous_usage |= cumulative.is_some();
            self.seen.reasoning |= p.reasoning.is_some();
        }
        let tokens = match self.counting {
            Counting::Policy(TokenCounting::TokenIds) => {
                p.token_ids
                    .or(if kind == ChunkKind::Data && p.usage.is_none() {
                        Some(0)
                    } else {
                        None
                    })
            }
            Counting::Policy(TokenCounting::Usage) => cumulative.map(|c| c - self.last_cumulative),
            Counting::Policy(TokenCounting::OnePerChunk) => {
                (kind == ChunkKind::Data).then(|| i32::from(has_text))
            }
            Counting::Auto => match (p.token_ids, cumulative) {
                (Some(n), _) => Some(n),
                (None, Some(c)) if self.seen.continuous_usage => Some(c - self.last_cumulative),
                _ => (kind == ChunkKind::Data).then(|| i32::from(has_text)),
            },
        };
        // A final usage chunk settles what one-per-chunk counting could not see (the EOS
        // of a `stop` stream) on the held-back finishing row.
        if matches!(
            self.counting,
            Counting::Policy(TokenCounting::OnePerChunk) | Counting::Auto
        ) && is_usage_only
            && let (Some(total), Some(pending)) = (cumulative, self.pending.as_mut())
            && total > self.attributed
            && pending.finish_reason.is_some()
        {
            let extra = total - self.attributed;
            pending.tokens = Some(pending.tokens.unwrap_or(0) + extra);
            self.attributed += extra;
        }
        if let Some(row) = self.pending.take() {
            out.push(row);
        }
        if let Some(c) = cumulative {
            self.last_cumulative = c;
        }
        if let Some(t) = tokens {
            self.attributed += t;
            if t > 0 {
                self.row.first_token_ns.get_or_insert(arrival_ns);
                self.row.last_token_ns = Some(arrival_ns);
            }
        }
        if let Some(f) = &p.finish_reason {
            self.row.finish_reason = Some(f.to_string());
        }
        if kind == ChunkKind::Error {
            self.row.end_reason = EndReason::StreamError;
            self.row.error.clone_from(&p.error);
        }
        let row = ChunkRow {
            request_id: self.row.request_id,
            seq: self.seq,
            arrival_ns,
            // Stamped when the row is built: holding the last data row back (to settle
            // its tokens from a later usage chunk) is bookkeeping, not recorder delay.
            queue_delay_ns: Some(stamp() - arrival_ns),
            bytes: i32::try_from(wire_bytes).unwrap_or(i32::MAX),
            kind,
            tokens,
            completion_tokens: cumulative,
            content: p.content.map(Cow::into_owned),
            reasoning: p.reasoning.map(Cow::into_owned),
            finish_reason: p.finish_reason.map(Cow::into_owned),
            error: p.error,
        };
        self.seq += 1;
        if kind == ChunkKind::Data {
            self.pending = Some(row);
        } else {
            out.push(row);
        }
    }

    /// What the stream's text events carried so far.
    pub fn seen(&self) -> Seen {
        self.seen
    }

    /// Ends the request: the held-back row goes to `out`, and the row gets its end time
    /// and end reason from how the transport ended and what the stream said.
    pub fn finish(mut self, end: End, end_ns: i64, out: &mut Vec<ChunkRow>) -> RequestRow {
        if let Some(row) = self.pending.take() {
            out.push(row);
        }
        let row = &mut self.row;
        row.end_ns = Some(end_ns);
        if let Some(body) = self.error_body.take() {
            row.error = Some(String::from_utf8_lossy(&body).into_owned());
        } else if end == End::Clean && self.framer.leftover() > 0 {
            row.error = Some(format!(
                "the stream ended inside an event ({} bytes)",
                self.framer.leftover()
            ));
        }
        match end {
            End::Cancelled => row.end_reason = EndReason::Cancelled,
            End::Stalled(why) => {
                row.end_reason = EndReason::StallTimeout;
                if let Some(why) = why {
                    row.error.get_or_insert(why);
                }
            }
            End::Failed(e) => {
                if !matches!(
                    row.end_reason,
                    EndReason::StreamError | EndReason::HttpError
                ) {
                    row.end_reason = EndReason::Disconnect;
                }
                row.error.get_or_insert(e);
            }
            End::Clean => {
                if !matches!(
                    row.end_reason,
                    EndReason::StreamError | EndReason::HttpError
                ) {
                    row.end_reason = match row.finish_reason.as_deref() {
                        Some("stop") => EndReason::FinishedStop,
                        Some("length") => EndReason::FinishedLength,
                        Some(_) => EndReason::FinishedOther,
                        None => EndReason::Disconnect,
                    };
                }
            }
        }
        self.row
    }
}
