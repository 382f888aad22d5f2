//! `tokentrace sim --replay RUN`: serves a recorded run back. Each generation request is
//! matched to a recorded one (by order within its prompt length and `max_tokens`) and
//! answered with that request's captured bytes at their captured gaps; `/metrics` replays
//! the recorded scrapes on the clock of the requests matched so far.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokentrace_schemas::layout::{RAW_FILE, list_cells, table_file};
use tokentrace_schemas::manifest::{EngineInfo, Manifest};
use tokentrace_schemas::protocol;
use tokentrace_schemas::raw::RawReader;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{EndReason, MetricRow, MetricType, Metrics, RequestRow, Requests};

/// Cells of frames kept in memory at once (the one being served, the one before it for
/// streams still open, and the next one, read ahead).
const RESIDENT_CELLS: usize = 3;

/// How early the pacer's OS wait ends before a deadline, the rest spent spinning: less
/// than the engine thread's margin, since replayed streams are many and the spin is paid
/// per wake-up (on the VMs this runs on the OS wait overshoots ~0.2 ms at the median).
const PACER_SPIN: Duration = Duration::from_micros(400);

/// Wakes replayed streams at their frames' deadlines from a thread of its own: tokio's
/// timer rounds every deadline up to the next millisecond, which would add ~0.5 ms to
/// every replayed gap and shift each TTFT; this thread keeps them within ~0.1 ms.
#[derive(Debug)]
struct Pacer {
    tx: Mutex<std::sync::mpsc::Sender<(Instant, tokio::sync::oneshot::Sender<()>)>>,
}

impl Pacer {
    fn start() -> Pacer {
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = std::thread::Builder::new()
            .name("replay-pacer".to_string())
            .spawn(move || pace(&rx));
        Pacer { tx: Mutex::new(tx) }
    }

    /// Returns at `deadline` (at once if it has passed, or the pacer is gone).
    async fn until(&self, deadline: Instant) {
        if deadline <= Instant::now() {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self
            .tx
            .lock()
            .map(|t| t.send((deadline, tx)).is_ok())
            .unwrap_or(false);
        if sent {
            let _ = rx.await;
        } else {
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}

/// The pacer thread: deadlines in a heap, an OS wait until shortly before the earliest,
/// then a spin that still takes new deadlines.
fn pace(rx: &std::sync::mpsc::Receiver<(Instant, tokio::sync::oneshot::Sender<()>)>) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    use std::sync::mpsc::RecvTimeoutError;
    let mut heap: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut wakers: HashMap<u64, tokio::sync::oneshot::Sender<()>> = HashMap::new();
    let mut seq = 0u64;
    let mut push = |heap: &mut BinaryHeap<Reverse<(Instant, u64)>>,
                    wakers: &mut HashMap<u64, _>,
                    (at, tx): (Instant, tokio::sync::oneshot::Sender<()>)| {
        seq += 1;
        heap.push(Reverse((at, seq)));
        wakers.insert(seq, tx);
    };
    loop {
        let Some(&Reverse((next, _))) = heap.peek() else {
            match rx.recv() {
                Ok(m) => push(&mut heap, &mut wakers, m),
                Err(_) => return,
            }
            continue;
        };
        let now = Instant::now();
        if next > now + PACER_SPIN {
            match rx.recv_timeout(next - now - PACER_SPIN) {
                Ok(m) => push(&mut heap, &mut wakers, m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            continue;
        }
        while Instant::now() < next {
            if let Ok(m) = rx.try_recv() {
                push(&mut heap, &mut wakers, m);
                break;
            }
            std::thread::yield_now();
        }
        let now = Instant::now();
        while let Some(&Reverse((at, id))) = heap.peek() {
            if at > now {
                break;
            }
            heap.pop();
            if let Some(w) = wakers.remove(&id) {
                let _ = w.send(());
            }
        }
    }
}

/// What went wrong reading a recorded run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Trace(#[from] tokentrace_schemas::Error),
    #[error("{run}: no cell has a recorded request to serve back")]
    Empty { run: PathBuf },
    #[error(
        "{run}: imported from {tool}: its cells hold that tool's figures, no recorded streams to serve back"
    )]
    Imported { run: PathBuf, tool: String },
}

/// One recorded request that can answer an incoming one.
#[derive(Debug, Clone)]
struct Rec {
    /// Index into `Recording::cells`.
    cell: usize,
    request_id: i64,
    /// When it was sent, on the recording's clock.
    sent_ns: i64,
    /// Time from send to response headers.
    headers_gap_ns: i64,
    status: Option<i32>,
    error: Option<String>,
    /// The recorder closed it (window close, stall): after its last captured byte the
    /// stream stays open, silent, until the client goes; it never invents tokens.
    open_end: bool,
}

/// Recorded requests of one prompt length and one `max_tokens`, in send order.
#[derive(Debug)]
struct Queue {
    max_tokens: u32,
    recs: Vec<Rec>,
    /// The next request not yet used (moved only under the state lock).
    next: AtomicUsize,
}

/// Recorded requests of one prompt length.
#[derive(Debug)]
struct Group {
    prompt: u32,
    queues: Vec<Queue>,
}

/// A cell folder of the recording, in the order it was recorded.
#[derive(Debug)]
struct CellInfo {
    dir: PathBuf,
    /// Frames and scrapes, read when the cell is first needed and let go once the
    /// replay has moved two cells past it.
    data: tokio::sync::Mutex<Option<Arc<CellData>>>,
}

/// One cell's captured bytes and scrapes.
#[derive(Debug, Default)]
struct CellData {
    /// Per request: each socket read's arrival on the recording's clock, and its bytes.
    frames: HashMap<i64, Vec<(i64, Bytes)>>,
    /// Scrapes as Prometheus text, by scrape start on the recording's clock.
    scrapes: Vec<(i64, String)>,
}

/// Where the replay stands.
#[derive(Debug, Default)]
struct State {
    /// The newest cell a request was matched in: older cells' leftovers are skipped.
    floor: usize,
    /// The last match: (when it arrived here, its send on the recording's clock).
    anchor: Option<(Instant, i64)>,
}

/// Counts of how incoming requests were answered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplayStats {
    /// Answered by a recorded request not used before.
    pub matched: u64,
    /// Answered by a recorded request used before (the recording had too few).
    pub reused: u64,
    /// No recorded prompt length was near: the engine model answered.
    pub unmatched: u64,
}

