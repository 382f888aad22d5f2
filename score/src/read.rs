//! A committed cell folder read back through the trace's own reader (no polars) into
//! [`Loaded`] by the folds of [`crate::fold`]: the one read path of every scoring (the
//! analyzer's report, the recorder's live view, `tokentrace watch`).

use std::path::Path;

use tokentrace_schemas::arrow_array::cast::AsArray;
use tokentrace_schemas::arrow_array::types::{Int32Type, Int64Type};
use tokentrace_schemas::arrow_array::{Array, ArrayRef, Int32Array, Int64Array, StringArray};
use tokentrace_schemas::layout::{CellKey, Phase, table_file};
use tokentrace_schemas::reader::{open_columns, open_table, read_table};
use tokentrace_schemas::tables::{
    Chunks, Events, Gpu, MetricRow, Metrics, Replay, Requests, Turns,
};

use crate::data::{EventInfo, Loaded, RequestInfo};
use crate::fold::{self, ChunkFold, ChunkIn, MetricFold, ScrapeFold};

/// Adds the committed cell `key` in `dir` to `out`; `series` are the metric names to
/// keep (the engine preset's and the recorder's own). With `traces` (the HTML page's
/// drill-down traces), also a decode cell's token events in time order
/// ([`Loaded::timelines`], what its trace is drawn from). Errors name the file.
pub fn cell(
    dir: &Path,
    key: CellKey,
    series: &[String],
    traces: bool,
    out: &mut Loaded,
) -> tokentrace_schemas::Result<()> {
    for e in read_table::<Events>(&dir.join(table_file::<Events>()))? {
        out.events.entry(key).or_default().push(EventInfo {
            time_ns: e.time_ns,
            kind: e.kind,
            detail: e.detail,
        });
    }
    fold::settle_events(out);

    // Block by block: a cell of many requests holds each request's lifecycle, not its
    // whole row.
    let table = open_table::<Requests>(&dir.join(table_file::<Requests>()))?;
    let mut requests: Vec<RequestInfo> =
        Vec::with_capacity(usize::try_from(table.stamp().rows).unwrap_or(0));
    for block in table {
        requests.extend(block?.into_iter().map(|r| RequestInfo {
            request_id: r.request_id,
            role: r.role,
            end_reason: r.end_reason,
            prompt_tokens_requested: r.prompt_tokens_requested,
            prompt_tokens_server: r.prompt_tokens_server,
            cached_tokens: r.cached_tokens_server,
            scheduled_ns: r.scheduled_ns,
            sent_ns: r.sent_ns,
            end_ns: r.end_ns,
            error: r.error.map(String::into_boxed_str),
            slot: r.slot,
            max_tokens: r.max_tokens,
            connection_id: r.connection_id,
            opened_connection: RequestInfo::opened(r.connection_ns, r.connect_start_ns),
            retries: r.retries,
        }));
    }
    requests.sort_by_key(|r| r.request_id);
    let mut ids: Vec<i64> = requests.iter().map(|r| r.request_id).collect();
    // Ascending and distinct (a corrupt table may repeat an id): each id's rows are
    // counted, and its request filed, once.
    ids.dedup();
    out.tokens.reserve(requests.len());
    match out.requests.get_mut(&key) {
        Some(had) => had.extend(requests),
        None => {
            out.requests.insert(key, requests);
        }
    }

    // Batch by batch, in file order, only the columns the rules read: memory holds one
    // batch, the requests under way and each request's sums, not the cell's rows.
    let path = dir.join(table_file::<Chunks>());
    // A first pass over the ids alone counts each request's rows, so that the fold can
    // file each request as its last row comes, and hold only the requests under way.
    let rows = row_counts(&path, &ids)?;
    let owner = fold::Owners::Cell(key, ids);
    let mut f = ChunkFold::counted(owner, rows);
    let timelines = traces && key.phase == Phase::Decode;
    let mut timeline = out.timeline();
    let reader = open_columns::<Chunks>(&path, &CHUNK_COLUMNS)?;
    for columns in reader {
        let columns = columns?;
        let c = Columns {
            path: &path,
            columns: &columns,
        };
        let (ids, arrival, delay) = (c.i64(0)?, c.i64(1)?, c.i64(2)?);
        let (tokens, cumulative) = (c.i32(3)?, c.i32(4)?);
        let (content, reasoning) = (c.str(5)?, c.str(6)?);
        for (i, a) in [(0, ids), (1, arrival)] {
            if a.null_count() > 0 {
                return Err(c.bad(i, "no nulls (a required column)"));
            }
        }
        for i in 0..ids.len() {
            let request_id = ids.value(i);
            let arrival_ns = arrival.value(i);
            let t = tokens.is_valid(i).then(|| tokens.value(i));
            if timelines
                && let Some(t) = t.filter(|t| *t > 0)
                && f.owns(request_id)
            {
                timeline.push(arrival_ns, i64::from(t));
            }
            let row = ChunkIn {
                request_id: Some(request_id),
                arrival_ns: Some(arrival_ns),
                queue_delay_ns: delay.is_valid(i).then(|| delay.value(i)),
                tokens: t.map_or(0, i64::from),
                completion_tokens: cumulative
                    .is_valid(i)
                    .then(|| i64::from(cumulative.value(i))),
                in_window: fold::in_window(out, Some(&key), Some(arrival_ns)),
                content: content.is_valid(i).then(|| content.value(i)),
                reasoning: reasoning.is_valid(i).then(|| reasoning.value(i)),
            };
            f.push(row, out);
        }
    }
    f.finish(out);
    let failed = [out.gaps.get(&key), out.queue_delays.get(&key)]
        .into_iter()
        .flatten()
        .filter_map(|c| c.failed())
        .chain(timeline.failed())
        .next();
    if let Some(e) = failed {
        return Err(tokentrace_schemas::Error::io(
            &path,
            std::io::Error::other(e),
        ));
    }
    if timelines {
        out.timelines.insert(key, timeline);
    }

    metrics(dir, key, series, out)?;
    gpu(dir, key, out)?;
    replay(dir, key, out)?;
    turns(dir, key, out)
}

