//! The polars side of scoring: lazy scans over every complete cell of a run, reduced to
//! the small per-request and per-cell tables the rules need (request lifecycles, token
//! aggregates, in-window gaps, gauge samples, lifecycle events, text for loop checks).

use std::collections::{BTreeMap, HashMap};

use polars::prelude::*;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::protocol::{self, LagStat};
use tokentrace_schemas::tables::{EndReason, EventKind, Role};

use crate::error::{Error, Result};
use crate::run::Run;

/// One request's lifecycle (from `requests`).
#[derive(Debug, Clone)]
pub struct RequestInfo {
    pub request_id: i64,
    pub key: CellKey,
    pub role: Role,
    pub end_reason: EndReason,
    pub prompt_tokens_requested: i64,
    pub prompt_tokens_server: Option<i64>,
    /// Prompt tokens the server served from its prefix cache (when it said).
    pub cached_tokens: Option<i64>,
    /// When it was due: a rate cell's schedule; when it was run, for other cells.
    pub scheduled_ns: i64,
    pub sent_ns: Option<i64>,
    pub end_ns: Option<i64>,
    pub error: Option<String>,
    /// The closed-loop worker that sent it (null for open-loop requests).
    pub slot: Option<i64>,
    pub max_tokens: Option<i64>,
    /// The connection that carried it; whether it opened that connection (a new one, not
    /// one reused); and how often it was sent again on a new connection. All null in
    /// runs recorded before the recorder wrote its connection columns.
    pub connection_id: Option<i64>,
    pub opened_connection: Option<bool>,
    pub retries: Option<i64>,
}

/// One request's token aggregates (from `chunks`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenAgg {
    /// Tokens over the whole stream.
    pub tokens: i64,
    /// Tokens that arrived inside the cell's window …
    pub tokens_in_window: i64,
    /// … and the events that carried them (the recorded count, whatever the rule set
    /// counts tokens by).
    pub token_events_in_window: i64,
    pub first_chunk_ns: Option<i64>,
    /// First event with answer text.
    pub first_content_ns: Option<i64>,
    /// First event with answer or reasoning text.
    pub first_text_ns: Option<i64>,
    /// First event with reasoning text.
    pub first_reasoning_ns: Option<i64>,
    /// Tokens of the events that carried reasoning text (the recorded count).
    pub reasoning_tokens: i64,
    /// First event carrying tokens, and how many it carried.
    pub first_token_ns: Option<i64>,
    pub first_token_tokens: i64,
    pub last_token_ns: Option<i64>,
    /// The same counts from the server's cumulative usage (its increases per event),
    /// when every event that carried tokens also carried the cumulative count.
    pub usage: Option<UsageCount>,
}

/// A request's token counts taken from the server's cumulative usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageCount {
    pub tokens: i64,
    pub tokens_in_window: i64,
    /// Of the first event that carried tokens.
    pub first_token_tokens: i64,
}

/// One lifecycle mark.
#[derive(Debug, Clone)]
pub struct EventInfo {
    pub time_ns: i64,
    pub kind: EventKind,
    pub detail: Option<String>,
}

/// One metric series' value at one scrape, summed over its label sets.
#[derive(Debug, Clone)]
pub struct Sample {
    pub start_ns: i64,
    pub end_ns: i64,
    pub value: f64,
}

/// One second of the recorder's tick counts: how many ticks fired, and how many were
/// later than each of `protocol::LATE_TICK_MS`.
#[derive(Debug, Clone, PartialEq)]
pub struct TickCounts {
    pub start_ns: i64,
    pub end_ns: i64,
    pub ticks: f64,
    pub over: Vec<f64>,
}

