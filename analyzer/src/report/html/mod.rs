//! The report as one self-contained HTML page: the reference layout with the decode
//! matrix as a heat map, charts across the matrix (uPlot, vendored in `assets/uplot`)
//! and a sortable measurements table. No network requests, no timestamps or random ids:
//! the same scoring gives the same bytes. `charts` shapes the charts' data and draws
//! the SVG ones, `matrix` the heat map, `compare` the page of runs side by side.

mod charts;
mod compare;
mod matrix;
mod talk;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{CellKey, Phase};

use self::charts::{CHARTS, DRILL, cell_data, chart_data, rate_chart, replay_chart};
use self::matrix::heat_table;
use crate::contract::{Scoring, Verdict};
use crate::numbers::context_label;
use crate::report::model::{
    header, matrix_axes, matrix_footer, measurements, notes, prefill_cells, scored_by, shown,
};
use crate::trace::CellTrace;

pub(super) use self::compare::{Baseline, comparison, comparison_body};

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
pub(super) static STYLE: Asset = Asset::new(include_str!("../../../assets/report/report.css"));

/// Sorts a `table.sortable` by the clicked column: numbers by their `data-sort`
/// value, text by its content; a second click reverses. Cells without a number stay
/// last both ways.
pub(super) static SCRIPT: Asset = Asset::new(include_str!("../../../assets/report/sort.js"));

/// uPlot, embedded as shipped, with its licence (see `assets/uplot/README.md`).
const UPLOT_JS: &str = include_str!("../../../assets/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../../assets/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("../../../assets/uplot/LICENSE");

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

/// A page's opening up to its body: the title, and one `<style>` element per sheet.
pub(super) fn head(o: &mut String, title: &str, sheets: &[&dyn std::fmt::Display]) {
    let _ = write!(
        o,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n",
        escape(title)
    );
    for sheet in sheets {
        let _ = writeln!(o, "<style>{sheet}</style>");
    }
    let _ = write!(o, "</head>\n<body>\n");
}

/// The scoring as one self-contained HTML page; a click on a decode cell opens its
/// drill-down, drawn from `traces` (see [`crate::score::score_run`]; none: no drill-down).
pub(super) fn html(s: &Scoring, traces: &BTreeMap<CellKey, CellTrace>) -> String {
    let mut o = String::new();
    let h = header(s);
    let title = format!("Speed test matrix · {}", h.model);
    head(&mut o, &title, &[&STYLE, &UPLOT_CSS]);
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
    talk::conversation_section(&mut o, s);

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

pub(super) fn table(o: &mut String, id: &str, t: &crate::report::model::Table) {
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
    let Some(t) = crate::report::model::burst_table(s) else {
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
    let Some(t) = crate::report::model::replay_table(s) else {
        return;
    };
    let _ = writeln!(o, "<h2>Replay</h2>");
    for line in crate::report::model::replay_intro(s) {
        let _ = writeln!(o, "<p>{}</p>", escape(&line));
    }
    table(o, "replay", &t);
    for (key, trace) in traces.iter().filter(|(k, _)| k.phase == Phase::Replay) {
        replay_chart(o, *key, trace);
    }
}

fn rate_section(o: &mut String, s: &Scoring) {
    let curves = crate::report::model::rate_curves(s);
    if curves.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "<h2>Request rate</h2>\n<p>{}</p>",
        escape(&crate::report::model::rate_intro(s))
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

/// The GPU power section: the mean draw and tokens per joule of each decode cell, or
/// the line that says why there are none.
fn power(o: &mut String, s: &Scoring) {
    let (contexts, levels) = matrix_axes(s);
    if contexts.is_empty() {
        return;
    }
    let _ = writeln!(o, "<h2>GPU power</h2>");
    match crate::report::model::power_rows(s) {
        Ok(rows) => {
            let _ = writeln!(
                o,
                "<p>{}</p>\n<table id=\"power\">\n<thead><tr><th>Context</th>",
                escape(crate::report::model::POWER_INTRO)
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
}
