//! The report as one self-contained HTML page: the reference layout with the decode
//! matrix as a heat map, charts across the matrix (uPlot, vendored in `assets/uplot`)
//! and a sortable measurements table. No network requests, no timestamps or random ids:
//! the same scoring gives the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{CellKey, Phase};

use super::model::{
    decode_cell, header, matrix_axes, matrix_footer, matrix_parts, matrix_text, measurements,
    notes, prefill_cells, scored_by, shown,
};
use crate::contract::{CellScore, Scoring, Verdict};
use crate::numbers::context_label;
use crate::trace::{CellTrace, GAP_EDGES_MS};

/// JSON for a `<script type="application/json">` element: every `<` written as
/// `\u003c` (still the same JSON string), so no text inside (`</script>`, `<!--`) can end
/// the element or open a comment; `>` and `&` likewise, so `]]>` and entities stay text.
fn script_json(data: &serde_json::Value) -> String {
    data.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Text with `&`, `<`, `>`, `"` and `'` escaped, for element content and attributes.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A figure as a data attribute: full precision (Rust's shortest round-trip form), empty
/// when absent.
pub(super) fn data_number(v: Option<f64>) -> String {
    v.filter(|x| x.is_finite())
        .map(|x| format!("{x:?}"))
        .unwrap_or_default()
}

/// The heat map's colour for a share `t` (0–1) of the matrix's best total tok/s: a
/// sequential blue ramp, light to dark, and the text colour that reads on it.
fn heat(t: f64) -> (String, &'static str) {
    let t = t.clamp(0.0, 1.0);
    // #eff6ff (light) to #1e3a8a (dark), linear in sRGB.
    let (a, b) = ([0xef, 0xf6, 0xff], [0x1e, 0x3a, 0x8a]);
    let mix = |i: usize| (f64::from(a[i]) + t * (f64::from(b[i]) - f64::from(a[i]))).round() as u8;
    let colour = format!("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2));
    (colour, if t > 0.5 { "#ffffff" } else { "#111827" })
}

/// A short mark for a verdict that is not Valid, shown in the cell so that the heat
/// map's colour is never the only sign.
fn badge(v: Verdict) -> Option<&'static str> {
    match v {
        Verdict::Valid => None,
        Verdict::RequestsQueued => Some("queued"),
        Verdict::Looped => Some("looped"),
        Verdict::Error => Some("error"),
        Verdict::PrefillCached => Some("cached"),
        Verdict::BadOutput => Some("bad output"),
    }
}

/// The page's CSS.
pub(super) static STYLE: Asset = Asset::new(include_str!("../../assets/report/report.css"));

/// Sorts a `table.sortable` by the clicked column: numbers by their `data-sort`
/// value, text by its content; a second click reverses. Cells without a number stay
/// last both ways.
pub(super) static SCRIPT: Asset = Asset::new(include_str!("../../assets/report/sort.js"));

/// uPlot, embedded as shipped, with its licence (see `assets/uplot/README.md`).
const UPLOT_JS: &str = include_str!("../../assets/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../assets/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("../../assets/uplot/LICENSE");

/// The page's own CSS and JavaScript, in `assets/report/` as files to read and lint: one
/// statement or rule group a line there, and one line on the page (each line trimmed at
/// its start and joined without a break, as the page has always carried them).
pub(super) struct Asset {
    text: &'static str,
    joined: std::sync::OnceLock<String>,
}

impl Asset {
    const fn new(text: &'static str) -> Asset {
        Asset {
            text,
            joined: std::sync::OnceLock::new(),
        }
    }
}

impl std::fmt::Display for Asset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            self.joined
                .get_or_init(|| self.text.lines().map(str::trim_start).collect()),
        )
    }
}

/// Draws the charts from the page's `chart-data` block: one line per context against
/// the concurrency (log 2), TTFT on a log scale; prefill by context. Colour-blind-safe
/// colours, and a dash pattern per line so that colour is not the only key.
pub(super) static CHARTS: Asset = Asset::new(include_str!("../../assets/report/charts.js"));