/// Everything of a run the rules look at, keyed by cell.
#[derive(Debug, Default)]
pub struct Loaded {
    pub requests: BTreeMap<CellKey, Vec<RequestInfo>>,
    pub tokens: BTreeMap<i64, TokenAgg>,
    /// Per cell: gaps (ns) between consecutive token events of a request, the later one
    /// inside the window.
    pub gaps: BTreeMap<CellKey, Vec<i64>>,
    /// Per cell: the recorder's queueing delay (ns) of every event inside the window.
    pub queue_delays: BTreeMap<CellKey, Vec<i64>>,
    pub events: BTreeMap<CellKey, Vec<EventInfo>>,
    /// Per decode cell: (window_open, window_close); absent when the cell has no window.
    pub windows: BTreeMap<CellKey, (i64, i64)>,
    /// Per cell, per series name: samples in time order.
    pub samples: BTreeMap<CellKey, BTreeMap<String, Vec<Sample>>>,
    /// Per cell: the recorder's tick counts per second, in time order (runs recorded
    /// before the recorder counted late ticks have none).
    pub tick_counts: BTreeMap<CellKey, Vec<TickCounts>>,
    /// Per request: (content, reasoning) text in stream order, for requests with text.
    pub text: BTreeMap<i64, (String, String)>,
    /// Per cell with GPU telemetry: its `gpu` rows in time order (cells recorded
    /// without NVML have none).
    pub gpu: BTreeMap<CellKey, Vec<tokentrace_schemas::tables::GpuRow>>,
    /// Per replay cell: its workload's `replay` rows (request id order).
    pub replay: BTreeMap<CellKey, Vec<tokentrace_schemas::tables::ReplayRow>>,
    /// Per decode cell: its token events in time order, (arrival ns, tokens); loaded
    /// only for the HTML page's drill-down traces ([`Loads::Traces`]).
    pub timelines: BTreeMap<CellKey, Vec<(i64, i64)>>,
}

/// What [`load`] reads beyond what scoring needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loads {
    /// What scoring needs.
    Scoring,
    /// And the decode cells' token timelines, from the same read of the chunks.
    Traces,
}

fn perr(run: &Run) -> impl Fn(PolarsError) -> Error + '_ {
    move |source| Error::Polars {
        path: run.dir.join(tokentrace_schemas::layout::CELLS_DIR),
        source,
    }
}

/// Typed access to a collected frame's columns, with errors that name the column.
struct Cols<'a> {
    df: &'a DataFrame,
    run: &'a Run,
}

impl Cols<'_> {
    fn i64(&self, name: &str) -> Result<Vec<Option<i64>>> {
        let c = self
            .df
            .column(name)
            .and_then(|c| c.cast(&DataType::Int64))
            .map_err(perr(self.run))?;
        let ca = c.i64().map_err(perr(self.run))?;
        Ok(ca.iter().collect())
    }

    fn f64(&self, name: &str) -> Result<Vec<Option<f64>>> {
        let c = self
            .df
            .column(name)
            .and_then(|c| c.cast(&DataType::Float64))
            .map_err(perr(self.run))?;
        let ca = c.f64().map_err(perr(self.run))?;
        Ok(ca.iter().collect())
    }

    fn str(&self, name: &str) -> Result<Vec<Option<String>>> {
        let c = self.df.column(name).map_err(perr(self.run))?;
        let ca = c.str().map_err(perr(self.run))?;
        Ok(ca.iter().map(|s| s.map(str::to_string)).collect())
    }

    /// The Hive columns as cell keys.
    fn keys(&self) -> Result<Vec<Option<CellKey>>> {
        let phase = self.str("phase")?;
        let context = self.i64("context")?;
        let concurrency = self.i64("concurrency")?;
        // Runs without rate cells have no `rate` column (see `Run::scan`).
        let rate = if self.df.column("rate").is_ok() {
            self.i64("rate")?
        } else {
            vec![Some(0); self.df.height()]
        };
        Ok(phase
            .into_iter()
            .zip(context)
            .zip(concurrency)
            .zip(rate)
            .map(|(((p, c), n), r)| {
                let key = CellKey::new(
                    Phase::parse(p.as_deref()?)?,
                    u32::try_from(c?).ok()?,
                    u32::try_from(n?).ok()?,
                );
                crate::run::from_level(key, r?)
            })
            .collect())
    }
}

fn bad_value(run: &Run, table: &str, what: String) -> Error {
    Error::BadValue {
        path: run.dir.join(tokentrace_schemas::layout::CELLS_DIR),
        table: table.to_string(),
        what,
    }
}

