//! The report's tables as text: All measurements, Burst / E2E, and Replay with its
//! introduction.

use super::*;

/// The "All measurements" table: its headers, and per cell each column's text with the
/// number it shows (for sorting), in the scoring's cell order.
pub(crate) type Row = Vec<(String, Option<f64>)>;

pub(crate) fn measurements(s: &Scoring) -> (Vec<String>, Vec<Row>) {
    let columns: Vec<(&Figure, Column)> = FIGURES
        .iter()
        .filter_map(|f| f.column.map(|c| (f, c)))
        .collect();
    let mut headers: Vec<String> = ["Phase", "Context", "Requests at once", "Status"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    headers.extend(columns.iter().map(|(_, c)| c.header.to_string()));
    let rows = s
        .cells
        .iter()
        .map(|c| {
            let f = shown(c);
            let mut row: Row = vec![
                (phase_label(c), None),
                (context_label(c.context), Some(f64::from(c.context))),
                // A rate or replay cell's requests at once vary: its cap is in the run's
                // settings.
                if matches!(c.phase, Phase::Rate | Phase::Replay) {
                    (DASH.to_string(), None)
                } else {
                    (c.concurrency.to_string(), Some(f64::from(c.concurrency)))
                },
                (c.status_label(), None),
            ];
            row.extend(columns.iter().map(|(figure, column)| {
                let value = f
                    .filter(|_| column.phases.contains(&c.phase))
                    .map(|f| figure.value(f));
                (
                    value
                        .as_ref()
                        .and_then(|v| v.show(column.show))
                        .unwrap_or_else(|| DASH.to_string()),
                    value.and_then(|v| v.number()),
                )
            }));
            row
        })
        .collect();
    (headers, rows)
}

/// A table, format-free: its headers and the text of each row.
pub(crate) struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// The Burst / E2E section: one row per burst cell (context, then requests at once),
/// E2E latency, TTFT, ITL and time between tokens as p50 / p90 / p99 / max in ms, the
/// completed request rate and output tok/s over the cell's span. `None` without burst
/// cells.
pub(crate) fn burst_table(s: &Scoring) -> Option<Table> {
    let cells: Vec<&CellScore> = s.cells.iter().filter(|c| c.phase == Phase::Burst).collect();
    if cells.is_empty() {
        return None;
    }
    let headers = [
        "Context",
        "Requests at once",
        "Requests",
        "Status",
        "E2E ms (p50 / p90 / p99 / max)",
        "TTFT ms",
        "ITL ms",
        "Time between tokens ms",
        "Requests/s",
        "Output tok/s",
    ]
    .map(str::to_string)
    .to_vec();
    let rows = cells
        .iter()
        .map(|c| {
            let f = shown(c);
            let sp = |pick, decimals| spread_of(f, pick, decimals);
            vec![
                context_label(c.context),
                c.concurrency.to_string(),
                f.map_or_else(|| DASH.to_string(), |f| thousands(f.completed_requests)),
                c.status_label(),
                sp(|f| &f.e2e_latency_ms, 0),
                sp(|f| &f.ttft_ms, 0),
                sp(|f| &f.itl_ms, 1),
                sp(|f| &f.time_between_tokens_ms, 1),
                opt(f.and_then(|f| f.request_rate), |x| fixed(x, 2)),
                opt(f.and_then(|f| f.total_tok_s), |x| rate(x, false)),
            ]
        })
        .collect();
    Some(Table { headers, rows })
}

/// The source of replay cell `index`, from the run's replay settings.
pub(super) fn replay_source(
    s: &Scoring,
    index: u32,
) -> Option<&tokentrace_schemas::manifest::ReplaySource> {
    s.run
        .replay
        .as_ref()
        .and_then(|r| r.sources.iter().find(|x| x.index == index))
}

/// The lines under the Replay heading: what was replayed, how, and which sources ran
/// closed loop (replayed open loop at their recorded send times).
pub(crate) fn replay_intro(s: &Scoring) -> Vec<String> {
    let Some(r) = &s.run.replay else {
        return Vec::new();
    };
    let scale = r.time_scale_ppm as f64 / 1e6;
    let window = match (r.window_start_ns, r.window_end_ns) {
        (None, None) => String::new(),
        (a, b) => format!(
            " · trace time {}..{}",
            a.map_or_else(String::new, |v| format!("{} s", fixed(v as f64 / 1e9, 1))),
            b.map_or_else(String::new, |v| format!("{} s", fixed(v as f64 / 1e9, 1)))
        ),
    };
    let mut lines = vec![format!(
        "{} workload from `{}`, open loop at its own times × {}{window}{}{} · latencies in ms as p50 / p90 / p99 / max",
        r.format,
        r.from,
        g(scale),
        r.max_requests
            .map_or_else(String::new, |n| format!(" · at most {n} requests")),
        r.max_concurrency
            .map_or_else(String::new, |n| format!(" · at most {n} in flight")),
    )];
    for src in &r.sources {
        let what = match &src.source_cell {
            Some(cell) => format!("cell {cell} of the run"),
            None => format!("`{}`", src.file),
        };
        let mut line = format!(
            "Replay {}: {what} (SHA-256 {}…), {} requests",
            src.index,
            &src.sha256[..src.sha256.len().min(12)],
            thousands(i64::from(src.requests))
        );
        if src.skipped > 0 {
            let _ = write!(line, ", {} not sent (the Notes say why)", src.skipped);
        }
        if src.closed_loop {
            line.push_str(
                "; it ran closed loop and is replayed open loop at its recorded send times, so \
                 a request no longer waits for the one before it",
            );
        }
        lines.push(line);
    }
    lines
}

/// The Replay section: one row per replay cell, its requests sent and skipped, offered
/// and achieved rate, goodput under the SLO, TTFT, time between tokens and E2E latency
/// (p50 / p90 / p99 / max), the schedule's lag (p50 / p99), and the prefix cache's hits
/// against the workload's sharing. `None` without replay cells.
pub(crate) fn replay_table(s: &Scoring) -> Option<Table> {
    let cells: Vec<&CellScore> = s
        .cells
        .iter()
        .filter(|c| c.phase == Phase::Replay)
        .collect();
    if cells.is_empty() {
        return None;
    }
    let headers = [
        "Replay",
        "Context",
        "Requests",
        "Status",
        "Offered req/s",
        "Achieved req/s",
        "Goodput req/s",
        "TTFT ms (p50 / p90 / p99 / max)",
        "Time between tokens ms",
        "E2E ms",
        "Schedule lag ms (p50 / p99)",
        "Cached / expected tokens",
    ]
    .map(str::to_string)
    .to_vec();
    let rows = cells
        .iter()
        .map(|c| {
            let f = shown(c);
            let sp = |pick, decimals| spread_of(f, pick, decimals);
            let index = c.replay.unwrap_or(0);
            let source = replay_source(s, index);
            let requests = match (f, source) {
                (Some(f), _) => format!(
                    "{}{}",
                    thousands(f.requests_scored as i64),
                    f.replay_skipped
                        .filter(|n| *n > 0)
                        .map_or_else(String::new, |n| format!(" (+{n} skipped)"))
                ),
                (None, Some(src)) => thousands(i64::from(src.requests)),
                (None, None) => DASH.to_string(),
            };
            let cache = match f.and_then(|f| f.cached_tokens.zip(f.expected_cached_tokens)) {
                Some((got, want)) if want > 0 => format!(
                    "{} / {} ({}%)",
                    thousands(got),
                    thousands(want),
                    fixed(100.0 * got as f64 / want as f64, 1)
                ),
                Some((got, want)) => format!("{} / {}", thousands(got), thousands(want)),
                None => DASH.to_string(),
            };
            vec![
                index.to_string(),
                if c.context == 0 {
                    "mixed".to_string()
                } else {
                    context_label(c.context)
                },
                requests,
                c.status_label(),
                opt(f.and_then(|f| f.offered_rate), |x| fixed(x, 2)),
                opt(f.and_then(|f| f.request_rate), |x| fixed(x, 2)),
                opt(f.and_then(|f| f.goodput), |x| fixed(x, 2)),
                sp(|f| &f.ttft_ms, 0),
                sp(|f| &f.time_between_tokens_ms, 1),
                sp(|f| &f.e2e_latency_ms, 0),
                f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.schedule_lag_ms, 2)),
                cache,
            ]
        })
        .collect();
    Some(Table { headers, rows })
}
