//! One streamed request, recorded: takes the worker's kept-alive connection (or opens
//! one), writes the request and stamps when the write returned, stamps every socket read
//! as it returns, and feeds the body to the wire crate's assembler, whose rows go to the
//! cell's writer one batch per read. A reused connection found closed before any
//! response byte is retried once on a new one, and the retry is recorded. Every way a
//! request can end gives a row with its reason; nothing here panics.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::tables::{ChunkRow, EndReason, EventKind, EventRow, RequestRow};
use tokentrace_wire::{Assembler, End};
use tokio::sync::{oneshot, watch};

use tokentrace_wire::Counting;
pub use tokentrace_wire::MAX_ERROR_BODY;

use crate::send::http::{BodyDecoder, Conn, Transport, parse_head};
use crate::send::request::RequestSpec;
use crate::store::queue::Record;

/// How a request is run, beyond what it is.
#[derive(Debug)]
pub struct RunCtl {
    /// How the stream's tokens are counted.
    pub counting: Counting,
    /// A stream silent this long ends as `stall_timeout`.
    pub stall_timeout: Duration,
    /// Turning true closes the connection (the server aborts the request): `cancelled`.
    pub cancel: watch::Receiver<bool>,
    /// Told the arrival time of the first token.
    pub first_token: Option<oneshot::Sender<i64>>,
    /// Keep the answer's content text ([`Ran::text`]): a conversation's next turn
    /// sends it back as history.
    pub keep_text: bool,
}

/// A request the server turned away before streaming a token: an HTTP error status, or
/// no answer at all (connection refused or closed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// The server's message (its error body), or why no answer came.
    pub message: String,
}

impl Refusal {
    /// Whether sending the same request again cannot succeed: a 4xx other than 408
    /// (timeout) and 429 (too many requests) says the request itself is wrong.
    pub fn permanent(&self) -> bool {
        self.status
            .is_some_and(|s| (400..500).contains(&s) && s != 408 && s != 429)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "HTTP {s}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// How a request went, for the worker that sent it.
#[derive(Debug)]
pub struct Ran {
    /// The readiness sender, given back when no token arrived (the next request of the
    /// worker carries it on).
    pub first_token: Option<oneshot::Sender<i64>>,
    /// Set when the server turned the request away before any token.
    pub refused: Option<Refusal>,
    /// Whether the request streamed at least one token.
    pub produced: bool,
    /// Prompt tokens, and those served from the prefix cache, as the server said.
    pub prompt_tokens: Option<i32>,
    pub cached_tokens: Option<i32>,
    /// Completion tokens as the server finally counted them.
    pub completion_tokens: Option<i32>,
    /// The answer's content text as streamed, when [`RunCtl::keep_text`] asked for it.
    pub text: Option<String>,
    /// How the request ended.
    pub end_reason: EndReason,
    /// What the stream's text events carried (token ids, usage, reasoning).
    pub seen: tokentrace_wire::Seen,
}

/// A closed-loop worker's way to the server: its transport and the connection it keeps
/// open between requests.
#[derive(Debug)]
pub struct Lane {
    transport: Arc<Transport>,
    conn: Option<Conn>,
}

impl Lane {
    pub fn new(transport: Arc<Transport>) -> Self {
        Lane {
            transport,
            conn: None,
        }
    }
}

/// Why waiting stopped.
enum Wait<T> {
    Done(T),
    Cancelled,
    Stalled,
}

/// A request's two ways to stop waiting, armed once per request rather than once per
/// read (a timer armed and cleared per read, and a cancel listener registered per read,
/// were a measurable share of the recorder's CPU): the cancel signal, and a stall
/// deadline that moves with activity but is re-armed only when it fires.
struct Guard<'a, C> {
    cancel: Pin<&'a mut C>,
    sleep: Pin<Box<tokio::time::Sleep>>,
    stall: Duration,
    last: Instant,
}

impl<'a, C: Future<Output = ()>> Guard<'a, C> {
    fn new(cancel: Pin<&'a mut C>, stall: Duration) -> Self {
        Guard {
            cancel,
            sleep: Box::pin(tokio::time::sleep(stall)),
            stall,
            last: Instant::now(),
        }
    }