/// Reads what scoring needs from every complete cell of `run` (and with
/// [`Loads::Traces`], the token timelines); `series` are the metric names to keep (the
/// engine preset's and the recorder's own).
pub fn load(run: &Run, series: &[String], loads: Loads) -> Result<Loaded> {
    guarded(run, || load_unguarded(run, series, loads))
}

/// Runs `f`, which reads the run's files through polars; a panic there (polars unwraps
/// some errors of damaged Parquet data inside its readers) becomes an error naming the
/// run's cells folder, instead of ending the process.
pub fn guarded<R>(run: &Run, f: impl FnOnce() -> Result<R>) -> Result<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        Err(Error::Damaged {
            path: run.dir.join(tokentrace_schemas::layout::CELLS_DIR),
            message: tokentrace_schemas::reader::panic_message(panic.as_ref()),
        })
    })
}

fn load_unguarded(run: &Run, series: &[String], loads: Loads) -> Result<Loaded> {
    let mut out = Loaded::default();
    let Some(requests) = run.scan("requests")? else {
        return Ok(out);
    };
    let (Some(chunks), Some(metrics), Some(events)) = (
        run.scan("chunks")?,
        run.scan("metrics")?,
        run.scan("events")?,
    ) else {
        return Ok(out);
    };
    load_events(run, events, &mut out)?;
    load_requests(run, requests, &mut out)?;
    load_chunks(run, chunks, loads, &mut out)?;
    load_metrics(run, metrics, series, &mut out)?;
    load_gpu(run, &mut out)?;
    load_replay(run, &mut out)?;
    Ok(out)
}

/// The `replay` table of every complete replay cell, read through the trace's own
/// reader (a row per workload request: small beside the chunks).
fn load_replay(run: &Run, out: &mut Loaded) -> Result<()> {
    use tokentrace_schemas::layout::table_file;
    use tokentrace_schemas::tables::Replay;
    for (key, dir) in run.complete_cells() {
        let path = dir.join(table_file::<Replay>());
        if key.replay.is_none() || !path.exists() {
            continue;
        }
        let mut rows = tokentrace_schemas::reader::read_table::<Replay>(&path)?;
        rows.sort_by_key(|r| r.request_id);
        out.replay.insert(*key, rows);
    }
    Ok(())
}

/// The optional `gpu` table of every complete cell that has one (small: a row per GPU
/// per scrape), read through the trace's own reader.
fn load_gpu(run: &Run, out: &mut Loaded) -> Result<()> {
    use tokentrace_schemas::layout::table_file;
    use tokentrace_schemas::tables::Gpu;
    for (key, dir) in run.complete_cells() {
        let path = dir.join(table_file::<Gpu>());
        if !path.exists() {
            continue;
        }
        let mut rows = tokentrace_schemas::reader::read_table::<Gpu>(&path)?;
        rows.sort_by_key(|r| (r.sample_ns, r.gpu));
        out.gpu.insert(*key, rows);
    }
    Ok(())
}

fn load_events(run: &Run, events: LazyFrame, out: &mut Loaded) -> Result<()> {
    let df = events
        .select(keyed(run, [col("time_ns"), col("kind"), col("detail")]))
        .collect()
        .map_err(perr(run))?;
    let c = Cols { df: &df, run };
    let (keys, time, kind, detail) = (
        c.keys()?,
        c.i64("time_ns")?,
        c.str("kind")?,
        c.str("detail")?,
    );
    for (i, ((key, time), kind)) in keys.into_iter().zip(time).zip(kind).enumerate() {
        let (Some(key), Some(time_ns), Some(kind)) = (key, time, kind) else {
            return Err(bad_value(
                run,
                "events",
                format!("row {i}: missing cell, time or kind"),
            ));
        };
        let kind = EventKind::parse(&kind)
            .ok_or_else(|| bad_value(run, "events", format!("row {i}: unknown kind `{kind}`")))?;
        out.events.entry(key).or_default().push(EventInfo {
            time_ns,
            kind,
            detail: detail[i].clone(),
        });
    }
    for (key, v) in &mut out.events {
        v.sort_by_key(|e| e.time_ns);
        let at = |kind| v.iter().filter(move |e| e.kind == kind).map(|e| e.time_ns);
        if let (Some(open), Some(close)) = (
            at(EventKind::WindowOpen).min(),
            at(EventKind::WindowClose).max(),
        ) && close >= open
        {
            out.windows.insert(*key, (open, close));
        }
    }
    Ok(())
}

