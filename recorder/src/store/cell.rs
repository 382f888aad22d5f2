//! One cell of a run, recorded: a writer thread fed by a bounded channel, a metrics
//! scraper, a 50 ms tick that measures the recorder's own lateness, and one cold scout
//! (prefill), N closed-loop workers with readiness warm-up, a fixed window, cancel at
//! window close and a drain barrier (decode), exactly N requests run to completion
//! (burst), or open-loop arrivals on a schedule (rate) or a workload's times (replay).
//! The cell commits atomically.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokentrace_schemas::clock::{RunClock, process_cpu_ns};
use tokentrace_schemas::manifest::CellMeta;
use tokentrace_schemas::protocol::{Drain, Engine, EngineSeries, LATE_TICK_MS, LagStat, Readiness};
use tokentrace_schemas::tables::{Endpoint, EventKind, EventRow, MetricRow, MetricType, Role};
use tokentrace_schemas::writer::CellWriter;
use tokentrace_schemas::{CellKey, Phase};
use tokio::sync::{Notify, oneshot, watch};

use crate::observe::gauges::Outcomes;
use crate::observe::scrape;
use crate::send::client::{self, Lane, RunCtl};
use crate::send::http::Transport;
use crate::send::pace::{AfterRefusal, GaveUp, Pacer};
use crate::send::request::{Body, RequestSpec};
use crate::store::queue;
use crate::store::queue::Record;
use tokentrace_schemas::manifest::TokenCounting;

/// How long the writer thread sleeps when the queue is empty, unless a sender finds it
/// half full or commits the cell. Each wake-up is a context switch whatever the rate (a
/// 5 ms poll cost 5% of the recorder's whole-run CPU at 20 req/s, and 50 ms still 5% of
/// its CPU per event during the load, BENCHMARKS.md); the queue's bounds, not this
/// period, cap memory. The views draw every [`crate::observe::gauges::LANES_EVERY`] or slower,
/// so they miss nothing by it.
pub const WRITER_POLL: Duration = Duration::from_millis(250);
/// Period of the tick whose lateness measures the recorder's own delay. The share of ticks
/// later than a threshold estimates the share of the time the runtime was that late,
/// whatever the period; a stall longer than the period always shows, a shorter one with a
/// chance of its length over the period. Each tick is a wake-up of its own: at 10 ms they
/// were a tenth of the recorder's CPU at 20 req/s (BENCHMARKS.md).
pub const LAG_TICK: Duration = Duration::from_millis(50);
/// Bytes of records (by [`queue::weight`]) a cell's writer holds back to encode once the
/// cell's requests have ended (see `Stash`). With the queue's bound, what waits between
/// network and disk stays under this plus [`queue::QUEUE_BYTES`].
pub const STASH_BYTES: usize = 64 << 20;
pub use tokentrace_schemas::protocol::{CLIENT_CPU_METRIC, CLIENT_LAG_METRIC};
/// How long the drain barrier waits when the server has no metrics to ask.
pub const NO_METRICS_WAIT: Duration = Duration::from_secs(1);
/// The longest one metrics scrape may take (the drain's scrapes take no longer than the
/// drain has left).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a cell's end waits for a scrape in flight before it abandons it (a scrape
/// through a link that went silent would otherwise hold the cell for its timeout).
pub const SCRAPER_STOP_WAIT: Duration = Duration::from_secs(1);
/// Tokens a prefill scout asks for (its TTFT is the measurement).
pub const SCOUT_MAX_TOKENS: i32 = 16;
/// Tokens a priming request asks for: enough that the N primes of a round run at the
/// same time on the server (one per slot), not one after another on the same slot.
pub const PRIME_MAX_TOKENS: i32 = 16;
/// Most rounds of priming requests before a decode cell's warm-up.
pub const PRIME_ROUNDS: u32 = 3;
/// Connections a replay cell opens (priming each) before its schedule starts.
pub const REPLAY_LANES: u32 = 4;
/// A request with less than this share of its prompt served from cache prefilled cold.
pub const WARM_FRACTION: f64 = 0.5;

