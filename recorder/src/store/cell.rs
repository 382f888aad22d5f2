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

mod closed;
mod open;
mod talk;
mod writer;
pub use closed::{record_decode, record_prefill};
pub use open::{ReplayPlan, record_burst, record_rate, record_replay};
pub use talk::{ConversationPlan, record_conversation};
use writer::writer_loop;

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
/// How long an idle server must stay idle, its token counters unmoved, to count as
/// drained: longer than one engine step of the requests a cancel leaves behind (vLLM on
/// two CPU cores: a 256-token prefill takes about 0.1 s).
pub const DRAIN_QUIET: Duration = Duration::from_millis(500);
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
    /// A conversation cell's sessions.
    pub conversation: Option<Arc<ConversationPlan>>,
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
            keep_text: self.plan.key.phase == Phase::Conversation,
        };
        client::run(lane, spec, ctl, &self.ctx.clock, &self.tx).await
    }

    /// Scrapes once and queues the rows, then samples the GPUs (off the runtime's
    /// threads: NVML calls block); returns the server's load when known.
    async fn scrape_once(&self) -> Option<Load> {
        self.scrape_within(SCRAPE_TIMEOUT).await
    }

    /// One scrape that gives up after `limit`.
    async fn scrape_within(&self, limit: Duration) -> Option<Load> {
        let rw = self.scrape_metrics(limit).await;
        if let Some(gpus) = self.ctx.gpus.clone() {
            if let Some(load) = rw {
                gpus.server_running(load.running);
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

    async fn scrape_metrics(&self, limit: Duration) -> Option<Load> {
        let url = self.ctx.metrics_url.as_deref()?;
        match scrape::scrape(&self.ctx.client, url, &self.ctx.clock, limit).await {
            Ok(rows) => {
                let rw = load(&rows);
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

/// What one scrape says of the server's load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Requests running and waiting (gauges, summed over label sets).
    pub running: f64,
    pub waiting: f64,
    /// Prompt plus generated tokens so far (counters), where the engine has them: work
    /// done between two scrapes shows as a change here even when the gauges read 0.
    pub work: Option<f64>,
}

impl Load {
    fn idle(&self) -> bool {
        self.running == 0.0 && self.waiting == 0.0
    }
}

/// The server's load, from the first engine whose gauges appear.
pub fn load(rows: &[MetricRow]) -> Option<Load> {
    Engine::ALL.iter().find_map(|e| {
        let EngineSeries {
            running,
            waiting,
            prompt_tokens,
            generated_tokens,
            ..
        } = e.series();
        let sum = |name: &str| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.name == name)
                .map(|r| r.value)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>())
        };
        let work = match (sum(prompt_tokens), sum(generated_tokens)) {
            (None, None) => None,
            (p, g) => Some(p.unwrap_or(0.0) + g.unwrap_or(0.0)),
        };
        Some(Load {
            running: sum(running)?,
            waiting: sum(waiting).unwrap_or(0.0),
            work,
        })
    })
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
    let (touched, ready) = tokio::sync::oneshot::channel();
    let handle = tokio::task::spawn_blocking(move || {
        crate::run::heap::prepare_writer();
        let _ = touched.send(());
        let r = writer_loop(writer, rx, tokens, &writers.stop, &feed, key);
        writers.running.fetch_sub(1, Ordering::AcqRel);
        r
    });
    // The writer's arena is touched before the cell's first request, not beside it
    // (`run::heap`); a writer that failed to start is the handle's to tell.
    let _ = ready.await;
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
///
/// One idle scrape is not believed: vLLM publishes its gauges and counters after each
/// engine step, so a request sent just before the cancel, still in its first step (or
/// in the front end), reads as idle and would prefill inside the next cell (CI once saw
/// the next prefill cell's scout meet such a request's cache hit). Drained is two idle
/// scrapes [`DRAIN_QUIET`] apart with the token counters unmoved between them.
async fn drain(cell: &Arc<Cell>) {
    cell.event(EventKind::DrainStart, None, None).await;
    let deadline = Instant::now() + cell.ctx.drain_timeout;
    // The idle scrape awaiting confirmation.
    let mut idle: Option<Load> = None;
    let drain = loop {
        // A scrape takes no longer than the drain has left (at least a moment, so that
        // a drain at its deadline still asks once).
        let left = deadline.saturating_duration_since(Instant::now());
        let limit = left.clamp(Duration::from_millis(200), SCRAPE_TIMEOUT);
        match cell.scrape_within(limit).await {
            Some(now) if now.idle() => {
                if idle.is_some_and(|before| before.work == now.work) || Instant::now() >= deadline
                {
                    break Drain::Drained;
                }
                idle = Some(now);
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(DRAIN_QUIET.min(left)).await;
            }
            None if cell.ctx.metrics_url.is_none() => {
                tokio::time::sleep(NO_METRICS_WAIT).await;
                break Drain::NoMetrics {
                    waited_ns: i64::try_from(NO_METRICS_WAIT.as_nanos()).unwrap_or(i64::MAX),
                };
            }
            None => break Drain::NotChecked,
            Some(now) if Instant::now() >= deadline => {
                break Drain::TimedOut {
                    running: now.running,
                    waiting: now.waiting,
                };
            }
            Some(_) => {
                idle = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let detail = drain.to_detail();
    cell.event(EventKind::DrainEnd, None, Some(detail)).await;
}

/// Ends a cell whose requests all ended: the window's close, then [`settle`].
async fn close(
    cell: Arc<Cell>,
    handle: tokio::task::JoinHandle<Result<Recorded, CellError>>,
    background: Background,
) -> Result<Recorded, CellError> {
    cell.event(EventKind::WindowClose, None, None).await;
    settle(cell, handle, background).await
}

/// Ends a cell whose window closed and whose requests ended: the last scrape, the drain,
/// the commit (or nothing committed when the server refused too often).
async fn settle(
    cell: Arc<Cell>,
    handle: tokio::task::JoinHandle<Result<Recorded, CellError>>,
    background: Background,
) -> Result<Recorded, CellError> {
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