fn load_requests(run: &Run, mut requests: LazyFrame, out: &mut Loaded) -> Result<()> {
    // The connection columns came with format v1's fourth addition; older runs lack them.
    let schema = requests.collect_schema().map_err(perr(run))?;
    let connections = [
        "connection_id",
        "connect_start_ns",
        "connection_ns",
        "retries",
    ]
    .iter()
    .all(|c| schema.contains(c));
    let or_null = |name: &str| {
        if connections {
            col(name).cast(DataType::Int64)
        } else {
            lit(NULL).cast(DataType::Int64).alias(name)
        }
    };
    let df = requests
        .select(keyed(
            run,
            [
                col("request_id"),
                col("role"),
                col("end_reason"),
                col("prompt_tokens_requested"),
                col("prompt_tokens_server"),
                col("cached_tokens_server"),
                col("scheduled_ns"),
                col("sent_ns"),
                col("end_ns"),
                col("error"),
                col("slot").cast(DataType::Int64),
                col("max_tokens").cast(DataType::Int64),
                or_null("connection_id"),
                or_null("connect_start_ns"),
                or_null("connection_ns"),
                or_null("retries"),
            ],
        ))
        .collect()
        .map_err(perr(run))?;
    let c = Cols { df: &df, run };
    let keys = c.keys()?;
    let ids = c.i64("request_id")?;
    let roles = c.str("role")?;
    let ends = c.str("end_reason")?;
    let asked = c.i64("prompt_tokens_requested")?;
    let server = c.i64("prompt_tokens_server")?;
    let cached = c.i64("cached_tokens_server")?;
    let scheduled = c.i64("scheduled_ns")?;
    let sent = c.i64("sent_ns")?;
    let end = c.i64("end_ns")?;
    let error = c.str("error")?;
    let slot = c.i64("slot")?;
    let max_tokens = c.i64("max_tokens")?;
    let connection = c.i64("connection_id")?;
    let connect_start = c.i64("connect_start_ns")?;
    let connection_at = c.i64("connection_ns")?;
    let retries = c.i64("retries")?;
    for i in 0..df.height() {
        let bad = |what: &str| bad_value(run, "requests", format!("row {i}: {what}"));
        let key = keys[i].ok_or_else(|| bad("missing cell columns"))?;
        let request_id = ids[i].ok_or_else(|| bad("null request_id"))?;
        let role = roles[i]
            .as_deref()
            .and_then(Role::parse)
            .ok_or_else(|| bad("bad role"))?;
        let end_reason = ends[i]
            .as_deref()
            .and_then(EndReason::parse)
            .ok_or_else(|| bad("bad end_reason"))?;
        out.requests.entry(key).or_default().push(RequestInfo {
            request_id,
            key,
            role,
            end_reason,
            prompt_tokens_requested: asked[i].unwrap_or(0),
            prompt_tokens_server: server[i],
            cached_tokens: cached[i],
            scheduled_ns: scheduled[i].ok_or_else(|| bad("null scheduled_ns"))?,
            sent_ns: sent[i],
            end_ns: end[i],
            error: error[i].clone(),
            slot: slot[i],
            max_tokens: max_tokens[i],
            connection_id: connection[i],
            // A request that got a connection either opened it (a connect start) or
            // reused an open one.
            opened_connection: connection_at[i].map(|_| connect_start[i].is_some()),
            retries: retries[i],
        });
    }
    for v in out.requests.values_mut() {
        v.sort_by_key(|r| r.request_id);
    }
    Ok(())
}