/// Why a cell failed.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    #[error(transparent)]
    Trace(#[from] tokentrace_schemas::Error),
    #[error("the cell writer stopped: {0}")]
    Writer(String),
    /// The cell was stopped before it ended (Ctrl-C); nothing was committed.
    #[error("the cell was interrupted before it ended; it was not committed")]
    Abandoned,
    /// The server turned away too many requests in a row; nothing was committed.
    #[error("{}", .0.message)]
    Refused(GaveUp),
}

/// Everything a cell needs that the whole run shares.
#[derive(Debug, Clone)]
pub struct RunCtx {
    /// For scrapes.
    pub client: reqwest::Client,
    pub clock: RunClock,
    /// Where generation requests go (the endpoint's URL, headers, connection ids).
    pub transport: Arc<Transport>,
    pub endpoint: Endpoint,
    pub metrics_url: Option<String>,
    pub scrape_interval: Duration,
    pub stall_timeout: Duration,
    pub warmup_timeout: Duration,
    pub drain_timeout: Duration,
    pub counting: TokenCounting,
    /// Tokens written so far, for progress displays.
    pub tokens: Arc<AtomicU64>,
    /// The session's cell writers.
    pub writers: Arc<Writers>,
    /// GPU telemetry, sampled with every scrape; `None` without NVML.
    pub gpus: Option<Arc<dyn crate::observe::gpu::GpuSource>>,
    /// The user's keys (skip the cell under way).
    pub steer: Arc<crate::view::steer::Steer>,
    /// What the live view shows of the server's gauges, from each scrape.
    pub feed: Arc<crate::observe::gauges::Feed>,
}

/// The cell writers of a recording session: how many still run, and whether the session
/// is stopping (Ctrl-C), in which case a writer that has not been told to commit drops
/// its cell at once.
#[derive(Debug, Default)]
pub struct Writers {
    pub running: AtomicUsize,
    pub stop: AtomicBool,
}

/// One cell to record.
#[derive(Debug, Clone)]
pub struct CellPlan {
    pub key: CellKey,
    /// The request body (identical prompts within a context; burst and rate cells' measured
    /// requests send `variants` of it instead).
    pub body: bytes::Bytes,
    /// The body of the prefill scout (same prompt, few tokens).
    pub scout_body: bytes::Bytes,
    /// The body of a priming request (same prompt, [`PRIME_MAX_TOKENS`] tokens).
    pub prime_body: bytes::Bytes,
    /// Send the first priming request alone: with no scout before it, it prefills
    /// cold, and its TTFT is the context's prefill measurement (`--prefill-mode
    /// warmup`), not shared with other cold prefills.
    pub solo_first_prime: bool,
    pub prompt_tokens: i32,
    pub max_tokens: i32,
    pub window: Duration,
    /// First request id of the cell (ids are unique within the run).
    pub first_request_id: i64,
    /// Measured requests of a burst cell.
    pub requests: u32,
    /// The schedule's settings, for a rate cell.
    pub rate: Option<tokentrace_schemas::manifest::RateConfig>,
    /// Each measured request's own prompt (burst and rate cells); `None`: all share
    /// `body`.
    pub variants: Option<Arc<crate::send::prompt::Variants>>,
    /// Records to write into the cell before its own (the run's probe request).
    pub preamble: Vec<Record>,
    /// A replay cell's workload.
    pub replay: Option<Arc<ReplayPlan>>,
}

struct Cell {
    ctx: RunCtx,
    plan: CellPlan,
    tx: queue::Sender,
    next_id: AtomicI64,
    /// Refusals of the cell's requests and the backoff they impose.
    pacer: Pacer,
    /// Told once when the pacer gives up.
    gave_up: Notify,
    /// The task that gives the cell up when the user skips it (ended with the cell).
    skip_watch: std::sync::OnceLock<tokio::task::JoinHandle<()>>,
}

impl Drop for Cell {
    fn drop(&mut self) {
        if let Some(w) = self.skip_watch.get() {
            w.abort();
        }
    }
}

