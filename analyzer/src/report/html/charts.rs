//! The page's charts: the data the uPlot charts and the drill-downs draw from (their
//! programs in `assets/report/`), and the replay and rate charts drawn as inline SVG.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tokentrace_schemas::layout::{CellKey, Phase};

use super::{Asset, escape, script_json};
use crate::contract::{CellScore, Scoring, Verdict};
use crate::numbers::context_label;
use crate::report::model::{decode_cell, matrix_axes, matrix_text, prefill_cells, shown};
use crate::trace::{CellTrace, GAP_EDGES_MS};

/// Draws the charts from the page's `chart-data` block: one line per context against
/// the concurrency (log 2), TTFT on a log scale; prefill by context. Colour-blind-safe
/// colours, and a dash pattern per line so that colour is not the only key.
pub(super) static CHARTS: Asset = Asset::new(include_str!("../../../assets/report/charts.js"));

/// The charts' data: per context, the decode figures by concurrency (null where the
/// cell is missing or its figures are discarded); the prefill figures by context.
pub(super) fn chart_data(s: &Scoring) -> String {
    let (contexts, levels) = matrix_axes(s);
    let series = |pick: &dyn Fn(&crate::contract::Figures) -> Option<f64>| {
        contexts
            .iter()
            .map(|ctx| {
                let values: Vec<Option<f64>> = levels
                    .iter()
                    .map(|n| {
                        decode_cell(s, *ctx, *n)
                            .and_then(shown)
                            .and_then(pick)
                            .filter(|v| v.is_finite())
                    })
                    .collect();
                serde_json::json!({"label": context_label(*ctx), "values": values})
            })
            .collect::<Vec<_>>()
    };
    let prefill = prefill_cells(s);
    let figure = |c: &CellScore, pick: &dyn Fn(&crate::contract::Figures) -> Option<f64>| {
        shown(c).and_then(pick).filter(|v| v.is_finite())
    };
    let data = serde_json::json!({
        "matrix": (!contexts.is_empty()).then(|| serde_json::json!({
            "levels": levels,
            "total": series(&|f| f.total_tok_s),
            "per_request": series(&|f| f.per_request_tok_s.median),
            "ttft": series(&|f| f.ttft_ms.median),
        })),
        "prefill": (!prefill.is_empty()).then(|| serde_json::json!({
            "contexts": prefill.iter().map(|c| c.context).collect::<Vec<_>>(),
            "rate": prefill.iter().map(|c| figure(c, &|f| f.prompt_tok_s)).collect::<Vec<_>>(),
            "ttft": prefill.iter().map(|c| figure(c, &|f| f.ttft_ms.median)).collect::<Vec<_>>(),
        })),
    });
    script_json(&data)
}

/// Opens a decode cell's drill-down when its matrix cell is clicked (or Enter or Space
/// pressed on it): its notes, a loop's repeated text with the cycle marked, and three
/// charts from the cell's trace: output tokens over time with the window shaded and each
/// request's send (grey), first token (green) and end (orange) ticked; one lane per
/// request from its send through its first token to its end; the gaps between token
/// events; the server's gauges with every scrape marked.
pub(super) static DRILL: Asset = Asset::new(include_str!("../../../assets/report/drill.js"));

/// For a queued cell, the scrapes inside the window its verdict rests on: those of each
/// gauge a queueing evidence names, on the side of the threshold the rule used
/// ([`crate::contract::Evidence::gauge_mark`]). Each is (time, value, index of the
/// gauge in the trace).
fn queued_marks(c: &CellScore, trace: Option<&CellTrace>) -> Vec<(f64, f64, usize)> {
    let Some(t) = trace.filter(|_| c.verdict == Some(Verdict::RequestsQueued)) else {
        return Vec::new();
    };
    let marks: Vec<_> = c.evidence.iter().filter_map(|e| e.gauge_mark()).collect();
    let mut out = Vec::new();
    for (g, (name, values)) in t.gauges.iter().enumerate() {
        let rules: Vec<_> = marks.iter().filter(|m| m.metric == *name).collect();
        for (at, v) in t.gauge_times.iter().zip(values) {
            let Some(v) = v else { continue };
            if (0.0..=t.window_s).contains(at) && rules.iter().any(|m| m.holds(*v)) {
                out.push((*at, *v, g));
            }
        }
    }
    out
}

