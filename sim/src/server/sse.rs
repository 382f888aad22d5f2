//! A streamed answer (server-sent events): each engine emission becomes a chunk in the
//! request's shape (chat or completions), with the mid-stream faults (reset, error
//! event, malformed bytes, stall, huge event, early stop), pings and trickling, and each
//! event written logged to the ground truth.

use futures_util::stream;

use super::*;

enum Stage {
    Role,
    Tokens,
    Usage,
    Done,
    End,
}

struct Stream {
    shared: AppState,
    req: GenRequest,
    env: Envelope,
    rx: UnboundedReceiver<Emission>,
    stage: Stage,
    last: (u32, u32, u32),
    /// Token chunks sent so far (mid-stream faults count these).
    sent: u32,
    /// Mid-stream faults not yet fired.
    pending: Vec<Fault>,
    ping: Option<std::time::Duration>,
    /// Ground-truth bookkeeping.
    id: u64,
    arrived_ns: i64,
    /// When the connection read the request (CLOCK_MONOTONIC) …
    read_ns: Option<i64>,
    /// … and when the kernel had received it.
    rx_ns: Option<i64>,
    /// The connection it came on (its number in accept order).
    connection: Option<i64>,
    seq: i32,
    admitted_ns: Option<i64>,
    first_token_ns: Option<i64>,
    outcome: Option<String>,
    /// Ground-truth event rows not yet handed to the writer.
    truth_rows: Vec<TruthChunkRow>,
    /// The speculative step (drafted, accepted) of the event about to be logged.
    step_spec: Option<(u32, u32)>,
}

impl Stream {
    /// Records an event the stream is about to hand to the connection.
    fn log(
        &mut self,
        kind: ChunkKind,
        scheduled_ns: Option<i64>,
        tokens: Option<i32>,
        bytes: usize,
    ) {
        if let Some(t) = &self.shared.truth {
            self.truth_rows.push(TruthChunkRow {
                request_id: self.id as i64,
                seq: self.seq,
                kind,
                scheduled_ns,
                written_ns: monotonic_ns(),
                tokens,
                bytes: i32::try_from(bytes).unwrap_or(i32::MAX),
                spec_draft_tokens: self.step_spec.map(|(d, _)| d as i32),
                spec_accepted_tokens: self.step_spec.map(|(_, a)| a as i32),
            });
            if self.truth_rows.len() >= TRUTH_BATCH_ROWS {
                t.chunks(std::mem::take(&mut self.truth_rows));
            }
        }
        self.seq += 1;
    }
}

impl Drop for Stream {
    /// A stream ends here whatever happened: finished, failed, or its client went away.
    fn drop(&mut self) {
        if let Some(t) = &self.shared.truth {
            t.chunks(std::mem::take(&mut self.truth_rows));
            let (prompt, completion, cached) = self.last;
            t.request(TruthRequestRow {
                request_id: self.id as i64,
                server_request_id: self.env.id.clone(),
                arrived_ns: self.arrived_ns,
                read_ns: self.read_ns,
                kernel_rx_ns: self.rx_ns,
                connection: self.connection,
                admitted_ns: self.admitted_ns,
                first_token_ns: self.first_token_ns,
                ended_ns: monotonic_ns(),
                prompt_tokens: i32::try_from(prompt).unwrap_or(i32::MAX),
                cached_tokens: self
                    .admitted_ns
                    .map(|_| i32::try_from(cached).unwrap_or(i32::MAX)),
                completion_tokens: i32::try_from(completion).unwrap_or(i32::MAX),
                outcome: self
                    .outcome
                    .clone()
                    .unwrap_or_else(|| "aborted".to_string()),
            });
        }
    }
}

/// What a mid-stream fault does when its moment comes.
enum Fired {
    Reset,
    ErrorEvent,
    Malformed,
    Stall(f64),
    Huge(u64),
    StopEarly,
}

impl Stream {
    /// Takes the first pending fault due after `sent` chunks.
    fn due(&mut self) -> Option<Fired> {
        let sent = self.sent;
        let i = self.pending.iter().position(|f| match f {
            Fault::Reset { after } | Fault::ErrorEvent { after } | Fault::Malformed { after } => {
                *after == sent
            }
            Fault::Stall { after, .. } | Fault::HugeEvent { after, .. } => *after == sent,
            Fault::StopEarly { after } => *after == sent,
            _ => false,
        })?;
        Some(match self.pending.remove(i) {
            Fault::Reset { .. } => Fired::Reset,
            Fault::ErrorEvent { .. } => Fired::ErrorEvent,
            Fault::Malformed { .. } => Fired::Malformed,
            Fault::Stall { seconds, .. } => Fired::Stall(seconds),
            Fault::HugeEvent { bytes, .. } => Fired::Huge(bytes),
            Fault::StopEarly { .. } => Fired::StopEarly,
            _ => return None,
        })
    }