/// Why a cell the user skipped ends.
pub const SKIPPED_BY_USER: &str = "skipped by the user";

/// Gives `cell` up when the user skips it (the screen's `s`); holds it weakly, so that
/// the cell ends and drops as it would.
fn watch_skip(cell: &Arc<Cell>) {
    let mut skips = cell.ctx.steer.skips();
    skips.borrow_and_update();
    let weak = Arc::downgrade(cell);
    let task = tokio::spawn(async move {
        if skips.changed().await.is_ok()
            && let Some(cell) = weak.upgrade()
        {
            cell.pacer.give_up(GaveUp {
                message: SKIPPED_BY_USER.to_string(),
                permanent: false,
                by_user: true,
            });
            cell.gave_up.notify_one();
        }
    });
    let _ = cell.skip_watch.set(task);
}

impl Cell {
    async fn event(&self, kind: EventKind, request_id: Option<i64>, detail: Option<String>) {
        let row = EventRow {
            time_ns: self.ctx.clock.now_ns(),
            kind,
            request_id,
            detail,
        };
        let _ = self.tx.send(Record::Event(row)).await;
    }

    fn spec(
        &self,
        slot: Option<i32>,
        role: Role,
        body: &bytes::Bytes,
        max_tokens: i32,
    ) -> RequestSpec {
        RequestSpec {
            request_id: self.next_id.fetch_add(1, Ordering::Relaxed),
            slot,
            role,
            endpoint: self.ctx.endpoint,
            body: Body::Shared(body.clone()),
            prompt_tokens_requested: self.plan.prompt_tokens,
            max_tokens: Some(max_tokens),
            scheduled_ns: None,
        }
    }

    /// A measured request of a burst or rate cell: its own variant of the prompt when
    /// the cell has them (keyed by its request id, unique in the run), so its prefill
    /// is cold like every other's.
    fn measured(&self, slot: Option<i32>) -> RequestSpec {
        let mut spec = self.spec(slot, Role::Measured, &self.plan.body, self.plan.max_tokens);
        if let Some(v) = &self.plan.variants {
            spec.body = Body::Variant(v.clone(), spec.request_id.unsigned_abs());
        }
        spec
    }

    /// Runs `spec` on `lane` to its end under the run's token counting and stall
    /// timeout (`cancel` turning true closes it); the rows go to the cell's writer.
    async fn run(
        &self,
        lane: &mut Lane,
        spec: &RequestSpec,
        cancel: watch::Receiver<bool>,
        first_token: Option<oneshot::Sender<i64>>,
    ) -> client::Ran {
        let ctl = RunCtl {
            counting: self.ctx.counting.into(),
            stall_timeout: self.ctx.stall_timeout,
            cancel,
            first_token,
        };
        client::run(lane, spec, ctl, &self.ctx.clock, &self.tx).await
    }

    /// Scrapes once and queues the rows, then samples the GPUs (off the runtime's
    /// threads: NVML calls block); returns (running, waiting) when known.
    async fn scrape_once(&self) -> Option<(f64, f64)> {
        self.scrape_within(SCRAPE_TIMEOUT).await
    }

    /// One scrape that gives up after `limit`.
    async fn scrape_within(&self, limit: Duration) -> Option<(f64, f64)> {
        let rw = self.scrape_metrics(limit).await;
        if let Some(gpus) = self.ctx.gpus.clone() {
            if let Some((running, _)) = rw {
                gpus.server_running(running);
            }
            let clock = self.ctx.clock;
            if let Ok(rows) = tokio::task::spawn_blocking(move || gpus.sample(clock.now_ns())).await
                && !rows.is_empty()
            {
                self.ctx.feed.gpu(&rows);
                let _ = self.tx.send(Record::Gpu(rows)).await;
            }
        }
        rw
    }