/// The charts' data: per context, the decode figures by concurrency (null where the
/// cell is missing or its figures are discarded); the prefill figures by context.
fn chart_data(s: &Scoring) -> String {
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
pub(super) static DRILL: Asset = Asset::new(include_str!("../../assets/report/drill.js"));

/// For a queued cell, the scrapes inside the window that show the queue: the waiting
/// gauge above 0, or the running gauge below the cell's concurrency. Each is (time,
/// value, index of the gauge in the trace).
fn queued_marks(s: &Scoring, c: &CellScore, trace: Option<&CellTrace>) -> Vec<(f64, f64, usize)> {
    let Some(t) = trace.filter(|_| c.verdict == Some(Verdict::RequestsQueued)) else {
        return Vec::new();
    };
    let n = f64::from(c.concurrency);
    let mut out = Vec::new();
    for (g, (name, values)) in t.gauges.iter().enumerate() {
        let waiting = s.metrics.waiting.as_deref() == Some(name.as_str());
        let running = s.metrics.running.as_deref() == Some(name.as_str());
        for (at, v) in t.gauge_times.iter().zip(values) {
            let Some(v) = v else { continue };
            if (0.0..=t.window_s).contains(at) && (waiting && *v > 0.0 || running && *v < n) {
                out.push((*at, *v, g));
            }
        }
    }
    out
}

/// Each decode cell's drill-down data: its title, notes, loop excerpt and trace.
fn cell_data(s: &Scoring, traces: &BTreeMap<CellKey, CellTrace>) -> String {
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
                "queued_marks": queued_marks(s, c, trace),
                "title": format!(
                    "Decode {} × {}: {}",
                    context_label(c.context),
                    c.concurrency,
                    matrix_text(Some(c))
                ),
                "notes": super::model::cell_notes(c),
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

/// The scoring as one self-contained HTML page; a click on a decode cell opens its
/// drill-down, drawn from `traces` (see [`crate::score::score_run`]; none: no drill-down).
pub(super) fn html(s: &Scoring, traces: &BTreeMap<CellKey, CellTrace>) -> String {
    let mut o = String::new();
    let h = header(s);
    let title = format!("Speed test matrix · {}", h.model);
    let _ = write!(
        o,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n<style>{UPLOT_CSS}</style>\n</head>\n<body>\n",
        escape(&title)
    );
    let _ = writeln!(o, "<h1>Speed test matrix</h1>");
    let _ = writeln!(
        o,
        "<p><strong>{}</strong> on {}</p>",
        escape(&h.model),
        escape(&h.hardware)
    );
    let _ = writeln!(
        o,
        "<p class=\"sub\">{}</p>",
        escape(&h.subtitle.join(" · "))
    );
    if h.nothing_measured {
        let _ = writeln!(
            o,
            "<p>Nothing was measured: no cell of this run was recorded (the Notes say why).</p>"
        );
    }
    for (name, facts) in &h.sections {
        let _ = writeln!(o, "<h2>{}</h2>\n<dl class=\"facts\">", escape(name));
        for (k, v) in facts {
            let _ = writeln!(o, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
        }
        let _ = writeln!(o, "</dl>");
    }
    if let Some(cmd) = &h.launch_command {
        let _ = writeln!(o, "<h2>Launch command</h2>\n<pre>{}</pre>", escape(cmd));
    }

    prefill_section(&mut o, s);
    decode_section(&mut o, s);
    burst_section(&mut o, s);
    rate_section(&mut o, s);
    replay_section(&mut o, s, traces);

    let (headers, rows) = measurements(s);
    let _ = writeln!(
        o,
        "<h2>All measurements</h2>\n<p>Latencies are medians. Total tok/s is output across \
         all simultaneous requests. Most sends in 10 ms is a closed-loop cell's burstiness: \
         streams that finish in one server step are sent again together and wait in the \
         server's socket queue (the index of dispersion is in the JSON and CSV: 1 for \
         Poisson arrivals). Click a column to sort.</p>\n\
         <table class=\"sortable\" id=\"measurements\">\n<thead><tr>"
    );
    for h in &headers {
        let _ = write!(o, "<th>{}</th>", escape(h));
    }
    let _ = writeln!(o, "</tr></thead>\n<tbody>");
    for (row, cell) in rows.iter().zip(&s.cells) {
        let _ = write!(
            o,
            "<tr data-phase=\"{}\" data-context=\"{}\" data-concurrency=\"{}\">",
            cell.phase.as_str(),
            cell.context,
            cell.concurrency
        );
        for (text, number) in row {
            match number {
                Some(_) => {
                    let _ = write!(
                        o,
                        "<td data-sort=\"{}\">{}</td>",
                        data_number(*number),
                        escape(text)
                    );
                }
                None => {
                    let _ = write!(o, "<td>{}</td>", escape(text));
                }
            }
        }
        let _ = writeln!(o, "</tr>");
    }
    let _ = writeln!(o, "</tbody>\n</table>");

    let _ = writeln!(
        o,
        "<script type=\"application/json\" id=\"chart-data\">{}</script>",
        chart_data(s)
    );
    let _ = writeln!(
        o,
        "<script type=\"application/json\" id=\"cell-data\">{}</script>",
        cell_data(s, traces)
    );
    power(&mut o, s);
    let notes = notes(s);
    if !notes.is_empty() {
        let _ = writeln!(o, "<h2>Notes</h2>\n<ul>");
        for n in notes {
            let _ = writeln!(o, "<li>{}</li>", escape(&n));
        }
        let _ = writeln!(o, "</ul>");
    }
    let _ = writeln!(
        o,
        "<footer>{}<br>Charts: uPlot 1.6.32, MIT licence (below).</footer>\n\
         <script>{SCRIPT}</script>\n<script>/*\n{}*/\n{UPLOT_JS}</script>\n<script>{CHARTS}</script>\n<script>{DRILL}</script>\n</body>\n</html>",
        escape(&scored_by(s)),
        UPLOT_LICENSE.replace("*/", "* /")
    );
    o
}

fn table(o: &mut String, id: &str, t: &super::model::Table) {
    let _ = writeln!(o, "<table id=\"{id}\">\n<thead><tr>");
    for h in &t.headers {
        let _ = write!(o, "<th>{}</th>", escape(h));
    }
    let _ = writeln!(o, "</tr></thead>\n<tbody>");
    for row in &t.rows {
        let _ = write!(o, "<tr>");
        for text in row {
            let _ = write!(o, "<td>{}</td>", escape(text));
        }
        let _ = writeln!(o, "</tr>");
    }
    let _ = writeln!(o, "</tbody>\n</table>");
}

fn burst_section(o: &mut String, s: &Scoring) {
    let Some(t) = super::model::burst_table(s) else {
        return;
    };
    let _ = writeln!(
        o,
        "<h2>Burst / E2E</h2>\n<p>exactly {} requests per cell at the given concurrency, each run to completion · latencies in ms as p50 / p90 / p99 / max</p>",
        s.run
            .burst_requests
            .map_or_else(|| "—".to_string(), |n| n.to_string())
    );
    table(o, "burst", &t);
}

fn replay_section(o: &mut String, s: &Scoring, traces: &BTreeMap<CellKey, CellTrace>) {
    let Some(t) = super::model::replay_table(s) else {
        return;
    };
    let _ = writeln!(o, "<h2>Replay</h2>");
    for line in super::model::replay_intro(s) {
        let _ = writeln!(o, "<p>{}</p>", escape(&line));
    }
    table(o, "replay", &t);
    for (key, trace) in traces.iter().filter(|(k, _)| k.phase == Phase::Replay) {
        replay_chart(o, *key, trace);
    }
}

/// Most requests drawn in a replay chart; beyond it every k-th is drawn.
const REPLAY_POINTS: usize = 2000;

/// A replay cell's requests over trace time as an inline SVG (no script): TTFT and E2E
/// latency (log-scaled) against when each was due, and under them, on the same time
/// axis, how late each left (the schedule's lag).
fn replay_chart(o: &mut String, key: CellKey, t: &CellTrace) {
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
    let stride = all.len().div_ceil(REPLAY_POINTS).max(1);
    let pts: Vec<&Point> = all.iter().step_by(stride).collect();
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
fn rate_chart(o: &mut String, c: &super::model::RateCurve) {
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
    type Pick = fn(&super::model::RatePoint) -> Option<f64>;
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

fn rate_section(o: &mut String, s: &Scoring) {
    let curves = super::model::rate_curves(s);
    if curves.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "<h2>Request rate</h2>\n<p>{}</p>",
        escape(&super::model::rate_intro(s))
    );
    for c in &curves {
        let _ = writeln!(o, "<h3>{}</h3>", escape(&context_label(c.context)));
        table(o, &format!("rate-{}", c.context), &c.table);
        rate_chart(o, c);
        let _ = writeln!(o, "<p class=\"knee\">{}</p>", escape(&c.knee));
    }
}

fn prefill_section(o: &mut String, s: &Scoring) {
    let prefill = prefill_cells(s);
    if prefill.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "<h2>Prefill</h2>\n<p>prompt tok/s by context length</p>\n<table id=\"prefill\">\n\
         <thead><tr><th>Context</th><th>Prompt tok/s</th><th>TTFT</th><th>Status</th></tr></thead>\n<tbody>"
    );
    for c in &prefill {
        let f = shown(c);
        let cell = |v: Option<f64>, text: String| {
            format!(
                "<td data-sort=\"{}\">{}</td>",
                data_number(v),
                escape(&text)
            )
        };
        let rate = f.and_then(|f| f.prompt_tok_s);
        let ttft = f.and_then(|f| f.ttft_ms.median);
        let _ = writeln!(
            o,
            "<tr data-context=\"{}\"><td>{}</td>{}{}<td>{}</td></tr>",
            c.context,
            escape(&context_label(c.context)),
            cell(
                rate,
                rate.map_or("—".to_string(), |v| crate::numbers::rate(v, true))
            ),
            cell(ttft, ttft.map_or("—".to_string(), crate::numbers::ms_whole)),
            escape(&c.status_label())
        );
    }
    let _ = writeln!(o, "</tbody>\n</table>");
    let _ = writeln!(
        o,
        "<div class=\"charts\"><div id=\"chart-prefill-rate\"></div><div id=\"chart-prefill-ttft\"></div></div>"
    );
    if prefill
        .iter()
        .any(|c| c.verdict == Some(Verdict::PrefillCached))
    {
        let _ = writeln!(
            o,
            "<p>Served from cache: the server answered the prefill scout from its prompt cache, so prefill was not measured.</p>"
        );
    }
}

fn decode_section(o: &mut String, s: &Scoring) {
    let (contexts, _) = matrix_axes(s);
    if contexts.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "<h2>Sustained decode</h2>\n<p>total tok/s · rows are context length, columns are \
         simultaneous requests · colour: share of the matrix's best total tok/s · click a \
         cell for its drill-down</p>"
    );
    heat_table(o, s, Some("matrix"));
    for line in matrix_footer(s) {
        let _ = writeln!(o, "<p class=\"legend\">{}</p>", escape(&line));
    }
    let _ = writeln!(
        o,
        "<section id=\"drill\" hidden>\n<h2 id=\"drill-title\"></h2>\n<ul id=\"drill-notes\"></ul>\n\
         <pre id=\"drill-excerpt\" hidden></pre>\n<div class=\"charts drill\"><div id=\"drill-tokens\"></div>\
         <div id=\"drill-lanes\"></div><div id=\"drill-gaps\"></div><div id=\"drill-gauges\"></div></div>\n</section>"
    );
    let _ = writeln!(
        o,
        "<h2>Across the matrix</h2>\n<p>One line per context; looped and error cells are gaps. \
         Drag to zoom, double-click to reset.</p>\n<div class=\"charts\"><div id=\"chart-total\"></div>\
         <div id=\"chart-per-request\"></div><div id=\"chart-ttft\"></div></div>"
    );
}

/// A matrix table's column heads (after the table's opening and its "Context" head),
/// up to its body.
fn matrix_head(o: &mut String, levels: &[u32]) {
    for n in levels {
        let _ = write!(o, "<th>{n}</th>");
    }
    let _ = writeln!(o, "</tr></thead>\n<tbody>");
}

/// A matrix row's opening and its context head.
fn row_head(o: &mut String, context: u32) {
    let _ = write!(
        o,
        "<tr><th scope=\"row\">{}</th>",
        escape(&context_label(context))
    );
}

/// The decode matrix as a heat map; `id` names the page's main matrix, whose cells open
/// drill-downs.
fn heat_table(o: &mut String, s: &Scoring, id: Option<&str>) {
    let (contexts, levels) = matrix_axes(s);
    let best = s
        .cells
        .iter()
        .filter(|c| c.phase == Phase::Decode)
        .filter_map(|c| shown(c).and_then(|f| f.total_tok_s))
        .fold(0.0f64, f64::max);
    let _ = writeln!(
        o,
        "<table class=\"heat\"{}>\n<thead><tr><th>Context</th>",
        id.map(|id| format!(" id=\"{id}\"")).unwrap_or_default()
    );
    let interactive = if id.is_some() {
        " tabindex=\"0\" role=\"button\""
    } else {
        ""
    };
    matrix_head(o, &levels);
    for ctx in &contexts {
        row_head(o, *ctx);
        for n in &levels {
            let cell = decode_cell(s, *ctx, *n);
            let text = matrix_text(cell);
            let Some(c) = cell else {
                let _ = write!(o, "<td>{}</td>", escape(&text));
                continue;
            };
            let f = shown(c);
            let rate = f.and_then(|f| f.total_tok_s);
            let ttft = f.and_then(|f| f.ttft_ms.median);
            let verdict = c.verdict;
            let flagged = verdict.and_then(badge);
            // Coloured by throughput wherever the cell shows one (a queued cell too,
            // hatched and badged); grey where the verdict discards it.
            let style = match rate {
                Some(r) if best > 0.0 => {
                    let (bg, fg) = heat(r / best);
                    format!(" style=\"background-color:{bg};color:{fg}\"")
                }
                _ if verdict.is_some() => " style=\"background-color:#e5e7eb\"".to_string(),
                _ => String::new(),
            };
            let _ = write!(
                o,
                "<td class=\"cell{}\"{interactive} data-phase=\"decode\" data-context=\"{ctx}\" \
                 data-concurrency=\"{n}\" data-verdict=\"{}\" data-total-tok-s=\"{}\" \
                 data-ttft-ms=\"{}\" title=\"{}\"{style}>",
                if flagged.is_some() { " flagged" } else { "" },
                verdict.map_or("", Verdict::as_str),
                data_number(rate),
                data_number(ttft),
                escape(&text),
            );
            match matrix_parts(c) {
                Some((rate, _, ttft)) => {
                    let _ = write!(
                        o,
                        "<span class=\"rate\">{}</span>{}<span class=\"ttft\">{}</span>",
                        escape(&rate),
                        flagged
                            .map(|b| format!("<span class=\"badge\">{b}</span>"))
                            .unwrap_or_default(),
                        escape(&ttft)
                    );
                }
                None => {
                    let _ = write!(o, "{}", escape(&text));
                }
            }
            let _ = write!(o, "</td>");
        }
        let _ = writeln!(o, "</tr>");
    }
    let _ = writeln!(o, "</tbody>\n</table>");
}

/// The colour of a ratio `r` (B / A): red below 1, green above, white at 1, saturating
/// at ½ and 2; `higher_is_better` flips the sense (TTFT is better lower).
fn ratio_colour(r: f64, higher_is_better: bool) -> String {
    let x = (r.log2().clamp(-1.0, 1.0)) * if higher_is_better { 1.0 } else { -1.0 };
    let (toward, t) = if x >= 0.0 {
        ([0x16, 0xa3, 0x4a], x)
    } else {
        ([0xdc, 0x26, 0x26], -x)
    };
    let mix = |i: usize| (255.0 + 0.55 * t * (f64::from(toward[i]) - 255.0)).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2))
}