/// The cell's metric rows of the wanted `series` into [`Loaded::samples`], scrape by
/// scrape ([`ScrapeFold`]); a table whose rows are not in scrape order is read again and
/// grouped whole ([`MetricFold`]).
fn metrics(
    dir: &Path,
    key: CellKey,
    series: &[String],
    out: &mut Loaded,
) -> tokentrace_schemas::Result<()> {
    let path = dir.join(table_file::<Metrics>());
    // What the cell had before (a cell read from more than one folder), to go back to.
    let had: Vec<(String, usize)> = out
        .samples
        .get(&key)
        .map(|s| s.iter().map(|(n, v)| (n.clone(), v.len())).collect())
        .unwrap_or_default();
    let had_ticks = out.tick_counts.get(&key).map_or(0, Vec::len);
    // Each row of a wanted series, in file order.
    let wanted = |f: &mut dyn FnMut(MetricRow)| -> tokentrace_schemas::Result<()> {
        for block in open_table::<Metrics>(&path)? {
            block?
                .into_iter()
                .filter(|m| series.contains(&m.name))
                .for_each(&mut *f);
        }
        Ok(())
    };
    let mut scrapes = ScrapeFold::new(key);
    wanted(&mut |m| {
        let at = (m.scrape_start_ns, m.scrape_end_ns);
        scrapes.push(&m.name, at, m.labels, m.value, out);
    })?;
    if scrapes.finish(out) {
        return Ok(());
    }
    if had.is_empty() {
        out.samples.remove(&key);
    } else if let Some(s) = out.samples.get_mut(&key) {
        s.retain(|name, _| had.iter().any(|(n, _)| n == name));
        for (name, len) in &had {
            if let Some(v) = s.get_mut(name) {
                v.truncate(*len);
            }
        }
    }
    if had_ticks == 0 {
        out.tick_counts.remove(&key);
    } else if let Some(t) = out.tick_counts.get_mut(&key) {
        t.truncate(had_ticks);
    }
    let mut metrics = MetricFold::default();
    wanted(&mut |m| {
        let (start, end) = (m.scrape_start_ns, m.scrape_end_ns);
        metrics.push(key, m.name, start, end, m.labels, m.value);
    })?;
    metrics.finish(out);
    Ok(())
}