/// Each decode cell's drill-down data: its title, notes, loop excerpt and trace.
pub(super) fn cell_data(s: &Scoring, traces: &BTreeMap<CellKey, CellTrace>) -> String {
    let mut cells = serde_json::Map::new();
    for c in s.cells.iter().filter(|c| c.phase == Phase::Decode) {
        let lp = c.evidence.iter().find_map(|e| match e {
            crate::contract::Evidence::Loop(l) => Some(l),
            _ => None,
        });
        let trace = traces.get(&c.key());
        cells.insert(
            format!("{}/{}", c.context, c.concurrency),
            serde_json::json!({
                "queued_marks": queued_marks(c, trace),
                "title": format!(
                    "Decode {} × {}: {}",
                    context_label(c.context),
                    c.concurrency,
                    matrix_text(Some(c))
                ),
                "notes": crate::report::model::cell_notes(c),
                "loop": lp.map(|l| serde_json::json!({
                    "excerpt": l.cycle_excerpt,
                    "cycle_chars": l.cycle_chars,
                    "cycles": l.cycles,
                })),
                "trace": trace,
            }),
        );
    }
    let data = serde_json::json!({"gap_edges_ms": GAP_EDGES_MS, "cells": cells});
    script_json(&data)
}

/// Most requests drawn in a replay chart; beyond it every k-th is drawn.
const REPLAY_POINTS: usize = 2000;

/// A replay cell's requests over trace time as an inline SVG (no script): TTFT and E2E
/// latency (log-scaled) against when each was due, and under them, on the same time
/// axis, how late each left (the schedule's lag).
pub(super) fn replay_chart(o: &mut String, key: CellKey, t: &CellTrace) {
    struct Point {
        at: f64,
        ttft: Option<f64>,
        e2e: Option<f64>,
        lag: f64,
    }
    let all: Vec<Point> = t
        .requests
        .iter()
        .filter(|r| r.role == "measured")
        .filter_map(|r| {
            let (due, sent) = (r.scheduled?, r.sent?);
            Some(Point {
                at: due,
                ttft: r.first_token.map(|f| (f - sent) * 1e3),
                e2e: r.end.map(|e| (e - sent) * 1e3),
                lag: (sent - due) * 1e3,
            })
        })
        .collect();
    let pts: Vec<&Point> = crate::trace::thinned(&all, REPLAY_POINTS).collect();
    let ys: Vec<f64> = pts
        .iter()
        .flat_map(|p| [p.ttft, p.e2e])
        .flatten()
        .filter(|v| *v > 0.0)
        .collect();
    if pts.len() < 2 || ys.is_empty() {
        return;
    }
    let (w, top, low, m) = (640.0, 220.0, 90.0, 48.0);
    let h = top + low + 24.0;
    let x1 = pts.iter().map(|p| p.at).fold(0.0, f64::max).max(1e-3);
    let (y0, y1) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), y| {
        (a.min(y.ln()), b.max(y.ln()))
    });
    let lag_max = pts.iter().map(|p| p.lag).fold(0.0, f64::max).max(1e-3);
    let sx = |x: f64| m + x / x1 * (w - 2.0 * m);
    let sy = |y: f64| top - 16.0 - (y.ln() - y0) / (y1 - y0).max(1e-9) * (top - 16.0 - m / 2.0);
    let base = top + low;
    let sl = |l: f64| base - l.max(0.0) / lag_max * (low - 12.0);
    let _ = writeln!(
        o,
        "<svg class=\"replay-chart\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"replay {}: latency and schedule lag over trace time\">",
        key.replay.unwrap_or(0)
    );
    let _ = writeln!(
        o,
        "<line x1=\"{m}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#888\"/><line x1=\"{m}\" y1=\"{base}\" x2=\"{1}\" y2=\"{base}\" stroke=\"#888\"/><line x1=\"{m}\" y1=\"{2}\" x2=\"{m}\" y2=\"{base}\" stroke=\"#888\"/>",
        top - 16.0,
        w - m,
        m / 2.0
    );
    type Pick = fn(&Point) -> Option<f64>;
    let series: [(&str, &str, Pick); 2] = [
        ("E2E", "#1f77b4", |p| p.e2e),
        ("TTFT", "#2ca02c", |p| p.ttft),
    ];
    for (i, (name, colour, pick)) in series.iter().enumerate() {
        let _ = write!(o, "<g fill=\"{colour}\">");
        for p in &pts {
            if let Some(y) = pick(p).filter(|y| *y > 0.0) {
                let _ = write!(
                    o,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.6\"/>",
                    sx(p.at),
                    sy(y)
                );
            }
        }
        let _ = writeln!(
            o,
            "</g><text x=\"{}\" y=\"14\" fill=\"{colour}\" font-size=\"11\">{name} ms</text>",
            m + 70.0 + 80.0 * i as f64
        );
    }
    let lag: Vec<String> = pts
        .iter()
        .map(|p| format!("{:.1},{:.1}", sx(p.at), sl(p.lag)))
        .collect();
    let _ = writeln!(
        o,
        "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1\" points=\"{}\"/>",
        lag.join(" ")
    );
    for y in [y0, y1] {
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            m - 4.0,
            sy(y.exp()) + 3.0,
            escape(&crate::numbers::fixed(y.exp(), usize::from(y.exp() < 10.0)))
        );
    }
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text><text x=\"{m}\" y=\"{}\" font-size=\"11\" fill=\"#d62728\">schedule lag, ms (max {})</text>",
        m - 4.0,
        sl(lag_max) + 3.0,
        escape(&crate::numbers::fixed(lag_max, 1)),
        top + 2.0,
        escape(&crate::numbers::fixed(lag_max, 2))
    );
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">trace time, s (0 to {})</text><text x=\"4\" y=\"14\" font-size=\"11\">ms (log)</text>\n</svg>",
        w / 2.0,
        h - 4.0,
        escape(&crate::numbers::fixed(x1, 1))
    );
}