/// Which run each ratio heat map of a comparison divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Baseline {
    /// Every run against the first (two engine versions, one run under two rule sets).
    First,
    /// Every run against the one before it: runs in time order, each step's change
    /// ("vLLM 0.27 → 0.28").
    Previous,
}

/// Several scorings side by side: each run's matrix, then for every run after the
/// first a ratio heat map against the first (total tok/s and median TTFT, B / A, per
/// cell) and the cells whose verdict changed. For two engine versions, two GPUs, or one
/// run under two rule sets.
pub(super) fn comparison(sides: &[(String, Scoring)]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Speed test comparison</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>Speed test comparison</h1>\n"
    );
    comparison_body(&mut o, sides, Baseline::First);
    let _ = writeln!(o, "</body>\n</html>");
    o
}

/// The runs' list, the ratio heat maps against `baseline`, each run's matrix and the
/// footer naming who scored each: a comparison page's body after its heading.
pub(super) fn comparison_body(o: &mut String, sides: &[(String, Scoring)], baseline: Baseline) {
    let _ = writeln!(o, "<ol>");
    for (label, s) in sides {
        let h = header(s);
        let _ = writeln!(
            o,
            "<li><strong>{}</strong>: {} on {} · {} · run {} · rules {}</li>",
            escape(label),
            escape(&h.model),
            escape(&h.hardware),
            escape(&h.subtitle.join(" · ")),
            escape(&s.run.run_id),
            escape(&s.rules.id())
        );
    }
    let _ = writeln!(o, "</ol>");
    for (i, (label, s)) in sides.iter().enumerate().skip(1) {
        let (base_label, base) = match baseline {
            Baseline::First => &sides[0],
            Baseline::Previous => &sides[i - 1],
        };
        ratio_map(o, (base_label, base), (label, s), baseline);
    }
    for (label, s) in sides {
        let _ = writeln!(o, "<h2>{}: sustained decode</h2>", escape(label));
        heat_table(o, s, None);
        for line in matrix_footer(s) {
            let _ = writeln!(o, "<p class=\"legend\">{}</p>", escape(&line));
        }
    }
    let _ = writeln!(
        o,
        "<footer>{}</footer>",
        sides
            .iter()
            .map(|(label, s)| format!("{}: {}", escape(label), escape(&scored_by(s))))
            .collect::<Vec<_>>()
            .join("<br>")
    );
}