/// A recorded run, ready to be served back.
#[derive(Debug)]
pub struct Recording {
    pub run: PathBuf,
    pub model: String,
    pub max_model_len: Option<u32>,
    pub engine: EngineInfo,
    /// Recorded requests that can be served (sent, in a committed cell).
    pub requests: usize,
    cells: Vec<CellInfo>,
    groups: Vec<Group>,
    state: Mutex<State>,
    pacer: Pacer,
    matched: AtomicU64,
    reused: AtomicU64,
    unmatched: AtomicU64,
}

/// An incoming request's recorded answer.
#[derive(Debug)]
pub struct Answer {
    rec: Rec,
    data: Arc<CellData>,
    recording: Arc<Recording>,
}

/// A recorded request's prompt length as the matching sees it: what the recorder asked
/// for, or what the server counted where it asked for none (a probe).
fn prompt_of(r: &RequestRow) -> Option<u32> {
    match (r.prompt_tokens_requested, r.prompt_tokens_server) {
        (n, _) if n > 0 => u32::try_from(n).ok(),
        (_, Some(n)) => u32::try_from(n).ok(),
        _ => None,
    }
}

impl Recording {
    /// Reads `run`'s manifest and every committed cell's `requests` table (frames and
    /// scrapes are read per cell as the replay reaches it).
    pub fn load(run: &Path) -> Result<Recording, ReplayError> {
        let manifest = Manifest::read(run)?;
        if let Some(i) = &manifest.imported {
            return Err(ReplayError::Imported {
                run: run.to_path_buf(),
                tool: i.source(),
            });
        }
        let mut cells = Vec::new();
        let mut recorded: Vec<(u32, u32, Rec)> = Vec::new();
        let mut firsts = Vec::new();
        for (_, dir) in list_cells(run)? {
            if !dir.join(tokentrace_schemas::layout::CELL_FILE).is_file() {
                continue; // not committed: nothing of it counts
            }
            let rows = read_table::<Requests>(&dir.join(table_file::<Requests>()))?;
            let first = rows.iter().filter_map(|r| r.sent_ns).min();
            let Some(first) = first else { continue };
            firsts.push((first, cells.len()));
            let cell = cells.len();
            cells.push(CellInfo {
                dir,
                data: tokio::sync::Mutex::new(None),
            });
            for r in rows {
                let (Some(sent), Some(prompt)) = (r.sent_ns, prompt_of(&r)) else {
                    continue;
                };
                let max_tokens = r
                    .max_tokens
                    .and_then(|m| u32::try_from(m).ok())
                    .unwrap_or(0);
                recorded.push((
                    prompt,
                    max_tokens,
                    Rec {
                        cell,
                        request_id: r.request_id,
                        sent_ns: sent,
                        headers_gap_ns: r.headers_ns.map_or(0, |h| (h - sent).max(0)),
                        status: r.http_status,
                        error: r.error.clone(),
                        open_end: matches!(
                            r.end_reason,
                            EndReason::Cancelled | EndReason::StallTimeout
                        ),
                    },
                ));
            }
        }
        if recorded.is_empty() {
            return Err(ReplayError::Empty {
                run: run.to_path_buf(),
            });
        }
        // Cells in the order they were recorded; requests renumbered onto that order.
        firsts.sort();
        let mut order = vec![0; cells.len()];
        for (rank, &(_, cell)) in firsts.iter().enumerate() {
            order[cell] = rank;
        }
        let mut slots: Vec<Option<CellInfo>> = cells.into_iter().map(Some).collect();
        let cells: Vec<CellInfo> = firsts
            .iter()
            .filter_map(|&(_, cell)| slots[cell].take())
            .collect();
        let requests = recorded.len();
        for (_, _, rec) in &mut recorded {
            rec.cell = order[rec.cell];
        }
        let groups = groups(recorded);
        Ok(Recording {
            run: run.to_path_buf(),
            model: manifest.model,
            max_model_len: manifest.capabilities.max_model_len,
            engine: manifest.engine,
            requests,
            cells,
            groups,
            state: Mutex::new(State::default()),
            pacer: Pacer::start(),
            matched: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            unmatched: AtomicU64::new(0),
        })
    }