/// The latency-versus-rate curve of one context as an inline SVG (no script): p50 and
/// p99 E2E latency and p99 TTFT against the offered rate, log-scaled on both axes; the
/// knee's rate is marked.
pub(super) fn rate_chart(o: &mut String, c: &crate::report::model::RateCurve) {
    let pts = &c.points;
    let ys: Vec<f64> = pts
        .iter()
        .flat_map(|p| [p.e2e_p50, p.e2e_p99, p.ttft_p99])
        .flatten()
        .filter(|v| *v > 0.0)
        .collect();
    if pts.len() < 2 || ys.is_empty() {
        return;
    }
    let (w, h, m) = (560.0, 240.0, 48.0);
    let lx = |x: f64| x.max(1e-3).ln();
    let (x0, x1) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(lx(p.x)), b.max(lx(p.x)))
    });
    let (y0, y1) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), y| {
        (a.min(y.ln()), b.max(y.ln()))
    });
    let sx = |x: f64| m + (lx(x) - x0) / (x1 - x0).max(1e-9) * (w - 2.0 * m);
    let sy = |y: f64| h - m - (y.ln() - y0) / (y1 - y0).max(1e-9) * (h - 2.0 * m);
    let _ = writeln!(
        o,
        "<svg class=\"rate-curve\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"latency against offered rate, {}\">",
        escape(&context_label(c.context))
    );
    let _ = writeln!(
        o,
        "<line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/><line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"#888\"/>",
        h - m,
        w - m,
        h - m,
        h - m
    );
    type Pick = fn(&crate::report::model::RatePoint) -> Option<f64>;
    let lines: [(&str, &str, Pick); 3] = [
        ("E2E p50", "#1f77b4", |p| p.e2e_p50),
        ("E2E p99", "#d62728", |p| p.e2e_p99),
        ("TTFT p99", "#2ca02c", |p| p.ttft_p99),
    ];
    for (i, (name, colour, pick)) in lines.iter().enumerate() {
        let line: Vec<String> = pts
            .iter()
            .filter_map(|p| {
                let y = pick(p)?;
                (y > 0.0).then(|| format!("{:.1},{:.1}", sx(p.x), sy(y)))
            })
            .collect();
        // The legend runs along the top, clear of the lines.
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/><text x=\"{}\" y=\"14\" fill=\"{colour}\" font-size=\"11\">{name}</text>",
            line.join(" "),
            m + 70.0 + 80.0 * i as f64
        );
    }
    // The knee: a dashed line at its rate.
    for p in pts.iter().filter(|p| p.knee) {
        let x = sx(p.x);
        let _ = writeln!(
            o,
            "<line class=\"knee\" x1=\"{x:.1}\" y1=\"{m}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#555\" stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{}\" font-size=\"10\">knee</text>",
            h - m,
            x + 3.0,
            m + 10.0,
        );
    }
    for p in pts {
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            sx(p.x),
            h - m + 14.0,
            escape(&p.label)
        );
    }
    // The latency axis: its highest and lowest value.
    for y in [y0, y1] {
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            m - 4.0,
            sy(y.exp()) + 3.0,
            escape(&crate::numbers::fixed(y.exp(), 0))
        );
    }
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">offered req/s (log)</text><text x=\"4\" y=\"14\" font-size=\"11\">ms (log)</text>\n</svg>",
        w / 2.0,
        h - 8.0
    );
}