    /// Waits for `fut`, unless the stream stays silent for the stall timeout or the
    /// request is cancelled first.
    async fn wait<T>(&mut self, fut: impl Future<Output = T>) -> Wait<T> {
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                biased;
                v = &mut fut => {
                    self.last = Instant::now();
                    return Wait::Done(v);
                }
                () = &mut self.cancel => return Wait::Cancelled,
                () = &mut self.sleep => {
                    let due = self.last + self.stall;
                    if Instant::now() >= due {
                        return Wait::Stalled;
                    }
                    self.sleep.as_mut().reset(due.into());
                }
            }
        }
    }
}

/// Resolves when `cancel` turns true; never, if its sender is gone.
async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// How one attempt on a connection went.
enum Attempt {
    /// The response ended (or the request stopped); `keep` says whether the connection
    /// can carry another request.
    Ended { end: End, keep: bool },
    /// A reused connection failed before any response byte: try a new one.
    Retry(String),
}

/// Sends `spec` on the lane and records it until it ends; the request row is the last
/// record sent.
pub async fn run(
    lane: &mut Lane,
    spec: &RequestSpec,
    ctl: RunCtl,
    clock: &RunClock,
    out: &crate::store::queue::Sender,
) -> Ran {
    let RunCtl {
        counting,
        stall_timeout,
        mut cancel,
        first_token,
        keep_text,
    } = ctl;
    let cancel_fut = std::pin::pin!(cancelled(&mut cancel));
    let mut guard = Guard::new(cancel_fut, stall_timeout);
    let row = RequestRow {
        slot: spec.slot,
        prompt_tokens_requested: spec.prompt_tokens_requested,
        max_tokens: spec.max_tokens,
        retries: Some(0),
        ..RequestRow::unsent(
            spec.request_id,
            spec.role,
            spec.endpoint,
            spec.scheduled_ns.unwrap_or_else(|| clock.now_ns()),
        )
    };
    let mut req = Req {
        asm: Assembler::new(counting, row),
        clock,
        out,
        first_token,
        text: keep_text.then(String::new),
    };
    let bytes = lane.transport.request_bytes(&spec.body);
    let mut retried = false;
    let end = loop {
        // A connection: the open one, or a new one.
        // A kept connection the server has closed since is dropped here: the request
        // gets a new one (a reconnect, seen in `connect_start_ns`), not a retry.
        let open = match lane.conn.take() {
            Some(c) if c.reusable() => Some(c),
            _ => None,
        };
        let reused = open.is_some();
        let mut conn = match open {
            Some(c) => {
                let r = req.asm.row_mut();
                r.connect_start_ns = None;
                r.connection_ns = Some(clock.now_ns());
                c
            }
            None => {
                req.asm.row_mut().connect_start_ns = Some(clock.now_ns());
                match guard.wait(lane.transport.connect()).await {
                    Wait::Done(Ok(c)) => {
                        req.asm.row_mut().connection_ns = Some(clock.now_ns());
                        c
                    }
                    Wait::Done(Err(e)) => {
                        break End::Failed(format!("request failed: cannot connect: {e}"));
                    }
                    Wait::Cancelled => break End::Cancelled,
                    Wait::Stalled => {
                        break End::Stalled(Some(format!(
                            "cannot connect: no answer for {:?}",
                            guard.stall
                        )));
                    }
                }
            }
        };
        req.asm.row_mut().connection_id = Some(conn.id);
        match req
            .exchange(&mut conn, &bytes, reused && !retried, &mut guard)
            .await
        {
            Attempt::Ended { end, keep } => {
                if keep {
                    conn.served += 1;
                    lane.conn = Some(conn);
                }
                break end;
            }
            Attempt::Retry(why) => {
                retried = true;
                let r = req.asm.row_mut();
                r.retries = Some(1);
                r.sent_ns = None;
                let detail = format!(
                    "retry: request {} found kept-alive connection {} closed after {} \
                     responses, before any response byte ({why}); sent again on a new connection",
                    spec.request_id, conn.id, conn.served
                );
                let _ = out
                    .send(Record::Event(EventRow {
                        time_ns: clock.now_ns(),
                        kind: EventKind::Note,
                        request_id: Some(spec.request_id),
                        detail: Some(detail),
                    }))
                    .await;
            }
        }
    };
    req.finish(end).await
}

/// One request's state while it runs.
struct Req<'a> {
    asm: Assembler,
    clock: &'a RunClock,
    out: &'a crate::store::queue::Sender,
    first_token: Option<oneshot::Sender<i64>>,
    /// The answer's content so far, when kept.
    text: Option<String>,
}

