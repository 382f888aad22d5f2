//! Compares two scorings cell by cell (two rule sets over one run, or two runs): changed
//! verdicts, the relative change of every figure, and cells present in one only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tokentrace_schemas::layout::CellKey;

use crate::contract::{CellScore, FORMAT, FORMAT_VERSION, Figures, Scoring};
use crate::error::{Error, Result};
use crate::figures::FIGURES;
use crate::numbers::context_label;

/// Relative changes this small are rounding, not change.
const FLOAT_NOISE: f64 = 1e-12;

/// A figure that differs between the two sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FigureChange {
    pub figure: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// (b − a) / |a|; null when either side is missing or a is 0.
    pub relative: Option<f64>,
}

/// One cell present on both sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellDiff {
    pub cell: CellKey,
    pub status_a: String,
    pub status_b: String,
    pub figures: Vec<FigureChange>,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub a: String,
    pub b: String,
    /// Cells whose status (verdict, or state when unscored) differs.
    pub verdicts_changed: Vec<CellDiff>,
    /// Cells whose status is the same but a figure differs.
    pub figures_changed: Vec<CellDiff>,
    pub only_in_a: Vec<CellKey>,
    pub only_in_b: Vec<CellKey>,
    /// Replay cells of one side compared with the cell of the other that they replay
    /// (its `run.replay.sources[].source_cell`): (the source cell, the replay cell). The
    /// comparison lists them under the source cell's key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replayed: Vec<(CellKey, CellKey)>,
}

impl Diff {
    /// No difference at all.
    pub fn is_empty(&self) -> bool {
        self.verdicts_changed.is_empty()
            && self.figures_changed.is_empty()
            && self.only_in_a.is_empty()
            && self.only_in_b.is_empty()
    }
}

/// Reads a scoring written by `rescore` (or `report --format json`).
pub fn read_scoring(path: &Path) -> Result<Scoring> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |message: String| Error::Scoring {
        path: path.to_path_buf(),
        message,
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(bad(format!("no \"format\": \"{FORMAT}\"")));
    }
    match v.get("format_version").and_then(|f| f.as_u64()) {
        Some(n) if n == u64::from(FORMAT_VERSION) => {}
        Some(n) => {
            return Err(bad(format!(
                "format_version {n}; this build reads {FORMAT_VERSION}"
            )));
        }
        None => return Err(bad("no format_version".to_string())),
    }
    serde_json::from_value(v).map_err(|e| bad(e.to_string()))
}

fn label(s: &Scoring) -> String {
    format!("run {} scored under {}", s.run.run_id, s.rules.id())
}

/// One decode cell of two runs as a comparison's heat map shows it: B's total tok/s and
/// median TTFT over A's, from the figures each verdict shows (none where a verdict
/// discards them, or a side is not positive), and each side's status.
#[derive(Debug, Clone, PartialEq)]
pub struct CellRatio {
    pub tok_s: Option<f64>,
    pub ttft: Option<f64>,
    pub status_a: String,
    pub status_b: String,
}

impl CellRatio {
    /// Whether the verdict (or state) changed.
    pub fn changed(&self) -> bool {
        self.status_a != self.status_b
    }
}