/// One ratio heat map, `(label, s)` over `(base_label, base)`, and the cells whose
/// verdict changed between them.
fn ratio_map(
    o: &mut String,
    (base_label, base): (&String, &Scoring),
    (label, s): (&String, &Scoring),
    baseline: Baseline,
) {
    let title = match baseline {
        Baseline::First => format!("{} / {}", escape(label), escape(base_label)),
        Baseline::Previous => format!("{} → {}", escape(base_label), escape(label)),
    };
    let _ = writeln!(
        o,
        "<h2>{title}</h2>\n<p>Per cell: total tok/s and median TTFT of {} divided by {}'s. \
         Green is better (more tok/s, less TTFT), red worse; saturated at ×2 and ×½. \
         A changed verdict is written in the cell and hatched.</p>",
        escape(label),
        escape(base_label)
    );
    let (mut contexts, mut levels) = matrix_axes(base);
    let (c2, l2) = matrix_axes(s);
    contexts.extend(c2);
    levels.extend(l2);
    contexts.sort_unstable();
    contexts.dedup();
    levels.sort_unstable();
    levels.dedup();
    let _ = write!(
        o,
        "<table class=\"heat ratio\">\n<thead><tr><th>Context</th>"
    );
    matrix_head(o, &levels);
    for ctx in &contexts {
        row_head(o, *ctx);
        for n in &levels {
            let (a, b) = (decode_cell(base, *ctx, *n), decode_cell(s, *ctx, *n));
            let (Some(a), Some(b)) = (a, b) else {
                let _ = write!(
                    o,
                    "<td>only in {}</td>",
                    escape(if a.is_some() { base_label } else { label })
                );
                continue;
            };
            ratio_cell(o, (*ctx, *n), a, b);
        }
        let _ = writeln!(o, "</tr>");
    }
    let _ = writeln!(o, "</tbody>\n</table>");
    let d = crate::diff::diff(base, s, 0.0);
    if d.verdicts_changed.is_empty() {
        let _ = writeln!(o, "<p>No verdict changed.</p>");
    } else {
        let _ = writeln!(o, "<p>Verdicts changed:</p>\n<ul>");
        for c in &d.verdicts_changed {
            let _ = writeln!(
                o,
                "<li>{} {} × {}: {} → {}</li>",
                c.cell.phase,
                escape(&context_label(c.cell.context)),
                c.cell.concurrency,
                escape(&c.status_a),
                escape(&c.status_b)
            );
        }
        let _ = writeln!(o, "</ul>");
    }
}

