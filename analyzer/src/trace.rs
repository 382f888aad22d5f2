//! The per-cell traces behind the HTML report's drill-down: a decode cell's output
//! tokens over time (down-sampled), its requests' send, first token and end, the
//! distribution of the gaps between token events, and the server's gauges over time.
//! Times are seconds from the cell's window opening.

use serde::Serialize;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::Phase;
use tokentrace_schemas::tables::Role;

use tokentrace_score::data::{Loaded, RequestInfo};
use tokentrace_score::timeline::Timeline;

/// Most points kept of a series drawn: a cell's output tokens over time (see
/// `token_series`: about this many), and its gauges, which a longer scrape series cuts to
/// [`COLUMNS`] pixel columns of equal time keeping only each column's lowest and highest
/// points ([`min_max`]), so no peak or dip is lost. Kept values are exact.
pub const MAX_POINTS: usize = 600;
/// Pixel columns of a down-sampled series: two points each at most.
pub const COLUMNS: usize = MAX_POINTS / 2;
/// Most requests whose marks a cell's drill-down draws; beyond it every k-th is kept.
pub const MAX_REQUESTS: usize = 2_000;

/// At most about `most` of `items`, evenly: every k-th, k the smallest that keeps the
/// count at `most` or below (all of them when there are fewer). The one way a drawing
/// thins what it draws (a drill-down's request lanes, a replay chart's points).
pub fn thinned<T>(items: &[T], most: usize) -> std::iter::StepBy<std::slice::Iter<'_, T>> {
    items
        .iter()
        .step_by(items.len().div_ceil(most.max(1)).max(1))
}

/// The indices of the points of the series `xs` (ascending), `ys` to keep: all of them
/// when there are at most [`MAX_POINTS`]; otherwise, over [`COLUMNS`] columns of equal
/// width from the first x to the last, each column's lowest and highest y (the earlier
/// point of equal ones), in x order, and always the first and last point. With several
/// series on one x axis (`ys` holds each), the union of each one's points.
pub fn min_max(xs: &[i64], ys: &[&[Option<f64>]]) -> Vec<usize> {
    let n = xs.len();
    if n <= MAX_POINTS {
        return (0..n).collect();
    }
    let (first, last) = (xs[0], xs[n - 1]);
    let width = (i128::from(last) - i128::from(first)).max(1);
    let column = |x: i64| {
        let c = (i128::from(x) - i128::from(first)) * COLUMNS as i128 / width;
        usize::try_from(c).unwrap_or(0).min(COLUMNS - 1)
    };
    let mut keep = vec![false; n];
    keep[0] = true;
    keep[n - 1] = true;
    for y in ys {
        // Per column: (index of the lowest, index of the highest).
        let mut best: Vec<Option<(usize, usize)>> = vec![None; COLUMNS];
        for (i, x) in xs.iter().enumerate() {
            let Some(v) = y.get(i).copied().flatten() else {
                continue;
            };
            let slot = &mut best[column(*x)];
            match slot {
                None => *slot = Some((i, i)),
                Some((lo, hi)) => {
                    if y[*lo].is_some_and(|l| v < l) {
                        *lo = i;
                    }
                    if y[*hi].is_some_and(|h| v > h) {
                        *hi = i;
                    }
                }
            }
        }
        for (lo, hi) in best.into_iter().flatten() {
            keep[lo] = true;
            keep[hi] = true;
        }
    }
    (0..n).filter(|i| keep[*i]).collect()
}

/// Edges of the gap histogram, ms (log-spaced, 1-2-5): the last bin is open.
pub const GAP_EDGES_MS: [f64; 16] = [
    0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4,
];

/// One request's marks, seconds from the window opening.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Marks {
    pub request_id: i64,
    pub role: String,
    pub sent: Option<f64>,
    pub first_token: Option<f64>,
    pub end: Option<f64>,
    /// When its schedule made it due (replay cells only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<f64>,
}

/// What the drill-down of one decode cell draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellTrace {
    /// The window's length, s (it opens at 0).
    pub window_s: f64,
    /// Token events' times and the cumulative output tokens at each, down-sampled.
    pub times: Vec<f64>,
    pub tokens: Vec<i64>,
    /// The warm-up and measured requests.
    pub requests: Vec<Marks>,
    /// Gaps between consecutive token events inside the window, counted per bin of
    /// [`GAP_EDGES_MS`].
    pub gap_counts: Vec<u64>,
    /// Scrape times of the server's gauges and each gauge's value there (null where a
    /// scrape lacked it), by metric name.
    pub gauge_times: Vec<f64>,
    pub gauges: Vec<(String, Vec<Option<f64>>)>,
    /// For a looped cell, the first loop's text: up to [`LOOP_CONTEXT`] characters
    /// before the cycle, the cycle (up to [`LOOP_CYCLE_SHOWN`] characters), and up to
    /// [`LOOP_CONTEXT`] characters after it.
    pub loop_text: Option<(String, String, String)>,
}