/// The ratio of cell `b` to cell `a` (see [`CellRatio`]).
pub fn cell_ratio(a: &CellScore, b: &CellScore) -> CellRatio {
    let pick = |c: &CellScore, f: fn(&Figures) -> Option<f64>| {
        crate::figures::shown(c)
            .and_then(f)
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let over = |f: fn(&Figures) -> Option<f64>| pick(b, f).zip(pick(a, f)).map(|(y, x)| y / x);
    CellRatio {
        tok_s: over(|f| f.total_tok_s),
        ttft: over(|f| f.ttft_ms.median),
        status_a: a.status_label(),
        status_b: b.status_label(),
    }
}

/// Each of `values` (a series in time order) over the last earlier value present and
/// positive: `None` for the first, for a missing value, and where no earlier one is.
pub fn over_previous(values: &[Option<f64>]) -> Vec<Option<f64>> {
    let mut before: Option<f64> = None;
    values
        .iter()
        .map(|&v| {
            let change = v.zip(before).filter(|(_, b)| *b > 0.0).map(|(v, b)| v / b);
            if v.is_some() {
                before = v;
            }
            change
        })
        .collect()
}

/// Compares `a` with `b`; `min_relative` hides figure changes smaller than it.
pub fn diff(a: &Scoring, b: &Scoring, min_relative: f64) -> Diff {
    let cells = |s: &Scoring| -> BTreeMap<CellKey, CellScore> {
        s.cells.iter().map(|c| (c.key(), c.clone())).collect()
    };
    let (mut ca, mut cb) = (cells(a), cells(b));
    // A replay of the other side's cell stands in for that cell.
    let mut replayed = pair_replays(&mut cb, &ca, b);
    replayed.extend(pair_replays(&mut ca, &cb, a));
    replayed.sort();
    let mut d = Diff {
        replayed,
        a: label(a),
        b: label(b),
        verdicts_changed: Vec::new(),
        figures_changed: Vec::new(),
        only_in_a: ca.keys().filter(|k| !cb.contains_key(k)).copied().collect(),
        only_in_b: cb.keys().filter(|k| !ca.contains_key(k)).copied().collect(),
    };
    for (key, x) in &ca {
        let Some(y) = cb.get(key) else { continue };
        let default = Figures::default();
        let (fx, fy) = (
            x.figures.as_ref().unwrap_or(&default),
            y.figures.as_ref().unwrap_or(&default),
        );
        let figures: Vec<FigureChange> = FIGURES
            .iter()
            .filter(|f| f.compared)
            .filter_map(|f| {
                let (va, vb) = (f.value(fx).number(), f.value(fy).number());
                if va == vb {
                    return None;
                }
                let relative = va
                    .zip(vb)
                    .filter(|(va, _)| *va != 0.0)
                    .map(|(va, vb)| (vb - va) / va.abs());
                // A scoring read back from JSON can differ from the same figure computed
                // afresh in its last bits (serde_json's fast float parser); a change
                // below 1e-12 is no change.
                if relative.is_some_and(|r| r.abs() < min_relative.max(FLOAT_NOISE)) {
                    return None;
                }
                Some(FigureChange {
                    figure: f.name.to_string(),
                    a: va,
                    b: vb,
                    relative,
                })
            })
            .collect();
        let entry = CellDiff {
            cell: *key,
            status_a: status(x),
            status_b: status(y),
            figures,
        };
        if entry.status_a != entry.status_b {
            d.verdicts_changed.push(entry);
        } else if !entry.figures.is_empty() {
            d.figures_changed.push(entry);
        }
    }
    d
}

/// Rekeys each replay cell of `side` (scored in `scoring`) whose source is a cell of
/// `other` that `side` lacks, under that cell's key; returns the pairs (source, replay).
fn pair_replays(
    side: &mut BTreeMap<CellKey, CellScore>,
    other: &BTreeMap<CellKey, CellScore>,
    scoring: &Scoring,
) -> Vec<(CellKey, CellKey)> {
    let Some(config) = &scoring.run.replay else {
        return Vec::new();
    };
    let mut pairs = Vec::new();
    for src in &config.sources {
        let Some(name) = &src.source_cell else {
            continue;
        };
        let Some(source) = other.keys().find(|k| k.to_string() == *name).copied() else {
            continue;
        };
        let replay = side.keys().find(|k| k.replay == Some(src.index)).copied();
        if let Some(replay) = replay
            && !side.contains_key(&source)
            && let Some(cell) = side.remove(&replay)
        {
            side.insert(source, cell);
            pairs.push((source, replay));
        }
    }
    pairs
}

/// A cell's status for the comparison: its verdict (or state), and for a rate cell
/// whether it met the SLO, so that a rescore under another SLO shows what it moved.
fn status(c: &crate::contract::CellScore) -> String {
    match c.figures.as_ref().and_then(|f| f.slo_met) {
        Some(met) => format!(
            "{} · SLO {}",
            c.status_label(),
            if met { "met" } else { "missed" }
        ),
        None => c.status_label(),
    }
}

fn cell_name(k: &CellKey) -> String {
    if let Some(i) = k.replay {
        let context = match k.context {
            0 => "mixed".to_string(),
            c => context_label(c),
        };
        return format!("{} {i} ({context})", k.phase);
    }
    match k.rate {
        Some(rate) => format!("{} {} at {rate} req/s", k.phase, context_label(k.context)),
        None => format!(
            "{} {} × {}",
            k.phase,
            context_label(k.context),
            k.concurrency
        ),
    }
}

fn value(v: Option<f64>) -> String {
    v.map(|x| {
        format!("{x:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    })
    .unwrap_or_else(|| "—".to_string())
}

/// The comparison as Markdown.
pub fn markdown(d: &Diff) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Diff\n\n- A: {}\n- B: {}\n", d.a, d.b);
    if !d.replayed.is_empty() {
        let pairs: Vec<String> = d
            .replayed
            .iter()
            .map(|(source, replay)| format!("{} ⇄ {}", cell_name(source), cell_name(replay)))
            .collect();
        let _ = writeln!(
            o,
            "Replay cells compared with the cells they replay: {}.\n",
            pairs.join(", ")
        );
    }
    if d.is_empty() {
        let _ = writeln!(o, "No differences.");
        return o;
    }
    let _ = writeln!(o, "## Verdicts changed ({})\n", d.verdicts_changed.len());
    if !d.verdicts_changed.is_empty() {
        let _ = writeln!(o, "| Cell | A | B |\n|---|---|---|");
        for c in &d.verdicts_changed {
            let _ = writeln!(
                o,
                "| {} | {} | {} |",
                cell_name(&c.cell),
                c.status_a,
                c.status_b
            );
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "## Figures changed\n");
    let rows: Vec<&CellDiff> = d
        .verdicts_changed
        .iter()
        .chain(&d.figures_changed)
        .filter(|c| !c.figures.is_empty())
        .collect();
    if rows.is_empty() {
        let _ = writeln!(o, "None.\n");
    } else {
        let _ = writeln!(
            o,
            "| Cell | Figure | A | B | Change |\n|---|---|---|---|---|"
        );
        let mut sorted = rows;
        sorted.sort_by_key(|c| c.cell);
        for c in sorted {
            for f in &c.figures {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} |",
                    cell_name(&c.cell),
                    f.figure,
                    value(f.a),
                    value(f.b),
                    f.relative
                        .map(|r| format!("{:+.2}%", r * 100.0))
                        .unwrap_or_else(|| "—".to_string())
                );
            }
        }
        let _ = writeln!(o);
    }
    for (title, keys) in [("Only in A", &d.only_in_a), ("Only in B", &d.only_in_b)] {
        if !keys.is_empty() {
            let _ = writeln!(o, "## {title}\n");
            for k in keys {
                let _ = writeln!(o, "- {}", cell_name(k));
            }
            let _ = writeln!(o);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::over_previous;

    #[test]
    fn a_change_is_over_the_last_earlier_value_present_and_positive() {
        let got = over_previous(&[None, Some(100.0), None, Some(150.0), Some(0.0), Some(30.0)]);
        // The first value has nothing before it; a gap is skipped; 0 is no base.
        assert_eq!(got, [None, None, None, Some(1.5), Some(0.0), None]);
    }
}
