//! The cells whose requests are counted or scheduled rather than looped: a burst of
//! exactly N requests run to completion, and open-loop arrivals on a schedule (rate) or
//! a workload's times (replay).

use super::*;

/// Records a burst cell: after priming, exactly `plan.requests` measured requests at
/// `concurrency` in flight, each run to completion (a refused one is sent again after
/// the backoff, and its refused row stays in the trace).
pub async fn record_burst(
    ctx: &RunCtx,
    plan: &CellPlan,
    run: &Path,
) -> Result<Recorded, CellError> {
    debug_assert_eq!(plan.key.phase, Phase::Burst);
    let (cell, handle) = start(ctx, plan, run).await?;
    let n = plan.key.concurrency.max(1).min(plan.requests.max(1));
    let background = Background::start(&cell);
    let lanes = warm_up(&cell, n).await;
    cell.event(EventKind::WindowOpen, None, None).await;
    let tickets = Arc::new(AtomicU64::new(0));
    let total = u64::from(plan.requests);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let mut workers = Vec::new();
    for (slot, mut lane) in (0..n).zip(lanes) {
        let cell = cell.clone();
        let tickets = tickets.clone();
        let cancel = cancel_rx.clone();
        workers.push(tokio::spawn(async move {
            let slot = i32::try_from(slot).unwrap_or(i32::MAX);
            let mut stop = cancel.clone();
            'tickets: while tickets.fetch_add(1, Ordering::AcqRel) < total {
                loop {
                    if !cell.paced(&mut stop).await {
                        break 'tickets;
                    }
                    let spec = cell.measured(Some(slot));
                    let ran = cell.run(&mut lane, &spec, cancel.clone(), None).await;
                    if !cell.account(&ran) {
                        break 'tickets;
                    }
                    if ran.refused.is_none() {
                        break;
                    }
                }
            }
        }));
    }
    let all = futures_util::future::join_all(workers);
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => {}
        () = cell.gave_up.notified() => {
            let _ = cancel_tx.send(true);
            all.await;
        }
    }
    close(cell, handle, background).await
}

/// Records a rate cell: after priming, requests leave on the schedule of
/// `plan.rate` (open loop: whatever the server does); see [`open_loop`].
pub async fn record_rate(ctx: &RunCtx, plan: &CellPlan, run: &Path) -> Result<Recorded, CellError> {
    use tokentrace_schemas::schedule::Schedule;
    debug_assert_eq!(plan.key.phase, Phase::Rate);
    let (cell, handle) = start(ctx, plan, run).await?;
    let background = Background::start(&cell);
    let primed = warm_up(&cell, 1).await;
    let schedule = match (&plan.rate, plan.key.rate) {
        (Some(c), Some(rate)) => Schedule::new(
            rate,
            c.arrival,
            c.seed,
            c.requests.map(u64::from),
            c.duration_ns,
        ),
        _ => {
            return Err(CellError::Writer(
                "a rate cell without a rate or schedule settings".to_string(),
            ));
        }
    };
    let cap = plan.rate.as_ref().and_then(|c| c.max_concurrency);
    open_loop(&cell, primed, cap, schedule, |cell, _, due_ns| {
        let mut spec = cell.measured(None);
        spec.scheduled_ns = Some(due_ns);
        spec
    })
    .await;
    close(cell, handle, background).await
}

/// A replay cell's workload, ready to send.
#[derive(Debug)]
pub struct ReplayPlan {
    pub items: Vec<crate::send::replay::Item>,
    pub prompts: Arc<crate::send::replay::Prompts>,
    pub model: String,
    pub max_concurrency: Option<u32>,
}

impl ReplayPlan {
    /// The request body of `item`: its prompt ids, its output length as `max_tokens`
    /// (with `ignore_eos`, as every body of the run).
    pub fn body(&self, item: &crate::send::replay::Item) -> bytes::Bytes {
        const MARK: &str = "\"@@tokentrace-replay-prompt@@\"";
        let head = crate::send::request::stream_body(
            &self.model,
            Endpoint::Completions,
            &serde_json::Value::String(MARK.trim_matches('"').to_string()),
            item.output_tokens,
        )
        .to_string();
        head.replacen(MARK, &self.prompts.prompt_json(item), 1)
            .into()
    }
}