    /// Cells with a recorded request.
    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    /// Distinct recorded prompt lengths.
    pub fn prompt_lengths(&self) -> usize {
        self.groups.len()
    }

    pub fn stats(&self) -> ReplayStats {
        ReplayStats {
            matched: self.matched.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
            unmatched: self.unmatched.load(Ordering::Relaxed),
        }
    }

    /// The recorded request that answers a request of `prompt` tokens asking for
    /// `max_tokens`: the group of the nearest recorded prompt length (within 5% or 8
    /// tokens), its queue of the nearest `max_tokens`, the next request there not in a
    /// cell older than the newest one matched. None when no prompt length is near.
    fn take(&self, prompt: u32, max_tokens: u32, now: Instant) -> Option<(Rec, bool)> {
        let near = |g: &&Group| g.prompt.abs_diff(prompt) <= (g.prompt / 20).max(8);
        let gi = self
            .groups
            .iter()
            .filter(near)
            .min_by_key(|g| g.prompt.abs_diff(prompt))
            .map(|g| g.prompt)?;
        let mut state = self.state.lock().ok()?;
        let floor = state.floor;
        let group = self.groups.iter().find(|g| g.prompt == gi)?;
        let queue = group
            .queues
            .iter()
            .min_by_key(|q| q.max_tokens.abs_diff(max_tokens))?;
        let cursor = &queue.next;
        let mut next = cursor.load(Ordering::Relaxed);
        while next < queue.recs.len() && queue.recs[next].cell < floor {
            next += 1;
        }
        let (rec, reused) = match queue.recs.get(next) {
            Some(r) => {
                cursor.store(next + 1, Ordering::Relaxed);
                (r.clone(), false)
            }
            None => (queue.recs.last()?.clone(), true),
        };
        if !reused {
            state.floor = state.floor.max(rec.cell);
        }
        state.anchor = Some((now, rec.sent_ns));
        Some((rec, reused))
    }