/// The cells' windows as a small frame to join chunks against.
fn windows(run: &Run, out: &Loaded) -> Result<DataFrame> {
    let map = &out.windows;
    let cols = [
        Column::new(
            "phase".into(),
            map.keys().map(|k| k.phase.as_str()).collect::<Vec<_>>(),
        ),
        Column::new(
            "context".into(),
            map.keys().map(|k| i64::from(k.context)).collect::<Vec<_>>(),
        ),
        Column::new(
            "concurrency".into(),
            map.keys()
                .map(|k| i64::from(k.concurrency))
                .collect::<Vec<_>>(),
        ),
        Column::new("open".into(), map.values().map(|w| w.0).collect::<Vec<_>>()),
        Column::new(
            "close".into(),
            map.values().map(|w| w.1).collect::<Vec<_>>(),
        ),
    ];
    let mut cols = cols.to_vec();
    if run.has_rate_cells() {
        cols.push(Column::new(
            "rate".into(),
            map.keys().map(crate::run::level).collect::<Vec<_>>(),
        ));
    }
    DataFrame::new(map.len(), cols).map_err(perr(run))
}

/// The key columns (see [`key_columns`]), then `cols`.
fn keyed(run: &Run, cols: impl IntoIterator<Item = Expr>) -> Vec<Expr> {
    key_columns(run).into_iter().chain(cols).collect()
}

/// The columns that name a row's cell in a scan (`Run::scan`): `rate` only in runs
/// with rate cells, so that a matrix run's joins keep their three keys.
fn key_columns(run: &Run) -> Vec<Expr> {
    let mut keys = vec![col("phase"), col("context"), col("concurrency")];
    if run.has_rate_cells() {
        keys.push(col("rate"));
    }
    keys
}

fn nonempty(name: &str) -> Expr {
    col(name).is_not_null().and(col(name).neq(lit("")))
}

/// Per chunk row (sorted by request, then seq): the increase of the request's cumulative
/// `completion_tokens` over its last earlier value (0 where the row has none); and the
/// requests whose every token-carrying row has the cumulative count.
fn usage_increases(
    run: &Run,
    df: &DataFrame,
) -> Result<(Vec<i64>, std::collections::HashSet<i64>)> {
    let (ids, tokens, cumulative) = (
        int_column(run, df, "request_id")?,
        int_column(run, df, "tokens")?,
        int_column(run, df, "completion_tokens")?,
    );
    let mut out = Vec::with_capacity(ids.len());
    let mut continuous = std::collections::HashSet::new();
    let mut broken = std::collections::HashSet::new();
    let (mut current, mut last) = (None, 0i64);
    for ((id, t), cum) in ids.iter().zip(tokens.iter()).zip(cumulative.iter()) {
        if id != current {
            (current, last) = (id, 0);
        }
        let carries = t.unwrap_or(0) > 0;
        out.push(match cum {
            Some(v) => {
                let up = (v - last).max(0);
                last = last.max(v);
                up
            }
            None => 0,
        });
        if let Some(id) = id {
            match (carries, cum) {
                (true, None) => {
                    broken.insert(id);
                }
                (true, Some(_)) => {
                    continuous.insert(id);
                }
                _ => {}
            }
        }
    }
    continuous.retain(|id| !broken.contains(id));
    Ok((out, continuous))
}

fn load_chunks(run: &Run, chunks: LazyFrame, loads: Loads, out: &mut Loaded) -> Result<()> {
    let windows = windows(run, out)?;
    let with_window = chunks
        .select(keyed(
            run,
            [
                col("request_id"),
                col("seq"),
                col("arrival_ns"),
                col("queue_delay_ns"),
                col("tokens").fill_null(lit(0)).cast(DataType::Int64),
                col("completion_tokens").cast(DataType::Int64),
                col("content"),
                col("reasoning"),
                nonempty("content").alias("has_content"),
                nonempty("reasoning").alias("has_reasoning"),
            ],
        ))
        .join(
            windows.lazy(),
            key_columns(run),
            key_columns(run),
            JoinArgs::new(JoinType::Left),
        )
        .with_column(
            col("arrival_ns")
                .gt_eq(col("open"))
                .and(col("arrival_ns").lt_eq(col("close")))
                .fill_null(lit(false))
                .alias("in_window"),
        )
        // The cell keys and the window served the join: sorted and kept, only the rest.
        .select([
            col("request_id"),
            col("seq"),
            col("arrival_ns"),
            col("queue_delay_ns"),
            col("tokens"),
            col("completion_tokens"),
            col("content"),
            col("reasoning"),
            col("has_content"),
            col("has_reasoning"),
            col("in_window"),
        ])
        .sort(["request_id", "seq"], SortMultipleOptions::default());
    // Read, joined and sorted once; the reductions below run on the frame in memory, in
    // one pass each (a lazy plan would read and sort the files again for each, and a
    // polars group-by of fourteen aggregations took a fifth of a report's time).
    let with_window = with_window.collect().map_err(perr(run))?;
    let (usage_tokens, continuous) = usage_increases(run, &with_window)?;
    // Each request's cell, from the requests already loaded.
    let owner: HashMap<i64, CellKey> = out
        .requests
        .values()
        .flatten()
        .map(|r| (r.request_id, r.key))
        .collect();
    if loads == Loads::Traces {
        timelines(run, &with_window, &owner, out)?;
    }
    aggregate(run, &with_window, &usage_tokens, &continuous, &owner, out)?;
    texts(run, with_window.lazy(), out)
}