/// Each request's rows in the chunks table at `path`, in ascending ids with rows: those
/// of `ids` (the cell's requests, ascending) counted in place, then any others (rows of
/// no request, kept apart). 16 bytes a request, where a map took about 30.
fn row_counts(path: &Path, ids: &[i64]) -> tokentrace_schemas::Result<Vec<(i64, u64)>> {
    let mut counts = vec![0u64; ids.len()];
    let mut others: std::collections::BTreeMap<i64, u64> = Default::default();
    let mut last = 0usize;
    for columns in open_columns::<Chunks>(path, &CHUNK_COLUMNS[..1])? {
        let columns = columns?;
        let c = Columns {
            path,
            columns: &columns,
        };
        for id in c.i64(0)?.iter().flatten() {
            // A request's rows mostly come together: try the last one found first.
            let at = if ids.get(last) == Some(&id) {
                Ok(last)
            } else {
                ids.binary_search(&id)
            };
            match at.ok().and_then(|i| counts.get_mut(i).map(|n| (i, n))) {
                Some((i, n)) => {
                    *n += 1;
                    last = i;
                }
                None => *others.entry(id).or_default() += 1,
            }
        }
    }
    let mut rows: Vec<(i64, u64)> =
        Vec::with_capacity(counts.iter().filter(|n| **n > 0).count() + others.len());
    rows.extend(
        ids.iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(id, n)| (*id, n)),
    );
    rows.extend(others);
    rows.sort_unstable_by_key(|r| r.0);
    Ok(rows)
}

/// The cell's `gpu` rows in time order, when it has the table (cells recorded without
/// NVML have none).
pub fn gpu(dir: &Path, key: CellKey, out: &mut Loaded) -> tokentrace_schemas::Result<()> {
    let path = dir.join(table_file::<Gpu>());
    if path.exists() {
        let mut rows = read_table::<Gpu>(&path)?;
        rows.sort_by_key(|r| (r.sample_ns, r.gpu));
        out.gpu.insert(key, rows);
    }
    Ok(())
}

/// A replay cell's `replay` rows in request id order (a row per workload request).
pub fn replay(dir: &Path, key: CellKey, out: &mut Loaded) -> tokentrace_schemas::Result<()> {
    let path = dir.join(table_file::<Replay>());
    if key.replay.is_some() && path.exists() {
        let mut rows = read_table::<Replay>(&path)?;
        rows.sort_by_key(|r| r.request_id);
        out.replay.insert(key, rows);
    }
    Ok(())
}

/// A conversation cell's `turns` rows in request id order (a row per turn sent).
pub fn turns(dir: &Path, key: CellKey, out: &mut Loaded) -> tokentrace_schemas::Result<()> {
    let path = dir.join(table_file::<Turns>());
    if key.phase == tokentrace_schemas::Phase::Conversation && path.exists() {
        let mut rows = read_table::<Turns>(&path)?;
        rows.sort_by_key(|r| r.request_id);
        out.turns.insert(key, rows);
    }
    Ok(())
}

/// The `chunks` columns the rules read, in the order [`cell`] takes them.
const CHUNK_COLUMNS: [&str; 7] = [
    "request_id",
    "arrival_ns",
    "queue_delay_ns",
    "tokens",
    "completion_tokens",
    "content",
    "reasoning",
];

/// One batch's columns, typed, with errors that name the file and column.
struct Columns<'a> {
    path: &'a Path,
    columns: &'a [ArrayRef],
}

impl Columns<'_> {
    fn bad(&self, i: usize, what: &str) -> tokentrace_schemas::Error {
        tokentrace_schemas::Error::BadValue {
            path: self.path.to_path_buf(),
            column: CHUNK_COLUMNS[i],
            row: 0,
            message: format!(
                "expected {what}, found {}",
                self.columns
                    .get(i)
                    .map_or("nothing".to_string(), |c| c.data_type().to_string())
            ),
        }
    }

    fn i64(&self, i: usize) -> tokentrace_schemas::Result<&Int64Array> {
        self.columns
            .get(i)
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| self.bad(i, "64-bit integers"))
    }

    fn i32(&self, i: usize) -> tokentrace_schemas::Result<&Int32Array> {
        self.columns
            .get(i)
            .and_then(|c| c.as_primitive_opt::<Int32Type>())
            .ok_or_else(|| self.bad(i, "32-bit integers"))
    }

    fn str(&self, i: usize) -> tokentrace_schemas::Result<&StringArray> {
        self.columns
            .get(i)
            .and_then(|c| c.as_string_opt::<i32>())
            .ok_or_else(|| self.bad(i, "strings"))
    }
}