    async fn scrape_metrics(&self, limit: Duration) -> Option<(f64, f64)> {
        let url = self.ctx.metrics_url.as_deref()?;
        match scrape::scrape(&self.ctx.client, url, &self.ctx.clock, limit).await {
            Ok(rows) => {
                let rw = running_waiting(&rows);
                self.ctx.feed.scraped(&rows);
                let _ = self.tx.send(Record::Metrics(rows)).await;
                rw
            }
            Err(e) => {
                self.event(
                    EventKind::Fault,
                    None,
                    Some(format!("metrics scrape failed: {e}")),
                )
                .await;
                None
            }
        }
    }
}

/// (running, waiting) summed over label sets, from the first engine whose gauges appear.
pub fn running_waiting(rows: &[MetricRow]) -> Option<(f64, f64)> {
    Engine::ALL.iter().find_map(|e| {
        let EngineSeries {
            running, waiting, ..
        } = e.series();
        let sum = |name: &str| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.name == name)
                .map(|r| r.value)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>())
        };
        Some((sum(running)?, sum(waiting).unwrap_or(0.0)))
    })
}

fn writer_loop(
    mut w: CellWriter,
    mut rx: queue::Receiver,
    tokens: Arc<AtomicU64>,
    stop: &AtomicBool,
    feed: &crate::observe::gauges::Feed,
    key: CellKey,
) -> Result<Recorded, CellError> {
    let label = key.to_string();
    let mut commit = false;
    let mut tally = Outcomes::default();
    let mut lanes = feed.lanes_counter();
    let mut stash = Stash::default();
    loop {
        // Not woken per record (that costs the sender a futex call and a context switch
        // each): it sleeps [`WRITER_POLL`] at a time, woken early only by a queue half
        // full or the cell's commit.
        let (r, weight) = match rx.try_recv_weighed() {
            Ok(got) => got,
            Err(queue::Empty::Now) => {
                // Stopping before the cell was told to commit: nothing of it is kept.
                if !commit && stop.load(Ordering::Acquire) {
                    return Err(CellError::Abandoned);
                }
                rx.park(WRITER_POLL);
                continue;
            }
            Err(queue::Empty::Done) => break,
        };
        // Counted as it comes (the progress line and the live view), written later.
        match &r {
            Record::Read {
                request_id,
                arrival_ns,
                chunks,
                ..
            } => {
                let n: u64 = chunks
                    .iter()
                    .map(|c| c.tokens.and_then(|t| u64::try_from(t).ok()).unwrap_or(0))
                    .sum();
                tokens.fetch_add(n, Ordering::Relaxed);
                if let Some(l) = &mut lanes {
                    l.add(*request_id, n, *arrival_ns, &tally, feed);
                }
            }
            Record::Request(q) => {
                tally.count(q);
                if let Some(l) = &mut lanes {
                    l.ended(q, &label, feed);
                }
            }
            Record::Event(e) => {
                if let Some(l) = &mut lanes
                    && e.kind == EventKind::Fault
                {
                    l.fault(e.detail.as_deref().unwrap_or("a fault"), &label, feed);
                }
            }
            Record::Commit => commit = true,
            Record::Metrics(_) | Record::Gpu(_) | Record::Replay(_) => {}
        }
        for r in stash.hold(r, weight) {
            write_record(&mut w, r)?;
        }
    }
    match &lanes {
        Some(l) => l.finish(&tally, feed),
        None => feed.lanes(Vec::new()),
    }
    if !commit {
        return Err(CellError::Abandoned);
    }
    for r in stash.rest() {
        write_record(&mut w, r)?;
    }
    Ok(Recorded {
        meta: w.commit()?,
        tally,
    })
}

/// Records the writer holds back, oldest first, up to [`STASH_BYTES`]: while a cell's
/// load runs the writer only counts what comes, and encodes it (the zstd raw capture,
/// Parquet rows) once the cell's requests have ended, so that work does not compete with
/// the requests it records. Past the bound the oldest are written as new ones come, as
/// without a stash. Nothing is lost by waiting: a cell is kept only when it commits.
#[derive(Default)]
struct Stash {
    held: std::collections::VecDeque<(Record, usize)>,
    bytes: usize,
}

