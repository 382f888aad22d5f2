//! The closed-loop cells: a prefill cell's cold scout, and a decode cell's N workers
//! with readiness warm-up, a fixed window, cancel at window close and a drain barrier.

use super::*;

/// Records a prefill cell: one cold scout request whose TTFT measures prefill.
pub async fn record_prefill(
    ctx: &RunCtx,
    plan: &CellPlan,
    run: &Path,
) -> Result<Recorded, CellError> {
    debug_assert_eq!(plan.key.phase, Phase::Prefill);
    let (cell, handle) = start(ctx, plan, run).await?;
    cell.scrape_once().await;
    let (_cancel_tx, cancel) = watch::channel(false);
    let mut lane = Lane::new(ctx.transport.clone());
    // A refused scout is sent again after the backoff, until it streams or the cell
    // gives up.
    loop {
        let mut never = cancel.clone();
        if !cell.paced(&mut never).await {
            break;
        }
        let spec = cell.spec(None, Role::Scout, &plan.scout_body, SCOUT_MAX_TOKENS);
        let ran = cell.run(&mut lane, &spec, cancel.clone(), None).await;
        if !cell.account(&ran) || ran.refused.is_none() {
            break;
        }
    }
    if let Some(why) = cell.pacer.gave_up() {
        return give_up(cell, handle, why).await;
    }
    cell.scrape_once().await;
    finish(cell, handle).await
}

/// Records a decode cell: N closed-loop streams through warm-up, window, cancel, drain.
pub async fn record_decode(
    ctx: &RunCtx,
    plan: &CellPlan,
    run: &Path,
) -> Result<Recorded, CellError> {
    debug_assert_eq!(plan.key.phase, Phase::Decode);
    let (cell, handle) = start(ctx, plan, run).await?;
    let n = plan.key.concurrency.max(1);
    let background = Background::start(&cell);

    cell.event(EventKind::WarmupStart, None, None).await;
    let mut lanes = prime(&cell, n).await.into_iter();
    let window_open = Arc::new(AtomicBool::new(false));
    let window_closed = Arc::new(AtomicBool::new(false));
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let mut ready = Vec::new();
    let mut workers = Vec::new();
    for slot in 0..n {
        let (first_tx, first_rx) = oneshot::channel();
        ready.push(first_rx);
        let cell = cell.clone();
        let open = window_open.clone();
        let closed = window_closed.clone();
        let cancel = cancel_rx.clone();
        // The worker's connection, kept alive from one request to the next (opened by
        // its priming request).
        let mut lane = lanes
            .next()
            .unwrap_or_else(|| Lane::new(cell.ctx.transport.clone()));
        workers.push(tokio::spawn(async move {
            let mut first = Some(first_tx);
            let mut stop = cancel.clone();
            while !closed.load(Ordering::Acquire) {
                // The window may have closed while the pacer held the request back.
                if !cell.paced(&mut stop).await || closed.load(Ordering::Acquire) {
                    break;
                }
                let role = if open.load(Ordering::Acquire) {
                    Role::Measured
                } else {
                    Role::Warmup
                };
                let slot = i32::try_from(slot).unwrap_or(i32::MAX);
                let spec = cell.spec(Some(slot), role, &cell.plan.body, cell.plan.max_tokens);
                let mut ran = cell
                    .run(&mut lane, &spec, cancel.clone(), first.take())
                    .await;
                // Readiness waits for a token: a request without one hands it on.
                first = first.or(ran.first_token.take());
                if !cell.account(&ran) {
                    break;
                }
            }
        }));
    }
    // Readiness: every stream has produced a token (or the warm-up timed out, or the
    // server refused so often that the cell gives up).
    let timeout_ns = i64::try_from(ctx.warmup_timeout.as_nanos()).unwrap_or(i64::MAX);
    let all_ready = tokio::select! {
        r = tokio::time::timeout(ctx.warmup_timeout, futures_util::future::join_all(ready)) => Some(r),
        () = cell.gave_up.notified() => None,
    };
    let readiness = match all_ready {
        Some(Ok(tokens)) if tokens.iter().all(Result::is_ok) => Readiness::Ready,
        Some(Ok(_)) => Readiness::NotReady { timeout_ns: None },
        Some(Err(_)) => Readiness::NotReady {
            timeout_ns: Some(timeout_ns),
        },
        None => {
            window_closed.store(true, Ordering::Release);
            let _ = cancel_tx.send(true);
            for w in workers {
                let _ = w.await;
            }
            background.stop().await;
            let why = cell.pacer.gave_up().unwrap_or(GaveUp {
                message: "the server refused too many requests".to_string(),
                permanent: false,
                by_user: false,
            });
            return give_up(cell, handle, why).await;
        }
    };
    let detail = readiness.to_detail();
    cell.event(EventKind::WarmupEnd, None, Some(detail)).await;
    cell.scrape_once().await;
    cell.event(EventKind::WindowOpen, None, None).await;
    window_open.store(true, Ordering::Release);
    tokio::select! {
        () = tokio::time::sleep(plan.window) => {}
        () = cell.gave_up.notified() => {}
    }
    window_closed.store(true, Ordering::Release);
    cell.event(EventKind::WindowClose, None, None).await;
    let _ = cancel_tx.send(true);
    for w in workers {
        let _ = w.await;
    }
    settle(cell, handle, background).await
}