/// One cell of a ratio heat map: B's total tok/s and median TTFT over A's.
fn ratio_cell(o: &mut String, (ctx, n): (u32, u32), a: &CellScore, b: &CellScore) {
    let pick = |c: &CellScore, f: fn(&crate::contract::Figures) -> Option<f64>| {
        shown(c).and_then(f).filter(|v| v.is_finite() && *v > 0.0)
    };
    let rate = pick(b, |f| f.total_tok_s)
        .zip(pick(a, |f| f.total_tok_s))
        .map(|(y, x)| y / x);
    let ttft = pick(b, |f| f.ttft_ms.median)
        .zip(pick(a, |f| f.ttft_ms.median))
        .map(|(y, x)| y / x);
    let changed = a.status_label() != b.status_label();
    let style = rate
        .map(|r| format!(" style=\"background-color:{}\"", ratio_colour(r, true)))
        .unwrap_or_default();
    let _ = write!(
        o,
        "<td class=\"ratio{}\" data-context=\"{ctx}\" data-concurrency=\"{n}\" \
         data-ratio-tok-s=\"{}\" data-ratio-ttft=\"{}\"{style}>\
         <span class=\"rate\">{}</span><span class=\"ttft\">{}</span>",
        if changed { " flagged" } else { "" },
        data_number(rate),
        data_number(ttft),
        rate.map_or("—".to_string(), |r| format!("×{r:.2} tok/s")),
        ttft.map_or("—".to_string(), |r| format!("×{r:.2} TTFT")),
    );
    if changed {
        let _ = write!(
            o,
            "<span class=\"badge\">{} → {}</span>",
            escape(&a.status_label()),
            escape(&b.status_label())
        );
    }
    let _ = write!(o, "</td>");
}