    /// The answer to a request of `prompt` tokens asking for `max_tokens`, arrived at
    /// `now`; None when nothing recorded is near (the engine answers it).
    pub async fn answer(
        self: &Arc<Self>,
        prompt: u32,
        max_tokens: u32,
        now: Instant,
    ) -> Option<Result<Answer, String>> {
        let Some((rec, reused)) = self.take(prompt, max_tokens, now) else {
            self.unmatched.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if reused {
            self.reused.fetch_add(1, Ordering::Relaxed);
        } else {
            self.matched.fetch_add(1, Ordering::Relaxed);
        }
        let data = match self.cell(rec.cell).await {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        self.read_ahead(rec.cell + 1);
        self.let_go(rec.cell);
        Some(Ok(Answer {
            rec,
            data,
            recording: self.clone(),
        }))
    }

    /// Cell `i`'s frames and scrapes, read now if not in memory.
    async fn cell(self: &Arc<Self>, i: usize) -> Result<Arc<CellData>, String> {
        let Some(info) = self.cells.get(i) else {
            return Ok(Arc::new(CellData::default()));
        };
        let mut slot = info.data.lock().await;
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let dir = info.dir.clone();
        let data = tokio::task::spawn_blocking(move || read_cell(&dir))
            .await
            .map_err(|e| format!("reading a recorded cell failed: {e}"))??;
        let data = Arc::new(data);
        *slot = Some(data.clone());
        Ok(data)
    }

    /// Starts reading cell `i` in the background, so that its first request finds it.
    fn read_ahead(self: &Arc<Self>, i: usize) {
        if i >= self.cells.len() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.cell(i).await {
                eprintln!("replay: {e}");
            }
        });
    }

    /// Lets go of cells older than the one before `current` (streams still serving them
    /// hold their own reference).
    fn let_go(&self, current: usize) {
        let keep_from = current.saturating_sub(RESIDENT_CELLS - 2);
        for info in &self.cells[..keep_from.min(self.cells.len())] {
            if let Ok(mut slot) = info.data.try_lock() {
                *slot = None;
            }
        }
    }

    /// `/metrics`: the recorded scrape at the recording's time that corresponds to now
    /// (the last match's send plus the time since it arrived), from that match's cell;
    /// before any match, the recording's first scrape.
    pub async fn metrics(self: &Arc<Self>, now: Instant) -> Result<String, String> {
        let (anchor, floor) = match self.state.lock() {
            Ok(s) => (s.anchor, s.floor),
            Err(_) => (None, 0),
        };
        let data = self.cell(floor).await?;
        let Some(first) = data.scrapes.first() else {
            return Ok(String::new());
        };
        let at = match anchor {
            Some((arrived, sent)) => {
                sent + i64::try_from(now.saturating_duration_since(arrived).as_nanos())
                    .unwrap_or(i64::MAX)
            }
            None => first.0,
        };
        let i = data.scrapes.partition_point(|(t, _)| *t <= at);
        Ok(data.scrapes[i.saturating_sub(1)].1.clone())
    }
}

/// Recorded requests as (prompt, max_tokens, request) grouped by prompt length, then
/// queued by `max_tokens` in send order.
fn groups(recorded: Vec<(u32, u32, Rec)>) -> Vec<Group> {
    let mut by_prompt: BTreeMap<u32, BTreeMap<u32, Vec<Rec>>> = BTreeMap::new();
    for (prompt, max_tokens, rec) in recorded {
        by_prompt
            .entry(prompt)
            .or_default()
            .entry(max_tokens)
            .or_default()
            .push(rec);
    }
    by_prompt
        .into_iter()
        .map(|(prompt, queues)| Group {
            prompt,
            queues: queues
                .into_iter()
                .map(|(max_tokens, mut recs)| {
                    recs.sort_by_key(|r| (r.sent_ns, r.request_id));
                    Queue {
                        max_tokens,
                        recs,
                        next: AtomicUsize::new(0),
                    }
                })
                .collect(),
        })
        .collect()
}