/// Per decode cell, its token events in time order: (arrival ns, tokens), from the
/// chunks already in memory (`owner`: each request's cell).
fn timelines(
    run: &Run,
    chunks: &DataFrame,
    owner: &HashMap<i64, CellKey>,
    out: &mut Loaded,
) -> Result<()> {
    let (ids, arrival, tokens) = (
        int_column(run, chunks, "request_id")?,
        int_column(run, chunks, "arrival_ns")?,
        int_column(run, chunks, "tokens")?,
    );
    let mut found: HashMap<CellKey, Vec<(i64, i64)>> = HashMap::new();
    for ((id, at), t) in ids.iter().zip(arrival.iter()).zip(tokens.iter()) {
        if let (Some(key), Some(at), Some(t)) = (id.and_then(|id| owner.get(&id)), at, t)
            && key.phase == Phase::Decode
            && t > 0
        {
            found.entry(*key).or_default().push((at, t));
        }
    }
    for (key, mut v) in found {
        v.sort_unstable();
        out.timelines.insert(key, v);
    }
    Ok(())
}

/// One column of a collected frame as 64-bit integers (cast where stored narrower).
fn int_column(run: &Run, df: &DataFrame, name: &str) -> Result<Int64Chunked> {
    df.column(name)
        .and_then(|c| c.cast(&DataType::Int64))
        .and_then(|c| c.i64().cloned())
        .map_err(perr(run))
}

/// One boolean column of a collected frame.
fn bool_column(run: &Run, df: &DataFrame, name: &str) -> Result<BooleanChunked> {
    df.column(name)
        .and_then(|c| c.bool().cloned())
        .map_err(perr(run))
}

/// In one pass over the chunks (sorted by request, then seq, joined with their cell's
/// window): per request its token aggregates (`TokenAgg`; `usage`: each row's usage
/// increase, `continuous`: the requests whose every token event carried usage), and per
/// cell the gaps between consecutive token events of a request and the chunks' queueing
/// delays, inside the window.
fn aggregate(
    run: &Run,
    df: &DataFrame,
    usage: &[i64],
    continuous: &std::collections::HashSet<i64>,
    owner: &HashMap<i64, CellKey>,
    out: &mut Loaded,
) -> Result<()> {
    let (ids, arrival, delay, tokens) = (
        int_column(run, df, "request_id")?,
        int_column(run, df, "arrival_ns")?,
        int_column(run, df, "queue_delay_ns")?,
        int_column(run, df, "tokens")?,
    );
    let (in_window, content, reasoning) = (
        bool_column(run, df, "in_window")?,
        bool_column(run, df, "has_content")?,
        bool_column(run, df, "has_reasoning")?,
    );
    let mut current: Option<(i64, Agg)> = None;
    // The last token event: (request, arrival).
    let mut last_token: Option<(i64, Option<i64>)> = None;
    let rows = ids
        .iter()
        .zip(arrival.iter())
        .zip(delay.iter())
        .zip(tokens.iter())
        .zip(in_window.iter())
        .zip(content.iter().zip(reasoning.iter()))
        .zip(usage.iter().copied());
    for ((((((id, at), delay), t), in_window), (content, reasoning)), usage) in rows {
        let (t, in_window) = (t.unwrap_or(0), in_window.unwrap_or(false));
        let (content, reasoning) = (content.unwrap_or(false), reasoning.unwrap_or(false));
        let key = id.and_then(|id| owner.get(&id));
        if in_window && let (Some(key), Some(d)) = (key, delay) {
            out.queue_delays.entry(*key).or_default().push(d);
        }
        if t > 0 {
            if in_window
                && let (Some(id), Some((last_id, Some(last_at))), Some(at), Some(key)) =
                    (id, last_token, at, key)
                && last_id == id
            {
                out.gaps.entry(*key).or_default().push(at - last_at);
            }
            last_token = id.map(|id| (id, at));
        }
        let Some(id) = id else { continue };
        if current.as_ref().is_some_and(|(c, _)| *c != id)
            && let Some((done, agg)) = current.take()
        {
            out.tokens
                .insert(done, agg.finish(continuous.contains(&done)));
        }
        let a = &mut current.get_or_insert_with(|| (id, Agg::default())).1;
        a.add(at, t, in_window, content, reasoning, usage);
    }
    if let Some((done, agg)) = current {
        out.tokens
            .insert(done, agg.finish(continuous.contains(&done)));
    }
    Ok(())
}

