//! A committed cell folder read back through the trace's own reader (no polars) into
//! [`Loaded`]: the recorder's live view and `tokentrace watch` score cells from it, with
//! the same folds ([`crate::fold`]) the analyzer's polars loading feeds.

use std::collections::HashMap;
use std::path::Path;

use tokentrace_schemas::layout::{CellKey, table_file};
use tokentrace_schemas::reader::{open_table, read_table};
use tokentrace_schemas::tables::{Chunks, Events, Gpu, Metrics, Replay, Requests};

use crate::data::{EventInfo, Loaded, RequestInfo};
use crate::fold::{self, ChunkFold, ChunkIn, MetricFold};

/// Adds the committed cell `key` in `dir` to `out`; `series` are the metric names to
/// keep (the engine preset's and the recorder's own). Errors name the file.
pub fn cell(
    dir: &Path,
    key: CellKey,
    series: &[String],
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

    let mut requests: Vec<RequestInfo> =
        read_table::<Requests>(&dir.join(table_file::<Requests>()))?
            .into_iter()
            .map(|r| RequestInfo {
                request_id: r.request_id,
                key,
                role: r.role,
                end_reason: r.end_reason,
                prompt_tokens_requested: i64::from(r.prompt_tokens_requested),
                prompt_tokens_server: r.prompt_tokens_server.map(i64::from),
                cached_tokens: r.cached_tokens_server.map(i64::from),
                scheduled_ns: r.scheduled_ns,
                sent_ns: r.sent_ns,
                end_ns: r.end_ns,
                error: r.error,
                slot: r.slot.map(i64::from),
                max_tokens: r.max_tokens.map(i64::from),
                connection_id: r.connection_id,
                opened_connection: RequestInfo::opened(r.connection_ns, r.connect_start_ns),
                retries: r.retries.map(i64::from),
            })
            .collect();
    requests.sort_by_key(|r| r.request_id);
    let owner: HashMap<i64, CellKey> = requests.iter().map(|r| (r.request_id, key)).collect();
    out.requests.entry(key).or_default().extend(requests);

    // Block by block, in file order: memory holds one block and each request's sums,
    // not the cell's rows.
    let mut f = ChunkFold::new(&owner);
    for block in open_table::<Chunks>(&dir.join(table_file::<Chunks>()))? {
        for c in &block? {
            let row = ChunkIn {
                request_id: Some(c.request_id),
                arrival_ns: Some(c.arrival_ns),
                queue_delay_ns: c.queue_delay_ns,
                tokens: c.tokens.map_or(0, i64::from),
                completion_tokens: c.completion_tokens.map(i64::from),
                in_window: fold::in_window(out, Some(&key), Some(c.arrival_ns)),
                content: c.content.as_deref(),
                reasoning: c.reasoning.as_deref(),
            };
            f.push(row, out);
        }
    }
    f.finish(out);

    let mut metrics = MetricFold::default();
    for block in open_table::<Metrics>(&dir.join(table_file::<Metrics>()))? {
        for m in block? {
            if series.contains(&m.name) {
                let (start, end) = (m.scrape_start_ns, m.scrape_end_ns);
                metrics.push(key, m.name, start, end, m.labels, m.value);
            }
        }
    }
    metrics.finish(out);
    gpu(dir, key, out)?;
    replay(dir, key, out)
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