impl Stash {
    /// Holds `r`, of [`queue::weight`] `weight`; returns the records to write now to stay
    /// within the bound.
    fn hold(&mut self, r: Record, weight: usize) -> impl Iterator<Item = Record> + '_ {
        let weight = weight + std::mem::size_of::<(Record, usize)>();
        self.bytes += weight;
        self.held.push_back((r, weight));
        std::iter::from_fn(move || {
            if self.bytes <= STASH_BYTES {
                return None;
            }
            let (r, weight) = self.held.pop_front()?;
            self.bytes -= weight;
            Some(r)
        })
    }

    /// Everything held, oldest first.
    fn rest(self) -> impl Iterator<Item = Record> {
        self.held.into_iter().map(|(r, _)| r)
    }
}

/// Writes one record into the cell's tables.
fn write_record(w: &mut CellWriter, r: Record) -> Result<(), CellError> {
    match r {
        Record::Read {
            request_id,
            arrival_ns,
            bytes,
            chunks,
        } => {
            if !bytes.is_empty() {
                w.raw.write(request_id, arrival_ns, &bytes)?;
            }
            for c in chunks {
                w.push_chunk(c)?;
            }
        }
        Record::Request(q) => w.push_request(*q)?,
        Record::Metrics(rows) => {
            for m in rows {
                w.push_metric(m)?;
            }
        }
        Record::Gpu(rows) => {
            for g in rows {
                w.push_gpu(g)?;
            }
        }
        Record::Event(e) => w.push_event(e)?,
        Record::Replay(r) => w.push_replay(*r)?,
        Record::Commit => {}
    }
    Ok(())
}

/// A committed cell, with its requests counted for the progress line.
#[derive(Debug)]
pub struct Recorded {
    pub meta: CellMeta,
    pub tally: Outcomes,
}

/// Measures how late a [`LAG_TICK`] tick fires on this runtime; queues one summary per second
/// (`stat="max"` and `stat="mean"`), and one for the last partial second at `stop`.
async fn tick_lateness(tx: queue::Sender, clock: RunClock, mut stop: watch::Receiver<bool>) {
    // A timerfd on Linux (alarm.rs): exact, and no re-arming at each tick.
    let mut ticker = crate::send::alarm::Ticker::new(LAG_TICK);
    let mut window_start = clock.now_ns();
    let (mut max, mut sum, mut n) = (0.0f64, 0.0f64, 0u32);
    let mut over = [0u32; LATE_TICK_MS.len()];
    loop {
        let stopping = tokio::select! {
            deadline = ticker.tick() => {
                let late = Instant::now().saturating_duration_since(deadline).as_secs_f64();
                max = max.max(late);
                sum += late;
                n += 1;
                for (count, ms) in over.iter_mut().zip(LATE_TICK_MS) {
                    if late * 1e3 > f64::from(ms) {
                        *count += 1;
                    }
                }
                false
            }
            _ = stop.changed() => true,
        };
        let now = clock.now_ns();
        if (stopping && n > 0) || now - window_start >= 1_000_000_000 {
            let mut rows: Vec<MetricRow> = LagStat::all()
                .map(|stat| {
                    let value = match stat {
                        LagStat::Max => max,
                        LagStat::Mean => sum / f64::from(n.max(1)),
                        LagStat::Ticks => f64::from(n),
                        LagStat::Over(i) => f64::from(over.get(i).copied().unwrap_or(0)),
                    };
                    MetricRow {
                        scrape_start_ns: window_start,
                        scrape_end_ns: now,
                        family: CLIENT_LAG_METRIC.to_string(),
                        name: CLIENT_LAG_METRIC.to_string(),
                        labels: stat.labels(),
                        value,
                        metric_type: MetricType::Gauge,
                    }
                })
                .collect();
            rows.push(MetricRow {
                scrape_start_ns: now,
                scrape_end_ns: now,
                family: CLIENT_CPU_METRIC.to_string(),
                name: CLIENT_CPU_METRIC.to_string(),
                labels: String::new(),
                value: process_cpu_ns() as f64 / 1e9,
                metric_type: MetricType::Counter,
            });
            let _ = tx.send(Record::Metrics(rows)).await;
            (max, sum, n, window_start) = (0.0, 0.0, 0, now);
            over = [0; LATE_TICK_MS.len()];
        }
        if stopping {
            return;
        }
    }
}

