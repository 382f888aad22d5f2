//! The Conversations section of the page: the sessions' table, the table by turn, and a
//! chart of each cell's median TTFT and cache hit by turn, one line per number of live
//! sessions (drawn from the judge's figures, nothing computed here).

use std::fmt::Write as _;

use super::{escape, table};
use crate::contract::{CellScore, Scoring};
use crate::report::model::{conversation_intro, conversation_table, shown, turn_table};
use tokentrace_schemas::layout::Phase;

/// Line colours, one per cell in order (repeating).
const COLOURS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

pub(super) fn conversation_section(o: &mut String, s: &Scoring) {
    let Some(t) = conversation_table(s) else {
        return;
    };
    let _ = writeln!(o, "<h2>Conversations</h2>");
    for line in conversation_intro(s) {
        let _ = writeln!(o, "<p>{}</p>", escape(&line));
    }
    table(o, "conversations", &t);
    if let Some(turns) = turn_table(s) {
        let _ = writeln!(o, "<h3>By turn</h3>");
        table(o, "conversation-turns", &turns);
    }
    let cells: Vec<&CellScore> = s
        .cells
        .iter()
        .filter(|c| c.phase == Phase::Conversation)
        .collect();
    turn_chart(o, &cells);
}

/// One turn's point: (turn, median TTFT ms, cache hit ratio).
type Point = (f64, Option<f64>, Option<f64>);

/// One cell's points by turn.
fn points(c: &CellScore) -> Vec<Point> {
    shown(c)
        .and_then(|f| f.conversation.as_ref())
        .map(|t| {
            t.by_turn
                .iter()
                .map(|r| (f64::from(r.turn), r.ttft_ms.median, r.cache_hit_ratio))
                .collect()
        })
        .unwrap_or_default()
}

/// TTFT (top, ms) and cache hit (bottom, %) by turn, one polyline per cell.
fn turn_chart(o: &mut String, cells: &[&CellScore]) {
    let all: Vec<(&CellScore, Vec<Point>)> = cells
        .iter()
        .map(|c| (*c, points(c)))
        .filter(|(_, p)| p.len() >= 2)
        .collect();
    let ttft_max = all
        .iter()
        .flat_map(|(_, p)| p.iter().filter_map(|x| x.1))
        .fold(0.0, f64::max);
    let turns = all
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .fold(1.0, f64::max);
    if all.is_empty() || ttft_max <= 0.0 {
        return;
    }
    let (w, top, low, m) = (640.0, 200.0, 110.0, 48.0);
    let h = top + low + 28.0;
    let sx = |t: f64| m + (t - 1.0) / (turns - 1.0).max(1.0) * (w - 2.0 * m);
    let sy = |v: f64| top - 8.0 - v / ttft_max * (top - 32.0);
    let base = top + low;
    let sh = |r: f64| base - r.clamp(0.0, 1.0) * (low - 16.0);
    let _ = writeln!(
        o,
        "<svg class=\"turn-chart\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"median TTFT and cache hit by turn\">"
    );
    let _ = writeln!(
        o,
        "<line x1=\"{m}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#888\"/><line x1=\"{m}\" y1=\"{base}\" x2=\"{1}\" y2=\"{base}\" stroke=\"#888\"/><line x1=\"{m}\" y1=\"24\" x2=\"{m}\" y2=\"{base}\" stroke=\"#888\"/>",
        top - 8.0,
        w - m
    );
    for (i, (c, pts)) in all.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let line = |pick: &dyn Fn(&Point) -> Option<(f64, f64)>| {
            pts.iter()
                .filter_map(pick)
                .map(|(x, y)| format!("{x:.1},{y:.1}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let ttft = line(&|p| p.1.map(|v| (sx(p.0), sy(v))));
        let hit = line(&|p| p.2.map(|r| (sx(p.0), sh(r))));
        let _ = writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{ttft}\"/><polyline fill=\"none\" stroke=\"{colour}\" stroke-dasharray=\"4 3\" points=\"{hit}\"/><text x=\"{:.1}\" y=\"14\" fill=\"{colour}\" font-size=\"11\">{} sessions</text>",
            m + 90.0 * i as f64,
            c.concurrency
        );
    }
    let _ = writeln!(
        o,
        "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">0</text><text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">100%</text><text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">0%</text>",
        m - 4.0,
        sy(ttft_max) + 3.0,
        escape(&crate::numbers::fixed(ttft_max, 0)),
        m - 4.0,
        sy(0.0) + 3.0,
        m - 4.0,
        sh(1.0) + 3.0,
        m - 4.0,
        base + 3.0
    );
    let _ = writeln!(
        o,
        "<text x=\"{m}\" y=\"{}\" font-size=\"11\">median TTFT, ms (solid); cache hit of the history (dashed, below)</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">turn (1 to {turns})</text>\n</svg>",
        top + 8.0,
        w / 2.0,
        h - 4.0
    );
}