    async fn next_emission(&mut self) -> Result<Option<Emission>, ()> {
        match self.ping {
            None => Ok(self.rx.recv().await),
            Some(every) => tokio::select! {
                e = self.rx.recv() => Ok(e),
                () = tokio::time::sleep(every) => Err(()),
            },
        }
    }

    /// The next piece of the response: an event (bytes, kind, when the engine scheduled
    /// it, its tokens), a failure that drops the connection, or the end of the body.
    async fn next_event(&mut self) -> Next {
        loop {
            match self.stage {
                Stage::Role => {
                    self.stage = Stage::Tokens;
                    return Next::Event(
                        event(&self.env.role_chunk(&self.req)),
                        ChunkKind::Data,
                        None,
                        None,
                    );
                }
                Stage::Tokens => {
                    if let Some(fired) = self.due() {
                        match self.fire(fired).await {
                            Some(next) => return next,
                            None => continue,
                        }
                    }
                    match self.next_emission().await {
                        Ok(Some(e)) => return self.emission_event(&e),
                        // The engine dropped the request: end the stream without [DONE].
                        Ok(None) => self.stage = Stage::End,
                        Err(()) => {
                            return Next::Event(
                                Bytes::from_static(b": ping\n\n"),
                                ChunkKind::Comment,
                                None,
                                None,
                            );
                        }
                    }
                }
                Stage::Usage => {
                    self.stage = Stage::Done;
                    let (p, c, cached) = self.last;
                    return Next::Event(
                        event(&self.env.usage_chunk(&self.req, p, c, cached)),
                        ChunkKind::Data,
                        None,
                        None,
                    );
                }
                Stage::Done => {
                    self.stage = Stage::End;
                    return Next::Event(
                        Bytes::from_static(b"data: [DONE]\n\n"),
                        ChunkKind::Done,
                        None,
                        None,
                    );
                }
                Stage::End => return Next::End,
            }
        }
    }

    /// What a fault sends when it fires; `None` for a stall, after its wait.
    async fn fire(&mut self, fired: Fired) -> Option<Next> {
        let data = |bytes: Bytes| Some(Next::Event(bytes, ChunkKind::Data, None, None));
        match fired {
            Fired::Reset => {
                self.stage = Stage::End;
                self.outcome = Some("fault:reset".to_string());
                // Let hyper flush what was sent before, then fail the body: an error from
                // the body makes hyper drop the connection.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                let err =
                    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected reset");
                Some(Next::Fail(err))
            }
            Fired::ErrorEvent => {
                self.stage = Stage::Done;
                self.outcome = Some("fault:error_event".to_string());
                let body = json!({"error": {
                    "object": "error",
                    "message": "Internal server error (injected by the simulator).",
                    "type": "InternalServerError", "param": null, "code": 500,
                }});
                Some(Next::Event(event(&body), ChunkKind::Error, None, None))
            }
            Fired::Malformed => data(Bytes::from(format!(
                "data: {{\"id\":\"{}\",\"choices\":[{{\"index\":0,\"text\":\"trunc\n\n",
                self.env.id
            ))),
            Fired::Huge(bytes) => {
                // One `data:` line of `bytes` bytes, then the stream goes on.
                let n = usize::try_from(bytes).unwrap_or(usize::MAX).max(8);
                let mut huge = Vec::with_capacity(n);
                huge.extend_from_slice(b"data: ");
                huge.resize(n - 2, b'x');
                huge.extend_from_slice(b"\n\n");
                data(Bytes::from(huge))
            }
            Fired::Stall(seconds) => {
                tokio::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
                None
            }
            Fired::StopEarly => {
                // A last chunk without tokens that says `stop`; the engine's request is
                // aborted when the stream ends.
                self.stage = if self.req.include_usage {
                    Stage::Usage
                } else {
                    Stage::Done
                };
                self.outcome = Some("fault:stop_early".to_string());
                let prompt = u32::try_from(self.req.prompt.len()).unwrap_or(u32::MAX);
                self.last.0 = self.last.0.max(prompt);
                let (prompt_tokens, completion_tokens, cached_tokens) = self.last;
                let e = Emission {
                    request_id: self.id,
                    tokens: Vec::new(),
                    reasoning: 0,
                    completion_tokens,
                    prompt_tokens,
                    cached_tokens,
                    finish: Some(crate::request::Finish::Stop),
                    at: 0.0,
                    queued: 0.0,
                    spec: None,
                };
                data(Bytes::from(self.env.chunk(
                    &self.req,
                    &e,
                    &self.shared.tokenizer,
                    false,
                )))
            }
        }
    }