async fn start(
    ctx: &RunCtx,
    plan: &CellPlan,
    run: &Path,
) -> Result<
    (
        Arc<Cell>,
        tokio::task::JoinHandle<Result<Recorded, CellError>>,
    ),
    CellError,
> {
    let writer = CellWriter::create(run, plan.key)?;
    let (tx, rx) = queue::queue(queue::QUEUE_RECORDS, queue::QUEUE_BYTES);
    let tokens = ctx.tokens.clone();
    let writers = ctx.writers.clone();
    writers.running.fetch_add(1, Ordering::AcqRel);
    let feed = ctx.feed.clone();
    let key = plan.key;
    let handle = tokio::task::spawn_blocking(move || {
        let r = writer_loop(writer, rx, tokens, &writers.stop, &feed, key);
        writers.running.fetch_sub(1, Ordering::AcqRel);
        r
    });
    let cell = Arc::new(Cell {
        ctx: ctx.clone(),
        plan: plan.clone(),
        tx,
        next_id: AtomicI64::new(plan.first_request_id),
        pacer: Pacer::new(),
        gave_up: Notify::new(),
        skip_watch: std::sync::OnceLock::new(),
    });
    watch_skip(&cell);
    cell.event(EventKind::CellStart, None, Some(plan.key.to_string()))
        .await;
    for r in &plan.preamble {
        let _ = cell.tx.send(r.clone()).await;
    }
    Ok((cell, handle))
}

/// Ends a cell the server refused: nothing is committed, and the error says why.
async fn give_up(
    cell: Arc<Cell>,
    handle: tokio::task::JoinHandle<Result<Recorded, CellError>>,
    why: GaveUp,
) -> Result<Recorded, CellError> {
    drop(cell);
    let _ = handle.await;
    Err(CellError::Refused(why))
}

impl Cell {
    /// Waits for this request's turn while refusals are in progress; false when the
    /// cell gave up or `stop` turned true first.
    async fn paced(&self, stop: &mut watch::Receiver<bool>) -> bool {
        if let Some(at) = self.pacer.turn() {
            tokio::select! {
                () = tokio::time::sleep_until(at.into()) => {}
                _ = stop.wait_for(|s| *s) => return false,
            }
        }
        self.pacer.gave_up().is_none()
    }

    /// Tells the pacer how a request went; false when the cell gives up.
    fn account(&self, ran: &client::Ran) -> bool {
        match &ran.refused {
            Some(r) => match self.pacer.refused(r.clone()) {
                AfterRefusal::Retry => true,
                AfterRefusal::GiveUp(_) => {
                    self.gave_up.notify_one();
                    false
                }
            },
            None => {
                if ran.produced {
                    self.pacer.served();
                }
                true
            }
        }
    }
}

async fn finish(
    cell: Arc<Cell>,
    handle: tokio::task::JoinHandle<Result<Recorded, CellError>>,
) -> Result<Recorded, CellError> {
    let (refused, last) = cell.pacer.refusals();
    if let Some(last) = last {
        let detail =
            format!("refusals: {refused} requests turned away before streaming (last: {last})");
        cell.event(EventKind::Note, None, Some(detail)).await;
    }
    cell.event(EventKind::CellEnd, None, None).await;
    let _ = cell.tx.send(Record::Commit).await;
    drop(cell);
    handle.await.map_err(|e| CellError::Writer(e.to_string()))?
}

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