/// One request's token aggregates being summed up, row by row in stream order.
#[derive(Default)]
struct Agg {
    tokens: i64,
    tokens_in_window: i64,
    token_events_in_window: i64,
    first_chunk: Option<i64>,
    first_content: Option<i64>,
    first_text: Option<i64>,
    first_reasoning: Option<i64>,
    reasoning_tokens: i64,
    first_token: Option<i64>,
    first_token_tokens: Option<i64>,
    last_token: Option<i64>,
    usage: i64,
    usage_in_window: i64,
    usage_first: Option<i64>,
}

impl Agg {
    fn add(
        &mut self,
        at: Option<i64>,
        t: i64,
        in_window: bool,
        content: bool,
        reasoning: bool,
        usage: i64,
    ) {
        let min = |was: Option<i64>| match (was, at) {
            (Some(w), Some(a)) => Some(w.min(a)),
            (w, a) => w.or(a),
        };
        self.tokens += t;
        self.usage += usage;
        if in_window {
            self.tokens_in_window += t;
            self.usage_in_window += usage;
            self.token_events_in_window += i64::from(t > 0);
        }
        self.first_chunk = min(self.first_chunk);
        if content {
            self.first_content = min(self.first_content);
        }
        if content || reasoning {
            self.first_text = min(self.first_text);
        }
        if reasoning {
            self.first_reasoning = min(self.first_reasoning);
            self.reasoning_tokens += t;
        }
        if t > 0 {
            self.first_token = min(self.first_token);
            self.first_token_tokens.get_or_insert(t);
            self.last_token = match (self.last_token, at) {
                (Some(w), Some(a)) => Some(w.max(a)),
                (w, a) => w.or(a),
            };
        }
        if usage > 0 {
            self.usage_first.get_or_insert(usage);
        }
    }

    fn finish(self, continuous: bool) -> TokenAgg {
        TokenAgg {
            tokens: self.tokens,
            tokens_in_window: self.tokens_in_window,
            token_events_in_window: self.token_events_in_window,
            first_chunk_ns: self.first_chunk,
            first_content_ns: self.first_content,
            first_text_ns: self.first_text,
            first_reasoning_ns: self.first_reasoning,
            reasoning_tokens: self.reasoning_tokens,
            first_token_ns: self.first_token,
            first_token_tokens: self.first_token_tokens.unwrap_or(0),
            last_token_ns: self.last_token,
            usage: continuous.then_some(UsageCount {
                tokens: self.usage,
                tokens_in_window: self.usage_in_window,
                first_token_tokens: self.usage_first.unwrap_or(0),
            }),
        }
    }
}