/// Characters of a loop's text shown before and after its cycle.
pub const LOOP_CONTEXT: usize = 160;
/// Characters of a loop's cycle shown.
pub const LOOP_CYCLE_SHOWN: usize = 600;

/// The text around a loop: before, cycle, after (see [`CellTrace::loop_text`]).
fn loop_text(
    loaded: &Loaded,
    l: &crate::contract::LoopEvidence,
) -> Option<(String, String, String)> {
    let (content, reasoning) = loaded.text.get(&l.request_id)?;
    let text = match l.channel {
        crate::rules::Channel::Content => content,
        crate::rules::Channel::Reasoning => reasoning,
    };
    let chars: Vec<char> = text.chars().collect();
    let start = l.start_char.min(chars.len());
    let from = start.saturating_sub(LOOP_CONTEXT);
    let cycle_end = (start + l.cycle_chars.min(LOOP_CYCLE_SHOWN)).min(chars.len());
    let after_end = (cycle_end + LOOP_CONTEXT).min(chars.len());
    let piece = |a: usize, b: usize| {
        chars
            .get(a..b)
            .map(|c| c.iter().collect::<String>())
            .unwrap_or_default()
    };
    Some((
        piece(from, start),
        piece(start, cycle_end),
        piece(cycle_end, after_end),
    ))
}

/// A cell's output tokens over time from its token events (taken in time order, ties by
/// tokens): seconds from the window's opening and the cumulative count there. Past
/// [`MAX_POINTS`] events, every k-th event (k = events / MAX_POINTS, rounded up) and the
/// last: the series only rises, so the curve between two kept points stays between
/// their counts, and each kept count is exact. Should a spilled timeline's file be
/// unreadable, the curve is left empty (a drawing, not a figure).
fn token_series(events: &Timeline, open: i64) -> (Vec<f64>, Vec<i64>) {
    let n = events.len();
    let stride = n.div_ceil(MAX_POINTS).max(1);
    let ranks: Vec<usize> = (0..n).filter(|i| i % stride == 0 || i + 1 == n).collect();
    events
        .cumulative_at(&ranks)
        .unwrap_or_default()
        .into_iter()
        .map(|(at, total)| (seconds(at, open), total))
        .unzip()
}

fn seconds(ns: i64, open: i64) -> f64 {
    (ns - open) as f64 / 1e9
}