/// Reads one cell's raw capture and metrics (the send times that turn arrivals into
/// gaps are the `Rec`s', read once by `Recording::load`).
fn read_cell(dir: &Path) -> Result<CellData, String> {
    let mut frames: HashMap<i64, Vec<(i64, Bytes)>> = HashMap::new();
    let raw = dir.join(RAW_FILE);
    if raw.is_file() {
        let reader = RawReader::open(&raw).map_err(|e| e.to_string())?;
        for frame in reader {
            let frame = frame.map_err(|e| e.to_string())?;
            frames
                .entry(frame.request_id)
                .or_default()
                .push((frame.arrival_ns, Bytes::from(frame.bytes)));
        }
    }
    let metrics = dir.join(table_file::<Metrics>());
    let scrapes = if metrics.is_file() {
        let rows = read_table::<Metrics>(&metrics).map_err(|e| e.to_string())?;
        scrapes_text(rows)
    } else {
        Vec::new()
    };
    Ok(CellData { frames, scrapes })
}

/// Each scrape's rows as Prometheus text: a `# TYPE` line per family, then its samples
/// in recorded order. The recorder's own series (its lag and CPU, kept in the same
/// table) are not the server's and are left out.
fn scrapes_text(rows: Vec<MetricRow>) -> Vec<(i64, String)> {
    let mut by: BTreeMap<i64, Vec<MetricRow>> = BTreeMap::new();
    let own = [protocol::CLIENT_LAG_METRIC, protocol::CLIENT_CPU_METRIC];
    for r in rows
        .into_iter()
        .filter(|r| !own.contains(&r.family.as_str()))
    {
        by.entry(r.scrape_start_ns).or_default().push(r);
    }
    by.into_iter()
        .map(|(t, rows)| {
            let mut text = String::new();
            let mut family: Option<&str> = None;
            for r in &rows {
                if family != Some(r.family.as_str()) {
                    family = Some(r.family.as_str());
                    if r.metric_type != MetricType::Untyped {
                        let _ = writeln!(text, "# TYPE {} {}", r.family, r.metric_type);
                    }
                }
                let value = prometheus_value(r.value);
                if r.labels.is_empty() {
                    let _ = writeln!(text, "{} {value}", r.name);
                } else {
                    let _ = writeln!(text, "{}{{{}}} {value}", r.name, r.labels);
                }
            }
            (t, text)
        })
        .collect()
}

fn prometheus_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{v}")
    }
}

impl Answer {
    /// The response: the recorded status after the recorded wait for headers, then each
    /// captured read at its captured gap from `arrived` (absolute deadlines, so gaps do
    /// not add up errors). A stream the recorder had closed stays open after its last
    /// byte until the client goes.
    pub async fn respond(self, arrived: Instant, stream: bool) -> Response {
        let gap = |ns: i64| Duration::from_nanos(u64::try_from(ns).unwrap_or(0));
        let pacer = &self.recording.pacer;
        pacer.until(arrived + gap(self.rec.headers_gap_ns)).await;
        let status = self
            .rec
            .status
            .and_then(|s| u16::try_from(s).ok())
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        let frames = self
            .data
            .frames
            .get(&self.rec.request_id)
            .cloned()
            .unwrap_or_default();
        if !status.is_success() && frames.is_empty() {
            let message = self
                .rec
                .error
                .clone()
                .unwrap_or_else(|| format!("recorded status {status}"));
            let body = serde_json::json!({"error": {"message": message, "code": status.as_u16()}});
            return (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response();
        }
        let (open_end, sent) = (self.rec.open_end, self.rec.sent_ns);
        let recording = self.recording.clone();
        let body = futures_util::stream::unfold(0usize, move |i| {
            let next = frames.get(i).cloned();
            let recording = recording.clone();
            async move {
                match next {
                    Some((at, bytes)) => {
                        recording.pacer.until(arrived + gap(at - sent)).await;
                        Some((Ok::<Bytes, std::io::Error>(bytes), i + 1))
                    }
                    None if open_end => {
                        std::future::pending::<()>().await;
                        None
                    }
                    None => None,
                }
            }
        });
        let content_type = if stream && status.is_success() {
            "text/event-stream"
        } else {
            "application/json"
        };
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from_stream(body))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }
}

#[cfg(test)]
mod tests;