/// The GPU power section: the mean draw and tokens per joule of each decode cell, or
/// the line that says why there are none.
fn power(o: &mut String, s: &Scoring) {
    let (contexts, levels) = matrix_axes(s);
    if contexts.is_empty() {
        return;
    }
    let _ = writeln!(o, "<h2>GPU power</h2>");
    match super::model::power_rows(s) {
        Ok(rows) => {
            let _ = writeln!(
                o,
                "<p>{}</p>\n<table id=\"power\">\n<thead><tr><th>Context</th>",
                escape(super::model::POWER_INTRO)
            );
            for n in &levels {
                let _ = write!(o, "<th>{n}</th>");
            }
            let _ = writeln!(o, "</tr></thead>\n<tbody>");
            for (ctx, cells) in rows {
                let _ = write!(o, "<tr><th>{}</th>", escape(&context_label(ctx)));
                for c in cells {
                    let _ = write!(o, "<td>{}</td>", escape(&c));
                }
                let _ = writeln!(o, "</tr>");
            }
            let _ = writeln!(o, "</tbody>\n</table>");
        }
        Err(line) => {
            let _ = writeln!(o, "<p id=\"power\">{}</p>", escape(&line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape("<a href=\"x\">Tom & Jerry's</a>"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;"
        );
    }

    #[test]
    fn the_heat_ramp_runs_light_to_dark_with_readable_text() {
        assert_eq!(heat(0.0), ("#eff6ff".to_string(), "#111827"));
        assert_eq!(heat(1.0), ("#1e3a8a".to_string(), "#ffffff"));
        assert_eq!(heat(7.0), heat(1.0), "clamped");
    }

    #[test]
    fn ratios_are_green_when_better_and_red_when_worse() {
        assert_eq!(ratio_colour(1.0, true), "#ffffff");
        assert_eq!(
            ratio_colour(2.0, true),
            ratio_colour(0.5, false),
            "TTFT halves: better"
        );
        assert_eq!(
            ratio_colour(4.0, true),
            ratio_colour(2.0, true),
            "saturated"
        );
        // Checked by eye: a mid green and a mid red.
        assert_eq!(
            (ratio_colour(2.0, true), ratio_colour(0.5, true)),
            ("#7fcc9b".to_string(), "#ec8888".to_string())
        );
    }
}