/// Records a replay cell: after one priming request, each of the workload's requests
/// leaves at its offset (open loop; see [`open_loop`]) with its own prompt length,
/// prefix blocks and output length. Its `replay` rows go first, skipped ones included.
pub async fn record_replay(
    ctx: &RunCtx,
    plan: &CellPlan,
    run: &Path,
) -> Result<Recorded, CellError> {
    debug_assert_eq!(plan.key.phase, Phase::Replay);
    let Some(replay) = plan.replay.clone() else {
        return Err(CellError::Writer(
            "a replay cell without its workload".to_string(),
        ));
    };
    let (cell, handle) = start(ctx, plan, run).await?;
    let background = Background::start(&cell);
    // Connections opened before the schedule starts, so the first requests in flight
    // do not connect inside their schedule lag.
    let lanes = replay
        .max_concurrency
        .unwrap_or(REPLAY_LANES)
        .clamp(1, REPLAY_LANES);
    let primed = warm_up(&cell, lanes).await;
    let n = replay.items.len();
    let base = cell.next_id.fetch_add(n as i64, Ordering::Relaxed);
    let mut sent = Vec::with_capacity(n);
    for (k, it) in replay.items.iter().enumerate() {
        let row = tokentrace_schemas::tables::ReplayRow {
            request_id: base + k as i64,
            source_row: it.source_row,
            trace_ns: it.trace_ns,
            offset_ns: it.offset_ns,
            input_tokens: i32::try_from(it.input_tokens).unwrap_or(i32::MAX),
            output_tokens: i32::try_from(it.output_tokens).unwrap_or(i32::MAX),
            expected_cached_tokens: i32::try_from(it.expected_cached).unwrap_or(i32::MAX),
            skipped: it.skipped.clone(),
        };
        let _ = cell.tx.send(Record::Replay(Box::new(row))).await;
        if it.skipped.is_none() {
            sent.push(k);
        }
    }
    let due: Vec<i64> = sent.iter().map(|&k| replay.items[k].offset_ns).collect();
    let cap = replay.max_concurrency;
    open_loop(
        &cell,
        primed,
        cap,
        due.into_iter(),
        move |cell, i, due_ns| {
            let k = sent.get(i).copied().unwrap_or(0);
            let item = &replay.items[k.min(replay.items.len().saturating_sub(1))];
            RequestSpec {
                request_id: base + k as i64,
                slot: None,
                role: Role::Measured,
                endpoint: cell.ctx.endpoint,
                body: Body::Shared(replay.body(item)),
                prompt_tokens_requested: i32::try_from(item.input_tokens).unwrap_or(i32::MAX),
                max_tokens: Some(i32::try_from(item.output_tokens).unwrap_or(i32::MAX)),
                scheduled_ns: Some(due_ns),
            }
        },
    )
    .await;
    close(cell, handle, background).await
}

/// Sends requests open loop: the `i`-th offset of `due` (ns after the schedule's zero,
/// taken as the window opens) makes `make(cell, i, due_ns)` leave at that time, whatever
/// the server does, each on a connection of its own while it runs (kept open for later
/// requests), at most `cap` at once; a request due while that many run waits for one to
/// end (its `sent_ns` shows by how much). Each runs to completion; returns when all
/// ended (or the cell gave up).
async fn open_loop<I, F>(cell: &Arc<Cell>, primed: Vec<Lane>, cap: Option<u32>, due: I, make: F)
where
    I: Iterator<Item = i64> + Send + 'static,
    F: Fn(&Arc<Cell>, usize, i64) -> RequestSpec + Send + 'static,
{
    let cap = cap.unwrap_or(u32::MAX);
    // One permit per request in flight; taking all of them back waits for every one.
    let slots = Arc::new(tokio::sync::Semaphore::new(
        usize::try_from(cap).unwrap_or(usize::MAX),
    ));
    let idle = Arc::new(std::sync::Mutex::new(primed));
    let (cancel_tx, cancel_rx) = watch::channel(false);
    cell.event(EventKind::WindowOpen, None, None).await;
    // The dispatcher runs on the runtime, waking for each request on an exact timer
    // (alarm.rs: a timerfd on Linux, where the runtime's own timer rounds every wait up to
    // the next millisecond), and spawns the request there when it is due. A task of its
    // own, so it runs on a worker, where the timer's wake-up lands; it ends when the cell
    // gives up (cancel turns true) or is dropped (Ctrl-C: the sender goes with the cell's
    // future).
    let dispatcher = {
        let (cell, slots, idle, mut cancel) =
            (cell.clone(), slots.clone(), idle.clone(), cancel_rx.clone());
        tokio::spawn(async move {
            let mut alarm = crate::send::alarm::Alarm::new();
            // The schedule's zero: request i is due `offset_i` after it.
            let zero_ns = cell.ctx.clock.now_ns();
            let zero = Instant::now();
            for (i, offset_ns) in due.enumerate() {
                if cell.pacer.gave_up().is_some() || *cancel.borrow() {
                    break;
                }
                // Built before its time comes, so building costs no lag.
                let spec = make(&cell, i, zero_ns + offset_ns);
                let due = zero + Duration::from_nanos(u64::try_from(offset_ns).unwrap_or(0));
                let permit = tokio::select! {
                    biased;
                    _ = cancel.wait_for(|c| *c) => None,
                    p = async {
                        alarm.until(due).await;
                        slots.clone().acquire_owned().await.ok()
                    } => p,
                };
                let Some(permit) = permit else {
                    break;
                };
                let lane = idle.lock().ok().and_then(|mut v| v.pop());
                let (cell, idle, cancel) = (cell.clone(), idle.clone(), cancel.clone());
                tokio::spawn(async move {
                    let mut lane = lane.unwrap_or_else(|| Lane::new(cell.ctx.transport.clone()));
                    let ran = cell.run(&mut lane, &spec, cancel, None).await;
                    if let Ok(mut v) = idle.lock() {
                        v.push(lane);
                    }
                    cell.account(&ran);
                    drop(permit);
                });
            }
        })
    };
    tokio::pin!(dispatcher);
    tokio::select! {
        _ = &mut dispatcher => {}
        () = cell.gave_up.notified() => {
            let _ = cancel_tx.send(true);
            let _ = dispatcher.await;
        }
    }
    if cell.pacer.gave_up().is_some() {
        let _ = cancel_tx.send(true);
    }
    // Every request ends (each runs to completion; a give-up cancels them).
    let all = slots.acquire_many(cap);
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => {}
        () = cell.gave_up.notified() => {
            let _ = cancel_tx.send(true);
            let _ = all.await;
        }
    }
}
