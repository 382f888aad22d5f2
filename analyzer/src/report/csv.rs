//! The report as CSV: one row per cell (run, rules, cell key, state, verdict), every
//! figure of the figure table at full precision, then the warnings' kinds.

use crate::contract::Scoring;
use crate::figures::FIGURES;

/// CSV columns before the figures (the figures follow in [`FIGURES`] order, then
/// `warnings`).
const CSV_LEADING: [&str; 9] = [
    "run_id",
    "rules",
    "phase",
    "context",
    "concurrency",
    "rate",
    "replay",
    "state",
    "verdict",
];

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The report as CSV: one row per cell, every figure at full precision.
pub(super) fn csv(s: &Scoring) -> String {
    let mut o = CSV_LEADING
        .iter()
        .copied()
        .chain(FIGURES.iter().map(|f| f.csv))
        .chain(["warnings"])
        .collect::<Vec<_>>()
        .join(",");
    o.push('\n');
    for c in &s.cells {
        let f = c.figures.as_ref();
        let verdict = c.verdict.map_or("", |v| v.as_str()).to_string();
        let warnings: Vec<&str> = c.warnings.iter().map(|w| w.kind()).collect();
        let mut fields = vec![
            s.run.run_id.clone(),
            s.rules.id(),
            c.phase.to_string(),
            c.context.to_string(),
            c.concurrency.to_string(),
            c.rate.map(|r| r.to_string()).unwrap_or_default(),
            c.replay.map(|i| i.to_string()).unwrap_or_default(),
            c.state.to_string(),
            verdict,
        ];
        fields.extend(
            FIGURES
                .iter()
                .map(|x| f.map(|f| x.value(f).csv()).unwrap_or_default()),
        );
        fields.push(warnings.join(";"));
        let row: Vec<String> = fields.iter().map(|x| csv_field(x)).collect();
        o.push_str(&row.join(","));
        o.push('\n');
    }
    o
}