/// Appends the content of `chunks` to `text`, when it is kept.
fn keep(text: &mut Option<String>, chunks: &[ChunkRow]) {
    if let Some(t) = text {
        for c in chunks {
            if let Some(content) = &c.content {
                t.push_str(content);
            }
        }
    }
}

impl Req<'_> {
    /// Writes the request on `conn` and reads its response to the end.
    async fn exchange<C: Future<Output = ()>>(
        &mut self,
        conn: &mut Conn,
        bytes: &[u8],
        may_retry: bool,
        guard: &mut Guard<'_, C>,
    ) -> Attempt {
        let ended = |end| Attempt::Ended { end, keep: false };
        match guard.wait(conn.write_all(bytes)).await {
            Wait::Done(Ok(())) => {}
            Wait::Done(Err(e)) if may_retry => return Attempt::Retry(format!("write: {e}")),
            Wait::Done(Err(e)) => {
                return ended(End::Failed(format!("request failed: write: {e}")));
            }
            Wait::Cancelled => return ended(End::Cancelled),
            Wait::Stalled => {
                return ended(End::Stalled(Some(format!(
                    "the request could not be sent: no progress for {:?}",
                    guard.stall
                ))));
            }
        }
        let sent_ns = self.clock.now_ns();
        self.asm.row_mut().sent_ns = Some(sent_ns);

        // The response head (1xx interim responses are skipped).
        let mut got_any = false;
        // When the last read returned, and how long before that its bytes arrived.
        let mut returned_ns = sent_ns;
        let head = loop {
            match parse_head(conn.pending()) {
                Ok(Some((head, len))) => {
                    conn.consume(len);
                    conn.answered();
                    if (100..200).contains(&head.status) {
                        continue;
                    }
                    break head;
                }
                Ok(None) => {}
                Err(e) => return ended(End::Failed(format!("request failed: {e}"))),
            }
            match guard.wait(conn.read_more()).await {
                Wait::Done(Ok(0)) if may_retry && !got_any => {
                    return Attempt::Retry("closed by the server".to_string());
                }
                Wait::Done(Ok(0)) => {
                    return ended(End::Failed(
                        "request failed: connection closed before the response head".to_string(),
                    ));
                }
                Wait::Done(Ok(_)) => {
                    got_any = true;
                    // A read's time is the kernel's receipt of its bytes where the
                    // platform stamps them; never before the send as this task saw it.
                    returned_ns = self.clock.now_ns();
                    let at = (returned_ns - conn.read_age_ns()).max(sent_ns);
                    self.asm.row_mut().headers_ns = Some(at);
                }
                Wait::Done(Err(e)) if may_retry && !got_any => {
                    return Attempt::Retry(format!("read: {e}"));
                }
                Wait::Done(Err(e)) => return ended(End::Failed(format!("request failed: {e}"))),
                Wait::Cancelled => return ended(End::Cancelled),
                Wait::Stalled => {
                    let got = conn.pending().len();
                    return ended(End::Stalled(Some(if got_any {
                        format!(
                            "the response head stopped after {got} bytes: no byte for {:?}",
                            guard.stall
                        )
                    } else {
                        format!("no response head: no byte for {:?}", guard.stall)
                    })));
                }
            }
        };
        // The head's time is that of the read that completed it.
        let head_ns = self
            .asm
            .row()
            .headers_ns
            .unwrap_or_else(|| self.clock.now_ns());
        self.asm.status(head.status);
        if let Some(id) = head.request_id {
            self.asm.row_mut().server_request_id = Some(id);
        }

        // The body: what came with the head, then one read at a time.
        let mut dec = BodyDecoder::new(head.body);
        let mut arrival = head_ns;
        loop {
            // Sized once: the body is at most what is pending (a vector grown by pushes
            // holds up to twice its bytes, and a cell's writer holds its reads a while).
            let mut body = Vec::with_capacity(conn.pending().len());
            let used = match dec.decode(conn.pending(), &mut body) {
                Ok(n) => n,
                Err(e) => return ended(End::Failed(format!("stream failed: {e}"))),
            };
            conn.consume(used);
            if !body.is_empty()
                && let Err(e) = self.take(arrival, returned_ns - arrival, body).await
            {
                return ended(End::Failed(e));
            }
            if dec.done() {
                // Bytes past the response's end: the connection is not trusted again.
                let keep = head.keep_alive && conn.pending().is_empty();
                return Attempt::Ended {
                    end: End::Clean,
                    keep,
                };
            }
            match guard.wait(conn.read_more()).await {
                Wait::Done(Ok(0)) if dec.until_eof() => return ended(End::Clean),
                Wait::Done(Ok(0)) => {
                    return ended(End::Failed(
                        "stream failed: connection closed before the response ended".to_string(),
                    ));
                }
                Wait::Done(Ok(_)) => {
                    returned_ns = self.clock.now_ns();
                    arrival = (returned_ns - conn.read_age_ns()).max(arrival);
                }
                Wait::Done(Err(e)) => return ended(End::Failed(format!("stream failed: {e}"))),
                Wait::Cancelled => return ended(End::Cancelled),
                Wait::Stalled => {
                    return ended(End::Stalled(Some(format!(
                        "the stream stopped: no byte for {:?}",
                        guard.stall
                    ))));
                }
            }
        }
    }

    /// Hands one read's body bytes to the assembler and its rows to the writer. `waited_ns`
    /// is how long before the read returned its bytes arrived: a row's queueing delay
    /// counts from the read's return (the recorder's delay after it has the bytes), as
    /// before arrival times were the kernel's.
    async fn take(
        &mut self,
        arrival_ns: i64,
        waited_ns: i64,
        bytes: Vec<u8>,
    ) -> Result<(), String> {
        // Room for one row, the usual read's: a first push into an empty vector makes
        // room for four (hundreds of bytes unused per read, held by the writer).
        let mut chunks = Vec::with_capacity(1);
        let clock = self.clock;
        let r = self.asm.read(
            arrival_ns,
            &bytes,
            &mut || clock.now_ns() - waited_ns,
            &mut chunks,
        );
        keep(&mut self.text, &chunks);
        if let Some(t) = self.asm.first_token_ns()
            && let Some(tell) = self.first_token.take()
        {
            let _ = tell.send(t);
        }
        let _ = self
            .out
            .send(Record::Read {
                request_id: self.asm.row().request_id,
                arrival_ns,
                bytes,
                chunks,
            })
            .await;
        r.map_err(|e| e.to_string())
    }

    async fn finish(mut self, end: End) -> Ran {
        let mut chunks = Vec::new();
        let end_ns = self.clock.now_ns();
        let cancelled = matches!(end, End::Cancelled);
        let no_token = self.asm.first_token_ns().is_none();
        let seen = self.asm.seen();
        let row = self.asm.finish(end, end_ns, &mut chunks);
        keep(&mut self.text, &chunks);
        let refused = (no_token
            && !cancelled
            && matches!(
                row.end_reason,
                EndReason::HttpError
                    | EndReason::StreamError
                    | EndReason::Disconnect
                    | EndReason::StallTimeout
            ))
        .then(|| Refusal {
            status: row.http_status.and_then(|s| u16::try_from(s).ok()),
            message: row
                .error
                .as_deref()
                .unwrap_or("no answer")
                .chars()
                .take(300)
                .collect(),
        });
        if !chunks.is_empty() {
            let _ = self
                .out
                .send(Record::Read {
                    request_id: row.request_id,
                    arrival_ns: end_ns,
                    bytes: Vec::new(),
                    chunks,
                })
                .await;
        }
        let (prompt_tokens, cached_tokens) = (row.prompt_tokens_server, row.cached_tokens_server);
        let (completion_tokens, end_reason) = (row.completion_tokens_server, row.end_reason);
        let _ = self.out.send(Record::Request(Box::new(row))).await;
        Ran {
            first_token: self.first_token,
            refused,
            produced: !no_token,
            prompt_tokens,
            cached_tokens,
            completion_tokens,
            text: self.text,
            end_reason,
            seen,
        }
    }
}

impl Record {
    /// The record with its request id replaced (the probe's rows, placed in a cell).
    pub fn with_request_id(self, id: i64) -> Record {
        match self {
            Record::Read {
                arrival_ns,
                bytes,
                mut chunks,
                ..
            } => {
                for c in &mut chunks {
                    c.request_id = id;
                }
                Record::Read {
                    request_id: id,
                    arrival_ns,
                    bytes,
                    chunks,
                }
            }
            Record::Request(mut q) => {
                q.request_id = id;
                Record::Request(q)
            }
            Record::Event(mut e) => {
                if e.request_id.is_some() {
                    e.request_id = Some(id);
                }
                Record::Event(e)
            }
            other => other,
        }
    }
}