/// Fills the server's prompt cache for every stream before the warm-up: N short
/// requests at once, and again while any of them prefilled cold (an engine with
/// per-slot caches serves a prompt only on the slots that saw it), at most
/// [`PRIME_ROUNDS`] rounds. Says how each round went in a note event. Returns each
/// stream's lane, whose kept-alive connection its worker goes on with.
async fn prime(cell: &Arc<Cell>, n: u32) -> Vec<Lane> {
    let (_cancel_tx, cancel) = watch::channel(false);
    let one = |slot: u32, mut lane: Lane| {
        let cell = cell.clone();
        let cancel = cancel.clone();
        async move {
            let mut stop = cancel.clone();
            if !cell.paced(&mut stop).await {
                return (lane, None);
            }
            let slot = i32::try_from(slot).unwrap_or(i32::MAX);
            let spec = cell.spec(
                Some(slot),
                Role::Prime,
                &cell.plan.prime_body,
                PRIME_MAX_TOKENS,
            );
            let ran = cell.run(&mut lane, &spec, cancel, None).await;
            cell.account(&ran);
            (lane, Some(ran))
        }
    };
    let mut lanes: Vec<Lane> = (0..n)
        .map(|_| Lane::new(cell.ctx.transport.clone()))
        .collect();
    for round in 1..=PRIME_ROUNDS {
        let mut taken = std::mem::take(&mut lanes).into_iter().zip(0..n);
        let mut ran: Vec<client::Ran> = Vec::new();
        if round == 1
            && cell.plan.solo_first_prime
            && let Some((lane, slot)) = taken.next()
        {
            let (lane, r) = one(slot, lane).await;
            lanes.push(lane);
            ran.extend(r);
        }
        for (lane, r) in
            futures_util::future::join_all(taken.map(|(lane, slot)| one(slot, lane))).await
        {
            lanes.push(lane);
            ran.extend(r);
        }
        let known: Vec<(i32, i32)> = ran
            .iter()
            .filter_map(|r| r.cached_tokens.zip(r.prompt_tokens))
            .collect();
        let cold = known
            .iter()
            .filter(|(c, p)| f64::from(*c) < WARM_FRACTION * f64::from(*p))
            .count();
        let detail = format!(
            "prime: round {round}, {} requests, {cold} cold of {} whose cache use the server said",
            ran.len(),
            known.len()
        );
        cell.event(EventKind::Note, None, Some(detail)).await;
        // Done when every prime was warm, or when the server does not say (nothing
        // more to learn), or when the cell gave up.
        if cold == 0 || known.is_empty() || cell.pacer.gave_up().is_some() {
            break;
        }
    }
    lanes
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
                if !cell.paced(&mut stop).await {
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
    cell.scrape_once().await;
    drain(&cell).await;
    background.stop().await;
    if let Some(why) = cell.pacer.gave_up() {
        return give_up(cell, handle, why).await;
    }
    finish(cell, handle).await
}

/// The tasks that run beside a cell's requests: the lateness tick and the scraper.
struct Background {
    stop: watch::Sender<bool>,
    tick: tokio::task::JoinHandle<()>,
    scraper: tokio::task::JoinHandle<()>,
}

impl Background {
    fn start(cell: &Arc<Cell>) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let tick = tokio::spawn(tick_lateness(
            cell.tx.clone(),
            cell.ctx.clock,
            stop_rx.clone(),
        ));
        let scraper = {
            let cell = cell.clone();
            let mut stop = stop_rx;
            tokio::spawn(async move {
                loop {
                    cell.scrape_once().await;
                    tokio::select! {
                        () = tokio::time::sleep(cell.ctx.scrape_interval) => {}
                        _ = stop.changed() => return,
                    }
                }
            })
        };
        Background {
            stop,
            tick,
            scraper,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(SCRAPER_STOP_WAIT, &mut self.scraper)
            .await
            .is_err()
        {
            self.scraper.abort();
        }
        let _ = self.tick.await;
    }
}

/// Drain barrier: waits until the server reports nothing running or waiting, within
/// the drain timeout, and says how it ended in a `drain_end` event.
async fn drain(cell: &Arc<Cell>) {
    cell.event(EventKind::DrainStart, None, None).await;
    let deadline = Instant::now() + cell.ctx.drain_timeout;
    let drain = loop {
        // A scrape takes no longer than the drain has left (at least a moment, so that
        // a drain at its deadline still asks once).
        let left = deadline.saturating_duration_since(Instant::now());
        let limit = left.clamp(Duration::from_millis(200), SCRAPE_TIMEOUT);
        match cell.scrape_within(limit).await {
            Some((r, w)) if r == 0.0 && w == 0.0 => break Drain::Drained,
            None if cell.ctx.metrics_url.is_none() => {
                tokio::time::sleep(NO_METRICS_WAIT).await;
                break Drain::NoMetrics {
                    waited_ns: i64::try_from(NO_METRICS_WAIT.as_nanos()).unwrap_or(i64::MAX),
                };
            }
            None => break Drain::NotChecked,
            Some((running, waiting)) if Instant::now() >= deadline => {
                break Drain::TimedOut { running, waiting };
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let detail = drain.to_detail();
    cell.event(EventKind::DrainEnd, None, Some(detail)).await;
}

/// Ends a cell whose requests all ended: the last scrape, the drain, the commit (or
/// nothing committed when the server refused too often).
async fn close(
    cell: Arc<Cell>,
    handle: tokio::task::JoinHandle<Result<Recorded, CellError>>,
    background: Background,
) -> Result<Recorded, CellError> {
    cell.event(EventKind::WindowClose, None, None).await;
    cell.scrape_once().await;
    drain(&cell).await;
    background.stop().await;
    if let Some(why) = cell.pacer.gave_up() {
        return give_up(cell, handle, why).await;
    }
    finish(cell, handle).await
}

/// The warm-up of a burst or rate cell: `n` streams primed (see [`prime`]) between the
/// warm-up events, then a scrape. Returns the primed connections.
async fn warm_up(cell: &Arc<Cell>, n: u32) -> Vec<Lane> {
    cell.event(EventKind::WarmupStart, None, None).await;
    let lanes = prime(cell, n).await;
    cell.event(
        EventKind::WarmupEnd,
        None,
        Some(Readiness::Ready.to_detail()),
    )
    .await;
    cell.scrape_once().await;
    lanes
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(id: i64, bytes: usize) -> Record {
        Record::Read {
            request_id: id,
            arrival_ns: id,
            bytes: vec![0; bytes],
            chunks: Vec::new(),
        }
    }

    /// Holds `r` with its queue weight, as the writer does.
    fn hold(stash: &mut Stash, r: Record) -> Vec<Record> {
        let w = queue::weight(&r);
        stash.hold(r, w).collect()
    }

    fn id(r: &Record) -> i64 {
        match r {
            Record::Read { request_id, .. } => *request_id,
            _ => -1,
        }
    }

    #[test]
    fn the_stash_holds_records_up_to_its_bound_then_writes_the_oldest() {
        let mut stash = Stash::default();
        let third = STASH_BYTES / 3;
        assert_eq!(hold(&mut stash, read(1, third)).len(), 0);
        assert_eq!(hold(&mut stash, read(2, third)).len(), 0);
        assert_eq!(hold(&mut stash, Record::Commit).len(), 0, "under the bound");
        // The fourth passes the bound: the oldest goes out, and only as many as needed.
        let out: Vec<i64> = hold(&mut stash, read(4, third)).iter().map(id).collect();
        assert_eq!(out, [1]);
        assert!(stash.bytes <= STASH_BYTES);
        // A record heavier than the whole bound goes out with everything before it.
        let out: Vec<i64> = hold(&mut stash, read(5, STASH_BYTES))
            .iter()
            .map(id)
            .collect();
        assert_eq!(out, [2, -1, 4, 5]);
        assert_eq!(stash.bytes, 0);
        assert_eq!(hold(&mut stash, read(6, 10)).len(), 0);
        let rest: Vec<i64> = stash.rest().map(|r| id(&r)).collect();
        assert_eq!(rest, [6], "the rest, oldest first");
    }
}