/// The text of every request that has any, in stream order.
fn texts(run: &Run, with_window: LazyFrame, out: &mut Loaded) -> Result<()> {
    // Text of every request that has any, in stream order.
    let text = with_window
        .filter(
            col("content")
                .is_not_null()
                .or(col("reasoning").is_not_null()),
        )
        .select([col("request_id"), col("content"), col("reasoning")])
        .collect()
        .map_err(perr(run))?;
    let c = Cols { df: &text, run };
    let ids = c.i64("request_id")?;
    let content = text
        .column("content")
        .and_then(|c| c.str().cloned())
        .map_err(perr(run))?;
    let reasoning = text
        .column("reasoning")
        .and_then(|c| c.str().cloned())
        .map_err(perr(run))?;
    // The rows come sorted by request: each request's text is built up apart and put
    // in the map once.
    let mut current: Option<(i64, (String, String))> = None;
    for ((id, c), r) in ids.into_iter().zip(content.iter()).zip(reasoning.iter()) {
        let Some(id) = id else { continue };
        if current.as_ref().is_some_and(|(at, _)| *at != id)
            && let Some((done, text)) = current.take()
        {
            append(out.text.entry(done).or_default(), text);
        }
        let entry = &mut current.get_or_insert_with(|| (id, Default::default())).1;
        if let Some(c) = c {
            entry.0.push_str(c);
        }
        if let Some(r) = r {
            entry.1.push_str(r);
        }
    }
    if let Some((done, text)) = current {
        append(out.text.entry(done).or_default(), text);
    }
    Ok(())
}

/// Appends a run of a request's text to what it has.
fn append(to: &mut (String, String), (content, reasoning): (String, String)) {
    if to.0.is_empty() && to.1.is_empty() {
        *to = (content, reasoning);
    } else {
        to.0.push_str(&content);
        to.1.push_str(&reasoning);
    }
}

/// One scrape of one series: its end time and every label set's value.
type ScrapeValues = (i64, Vec<(String, f64)>);

fn load_metrics(run: &Run, metrics: LazyFrame, series: &[String], out: &mut Loaded) -> Result<()> {
    let Some(wanted) = series
        .iter()
        .map(|s| col("name").eq(lit(s.clone())))
        .reduce(|a, b| a.or(b))
    else {
        return Ok(());
    };
    let df = metrics
        .filter(wanted)
        .select(keyed(
            run,
            [
                col("scrape_start_ns"),
                col("scrape_end_ns"),
                col("name"),
                col("labels"),
                col("value"),
            ],
        ))
        .collect()
        .map_err(perr(run))?;
    let c = Cols { df: &df, run };
    let keys = c.keys()?;
    let (start, end) = (c.i64("scrape_start_ns")?, c.i64("scrape_end_ns")?);
    let (names, labels, values) = (c.str("name")?, c.str("labels")?, c.f64("value")?);
    // (cell, name, start) -> (end, [(labels, value)]): label sets summed in label order.
    let mut grouped: BTreeMap<(CellKey, String, i64), ScrapeValues> = BTreeMap::new();
    for i in 0..df.height() {
        let (Some(key), Some(s), Some(e), Some(name), Some(v)) =
            (keys[i], start[i], end[i], names[i].clone(), values[i])
        else {
            return Err(bad_value(
                run,
                "metrics",
                format!("row {i}: a null in a never-null column"),
            ));
        };
        let entry = grouped.entry((key, name, s)).or_insert((e, Vec::new()));
        entry.1.push((labels[i].clone().unwrap_or_default(), v));
    }
    for ((key, name, start_ns), (end_ns, mut values)) in grouped {
        values.sort_by(|a, b| a.0.cmp(&b.0));
        let value = if name == protocol::CLIENT_LAG_METRIC {
            // The recorder's own lag: the `stat="max"` summary is the series; the tick
            // counts go to their own table.
            let stat = |want: LagStat| {
                values
                    .iter()
                    .find(|(l, _)| LagStat::from_labels(l) == Some(want))
                    .map(|(_, v)| *v)
            };
            if let Some(ticks) = stat(LagStat::Ticks) {
                out.tick_counts.entry(key).or_default().push(TickCounts {
                    start_ns,
                    end_ns,
                    ticks,
                    over: (0..protocol::LATE_TICK_MS.len())
                        .map(|i| stat(LagStat::Over(i)).unwrap_or(0.0))
                        .collect(),
                });
            }
            stat(LagStat::Max).unwrap_or(f64::NAN)
        } else {
            values.iter().map(|(_, v)| *v).sum()
        };
        out.samples
            .entry(key)
            .or_default()
            .entry(name)
            .or_default()
            .push(Sample {
                start_ns,
                end_ns,
                value,
            });
    }
    Ok(())
}
