//! A whole run loaded at once with polars: lazy scans over every complete cell, reduced
//! to the per-request and per-cell tables the rules need, by joins and sorts of its own
//! (the window test as a join, older files' missing columns as nulls) and the shared
//! folds. The product reads cell by cell instead (`score::score_run`).

use std::collections::HashMap;

use polars::prelude::*;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::tables::{EndReason, EventKind, Role};
use tokentrace_score::fold;

use tokentrace_analyzer::Run;
use tokentrace_score::data::{EventInfo, Loaded, RequestInfo};

use super::Result;
use super::scan::{from_level, has_rate_cells, level, scan};

/// What [`load`] reads beyond what scoring needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loads {
    /// What scoring needs.
    Scoring,
    /// And the decode cells' token timelines, from the same read of the chunks.
    Traces,
}

fn perr(run: &Run) -> impl Fn(PolarsError) -> String + '_ {
    move |e| {
        format!(
            "{}: {e}",
            run.dir
                .join(tokentrace_schemas::layout::CELLS_DIR)
                .display()
        )
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
        // Runs without rate cells have no `rate` column (see [`scan`]).
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
                from_level(key, r?)
            })
            .collect())
    }
}

fn bad_value(run: &Run, table: &str, what: String) -> String {
    format!(
        "{}: table {table}: {what}",
        run.dir
            .join(tokentrace_schemas::layout::CELLS_DIR)
            .display()
    )
}

/// Reads what scoring needs from every complete cell of `run` (and with
/// [`Loads::Traces`], the token timelines); `series` are the metric names to keep (the
/// engine preset's and the recorder's own).
pub fn load(run: &Run, series: &[String], loads: Loads) -> Result<Loaded> {
    let mut out = Loaded::default();
    let Some(requests) = scan(run, "requests")? else {
        return Ok(out);
    };
    let (Some(chunks), Some(metrics), Some(events)) = (
        scan(run, "chunks")?,
        scan(run, "metrics")?,
        scan(run, "events")?,
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
    for (key, dir) in run.complete_cells() {
        tokentrace_score::read::replay(dir, key, out).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The optional `gpu` table of every complete cell that has one (small: a row per GPU
/// per scrape), read through the trace's own reader.
fn load_gpu(run: &Run, out: &mut Loaded) -> Result<()> {
    for (key, dir) in run.complete_cells() {
        tokentrace_score::read::gpu(dir, key, out).map_err(|e| e.to_string())?;
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
    fold::settle_events(out);
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
        // The table's 32-bit columns, read back as such (polars reads them as Int64).
        let narrow = |v: Option<i64>, what: &str| {
            v.map(i32::try_from)
                .transpose()
                .map_err(|_| bad(&format!("{what} out of range")))
        };
        out.requests.entry(key).or_default().push(RequestInfo {
            request_id,
            role,
            end_reason,
            prompt_tokens_requested: narrow(asked[i], "prompt_tokens_requested")?.unwrap_or(0),
            prompt_tokens_server: narrow(server[i], "prompt_tokens_server")?,
            cached_tokens: narrow(cached[i], "cached_tokens_server")?,
            scheduled_ns: scheduled[i].ok_or_else(|| bad("null scheduled_ns"))?,
            sent_ns: sent[i],
            end_ns: end[i],
            error: error[i].clone().map(String::into_boxed_str),
            slot: narrow(slot[i], "slot")?,
            max_tokens: narrow(max_tokens[i], "max_tokens")?,
            connection_id: connection[i],
            opened_connection: RequestInfo::opened(connection_at[i], connect_start[i]),
            retries: narrow(retries[i], "retries")?,
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
    if has_rate_cells(run) {
        cols.push(Column::new(
            "rate".into(),
            map.keys().map(level).collect::<Vec<_>>(),
        ));
    }
    DataFrame::new(map.len(), cols).map_err(perr(run))
}

/// The key columns (see [`key_columns`]), then `cols`.
fn keyed(run: &Run, cols: impl IntoIterator<Item = Expr>) -> Vec<Expr> {
    key_columns(run).into_iter().chain(cols).collect()
}

/// The columns that name a row's cell in a scan ([`scan`]): `rate` only in runs with
/// rate cells, so that a matrix run's joins keep their three keys.
fn key_columns(run: &Run) -> Vec<Expr> {
    let mut keys = vec![col("phase"), col("context"), col("concurrency")];
    if has_rate_cells(run) {
        keys.push(col("rate"));
    }
    keys
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
            col("in_window"),
        ])
        .sort(["request_id", "seq"], SortMultipleOptions::default());
    // Read, joined and sorted once; the reductions below run on the frame in memory, in
    // one pass each (a lazy plan would read and sort the files again for each, and a
    // polars group-by of fourteen aggregations took a fifth of a report's time).
    let with_window = with_window.collect().map_err(perr(run))?;
    // Each request's cell, from the requests already loaded.
    let owner: HashMap<i64, CellKey> = out
        .requests
        .iter()
        .flat_map(|(k, v)| v.iter().map(move |r| (r.request_id, *k)))
        .collect();
    if loads == Loads::Traces {
        timelines(run, &with_window, &owner, out)?;
    }
    aggregate(run, &with_window, &owner, out)
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
        let mut timeline = out.timeline();
        for (at, t) in v {
            timeline.push(at, t);
        }
        out.timelines.insert(key, timeline);
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
/// window), the shared fold ([`fold::ChunkFold`]): per request its token aggregates and
/// text, per cell the in-window gaps and queueing delays.
fn aggregate(
    run: &Run,
    df: &DataFrame,
    owner: &HashMap<i64, CellKey>,
    out: &mut Loaded,
) -> Result<()> {
    let (ids, arrival, delay, tokens, cumulative) = (
        int_column(run, df, "request_id")?,
        int_column(run, df, "arrival_ns")?,
        int_column(run, df, "queue_delay_ns")?,
        int_column(run, df, "tokens")?,
        int_column(run, df, "completion_tokens")?,
    );
    let in_window = bool_column(run, df, "in_window")?;
    let str_column = |name: &str| {
        df.column(name)
            .and_then(|c| c.str().cloned())
            .map_err(perr(run))
    };
    let (content, reasoning) = (str_column("content")?, str_column("reasoning")?);
    let mut fold = fold::ChunkFold::new(fold::Owners::Map(owner));
    let rows = ids
        .iter()
        .zip(arrival.iter())
        .zip(delay.iter())
        .zip(tokens.iter().zip(cumulative.iter()))
        .zip(in_window.iter())
        .zip(content.iter().zip(reasoning.iter()));
    for (((((request_id, arrival_ns), queue_delay_ns), (t, c)), w), (content, reasoning)) in rows {
        let row = fold::ChunkIn {
            request_id,
            arrival_ns,
            queue_delay_ns,
            tokens: t.unwrap_or(0),
            completion_tokens: c,
            in_window: w.unwrap_or(false),
            content,
            reasoning,
        };
        fold.push(row, out);
    }
    fold.finish(out);
    Ok(())
}

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
    let mut metrics = fold::MetricFold::default();
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
        metrics.push(key, name, s, e, labels[i].clone().unwrap_or_default(), v);
    }
    metrics.finish(out);
    Ok(())
}