/// The trace of the decode or replay cell `cell` scored (its loop evidence gives the
/// loop's text) from `loaded` (which needs to hold only that cell, with its timeline);
/// `None` for other cells and cells without a window.
pub fn cell_trace(
    cell: &crate::contract::CellScore,
    loaded: &Loaded,
    preset: &tokentrace_score::presets::Preset,
) -> Option<CellTrace> {
    let key = &cell.key();
    let &(open, close) = loaded.windows.get(key)?;
    if !matches!(key.phase, Phase::Decode | Phase::Replay) {
        return None;
    }
    let replay = key.phase == Phase::Replay;
    let none = Timeline::default();
    let events = loaded.timelines.get(key).unwrap_or(&none);
    let (times, tokens) = token_series(events, open);
    let drawn: Vec<&RequestInfo> = loaded
        .requests
        .get(key)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
        .collect();
    let requests = thinned(&drawn, MAX_REQUESTS)
        .map(|r| Marks {
            request_id: r.request_id,
            role: r.role.as_str().to_string(),
            sent: r.sent_ns.map(|t| seconds(t, open)),
            first_token: loaded
                .tokens
                .get(&r.request_id)
                .and_then(|a| a.unpack().first_token_ns)
                .map(|t| seconds(t, open)),
            end: r.end_ns.map(|t| seconds(t, open)),
            scheduled: replay.then(|| seconds(r.scheduled_ns, open)),
        })
        .collect();
    let mut gap_counts = vec![0u64; GAP_EDGES_MS.len()];
    if let Some(gaps) = loaded.gaps.get(key) {
        // A column past its memory limit is read back from its temporary file; should
        // that read fail, the histogram holds what was counted (a drawing, not a figure).
        let _ = gaps.scan(&mut |g| {
            let ms = g as f64 / 1e6;
            let bin = GAP_EDGES_MS.partition_point(|e| *e <= ms).saturating_sub(1);
            if let Some(c) = gap_counts.get_mut(bin) {
                *c += 1;
            }
        });
    }
    // The gauges: requests running and waiting, and KV-cache use (not counters).
    let samples = loaded.samples.get(key);
    let names: Vec<&String> = [&preset.running, &preset.waiting, &preset.kv_cache_usage]
        .into_iter()
        .flatten()
        .filter(|n| samples.is_some_and(|s| s.contains_key(*n)))
        .collect();
    let mut at: Vec<i64> = names
        .iter()
        .flat_map(|n| samples.and_then(|s| s.get(*n)).into_iter().flatten())
        .map(|s| s.start_ns)
        .collect();
    at.sort_unstable();
    at.dedup();
    let gauges: Vec<(String, Vec<Option<f64>>)> = names
        .iter()
        .map(|n| {
            let values = samples
                .and_then(|s| s.get(*n))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            // Samples are in time order: one pass over both.
            let mut next = values.iter().peekable();
            let column = at
                .iter()
                .map(|t| {
                    while next.peek().is_some_and(|s| s.start_ns < *t) {
                        next.next();
                    }
                    next.peek()
                        .filter(|s| s.start_ns == *t)
                        .map(|s| s.value)
                        .filter(|v| v.is_finite())
                })
                .collect();
            ((*n).clone(), column)
        })
        .collect();
    let keep = min_max(
        &at,
        &gauges.iter().map(|(_, v)| v.as_slice()).collect::<Vec<_>>(),
    );
    let at: Vec<i64> = keep.iter().map(|i| at[*i]).collect();
    let gauges = gauges
        .into_iter()
        .map(|(n, v)| (n, keep.iter().map(|i| v[*i]).collect()))
        .collect();
    Some(CellTrace {
        window_s: seconds(close, open),
        times,
        tokens,
        requests,
        gap_counts,
        gauge_times: at.iter().map(|t| seconds(*t, open)).collect(),
        gauges,
        loop_text: cell
            .evidence
            .iter()
            .find_map(|e| match e {
                crate::contract::Evidence::Loop(l) => Some(l),
                _ => None,
            })
            .and_then(|l| loop_text(loaded, l)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_schemas::rng::Rng;

    /// Every pixel column's lowest and highest value of every series is among the points
    /// kept, and no more than two per column and series are (plus the ends).
    #[test]
    fn down_sampling_keeps_each_columns_min_and_max() {
        let mut rng = Rng::new(43);
        for n in [MAX_POINTS + 1, 5_000, 100_000] {
            let mut x = 0i64;
            let xs: Vec<i64> = (0..n)
                .map(|_| {
                    x += 1 + rng.below(1_000_000) as i64;
                    x
                })
                .collect();
            let spiky: Vec<Option<f64>> = (0..n)
                .map(|i| match i % 97 {
                    0 => None,
                    1 => Some(1e6 * rng.unit()),
                    _ => Some(rng.unit()),
                })
                .collect();
            let flat: Vec<Option<f64>> = (0..n).map(|i| Some((i % 3) as f64)).collect();
            let keep = min_max(&xs, &[&spiky, &flat]);
            assert!(keep.len() <= 4 * COLUMNS + 2, "{n}: {} kept", keep.len());
            assert!(keep.windows(2).all(|w| w[0] < w[1]), "{n}: not in order");
            assert_eq!((keep[0], keep[keep.len() - 1]), (0, n - 1));
            let (first, last) = (xs[0], xs[n - 1]);
            let column = |x: i64| {
                (((x - first) as i128 * COLUMNS as i128 / (last - first) as i128) as usize)
                    .min(COLUMNS - 1)
            };
            for y in [&spiky, &flat] {
                for c in 0..COLUMNS {
                    let values: Vec<f64> = (0..n)
                        .filter(|i| column(xs[*i]) == c)
                        .filter_map(|i| y[i])
                        .collect();
                    let kept: Vec<f64> = keep
                        .iter()
                        .filter(|i| column(xs[**i]) == c)
                        .filter_map(|i| y[*i])
                        .collect();
                    for want in [
                        values.iter().copied().reduce(f64::min),
                        values.iter().copied().reduce(f64::max),
                    ]
                    .into_iter()
                    .flatten()
                    {
                        assert!(kept.contains(&want), "{n}: column {c} lost {want}");
                    }
                }
            }
        }
        // Short series are kept whole.
        let xs: Vec<i64> = (0..MAX_POINTS as i64).collect();
        let ys: Vec<Option<f64>> = xs.iter().map(|x| Some(*x as f64)).collect();
        assert_eq!(min_max(&xs, &[&ys]).len(), MAX_POINTS);
    }

    /// A cell's token series past MAX_POINTS events keeps at most MAX_POINTS + 1 exact
    /// cumulative counts, the first and the last event among them.
    #[test]
    fn the_token_series_stays_exact_when_cut() {
        let events: Vec<(i64, i64)> = (0..50_000i64)
            .map(|i| (i * 1_000 + i % 7, 1 + i % 3))
            .collect();
        // Pushed in reverse: the series takes them in time order whatever they came in.
        let mut timeline = Timeline::with_limit(1_000);
        for (at, n) in events.iter().rev() {
            timeline.push(*at, *n);
        }
        let (times, tokens) = token_series(&timeline, 0);
        assert!(
            times.len() <= MAX_POINTS + 1 && times.len() > COLUMNS,
            "{}",
            times.len()
        );
        let total: i64 = events.iter().map(|e| e.1).sum();
        assert_eq!(tokens.last(), Some(&total));
        assert_eq!(tokens.first(), Some(&events[0].1));
        for (t, c) in times.iter().zip(&tokens) {
            let i = events
                .iter()
                .position(|e| (e.0 as f64 / 1e9 - t).abs() < 1e-12)
                .expect("a kept event");
            assert_eq!(*c, events[..=i].iter().map(|e| e.1).sum::<i64>());
        }
    }
}