    /// The event of one engine emission (its tokens, or its finish).
    fn emission_event(&mut self, e: &Emission) -> Next {
        let sent = self.sent;
        let leak = self
            .pending
            .iter()
            .any(|f| matches!(f, Fault::ScriptLeak { after } if sent >= *after));
        if leak {
            self.outcome
                .get_or_insert_with(|| "fault:script_leak".to_string());
        }
        if let Some(f) = e.finish {
            self.stage = if self.req.include_usage {
                Stage::Usage
            } else {
                Stage::Done
            };
            self.outcome
                .get_or_insert_with(|| format!("finished_{}", f.as_str()));
        }
        let scheduled = self.shared.mono_of_engine(e.at);
        self.first_token_ns.get_or_insert(scheduled);
        let admitted = self.arrived_ns + (e.queued * 1e9) as i64;
        self.admitted_ns.get_or_insert(admitted);
        self.sent += 1;
        self.last = (e.prompt_tokens, e.completion_tokens, e.cached_tokens);
        let n = i32::try_from(e.tokens.len()).unwrap_or(i32::MAX);
        self.step_spec = e.spec;
        let bytes = if self.shared.profile.spec_event_per_token && e.tokens.len() > 1 {
            // One event per token, in one write: the client reads them together.
            let last = e.tokens.len() - 1;
            let mut out = String::new();
            for (i, token) in e.tokens.iter().enumerate() {
                let behind = u32::try_from(last - i).unwrap_or(0);
                let one = Emission {
                    tokens: vec![*token],
                    reasoning: usize::from(i < e.reasoning),
                    completion_tokens: e.completion_tokens.saturating_sub(behind),
                    finish: if i == last { e.finish } else { None },
                    ..e.clone()
                };
                out.push_str(
                    &self
                        .env
                        .chunk(&self.req, &one, &self.shared.tokenizer, leak),
                );
            }
            Bytes::from(out)
        } else {
            Bytes::from(self.env.chunk(&self.req, e, &self.shared.tokenizer, leak))
        };
        Next::Event(bytes, ChunkKind::Data, Some(scheduled), Some(n))
    }
}

/// What a response stream does next.
enum Next {
    /// Bytes to send, their kind, when the engine scheduled them, their tokens.
    Event(Bytes, ChunkKind, Option<i64>, Option<i32>),
    /// Fail the body (hyper drops the connection).
    Fail(std::io::Error),
    /// The body is over.
    End,
}

/// A body whose every byte is its own write, `every` apart (a trickling server).
fn trickled(
    body: impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    every: std::time::Duration,
) -> futures_util::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
    use futures_util::StreamExt;
    body.flat_map(move |item| match item {
        Ok(bytes) => stream::iter((0..bytes.len()).map(move |i| bytes.slice(i..i + 1)))
            .then(move |b| async move {
                tokio::time::sleep(every).await;
                Ok(b)
            })
            .boxed(),
        Err(e) => stream::once(async move { Err(e) }).boxed(),
    })
    .boxed()
}

fn event(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

pub(super) fn sse_response(
    shared: AppState,
    req: GenRequest,
    env: Envelope,
    rx: UnboundedReceiver<Emission>,
    faults: &[Fault],
    id: u64,
    (arrived, read_ns, rx_ns, connection): (Instant, Option<i64>, Option<i64>, Option<i64>),
) -> Response {
    let stage = if req.kind == Kind::Chat {
        Stage::Role
    } else {
        Stage::Tokens
    };
    let ping = faults.iter().find_map(|f| match f {
        Fault::Ping { seconds } if *seconds > 0.0 => {
            Some(std::time::Duration::from_secs_f64(*seconds))
        }
        _ => None,
    });
    let trickle = faults.iter().find_map(|f| match f {
        Fault::Trickle { seconds } => Some(std::time::Duration::from_secs_f64(*seconds)),
        _ => None,
    });
    let shared_arrived_ns = shared.clock.monotonic_at_zero() + shared.clock.ns_at(arrived);
    let state_id = env.id.clone();
    let state = Stream {
        shared,
        req,
        env,
        rx,
        stage,
        last: (0, 0, 0),
        sent: 0,
        pending: faults.to_vec(),
        ping,
        id,
        arrived_ns: shared_arrived_ns,
        read_ns,
        rx_ns,
        connection,
        seq: 0,
        admitted_ns: None,
        first_token_ns: None,
        outcome: None,
        truth_rows: Vec::new(),
        step_spec: None,
    };
    let body = stream::unfold(state, |mut st| async move {
        let (bytes, kind, scheduled, tokens) = match st.next_event().await {
            Next::Event(bytes, kind, scheduled, tokens) => (bytes, kind, scheduled, tokens),
            Next::Fail(err) => return Some((Err(err), st)),
            Next::End => return None,
        };
        st.log(kind, scheduled, tokens, bytes.len());
        st.step_spec = None;
        Some((Ok::<_, std::io::Error>(bytes), st))
    });
    // A trickling body: every byte its own write, `seconds` apart.
    let body = match trickle {
        Some(every) => trickled(body, every),
        None => futures_util::StreamExt::boxed(body),
    };
    // Like vLLM, the response names its request in a header, before any event.
    let request_id = state_id.clone();
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-request-id", request_id)
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
