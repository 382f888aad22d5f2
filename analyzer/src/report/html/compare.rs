//! Runs side by side on one page: each run's matrix and, against a baseline (the first
//! run, or each run's predecessor), a ratio heat map and the verdicts that changed.

use std::fmt::Write as _;

use super::matrix::{heat_table, matrix_head, row_head};
use super::{STYLE, data_number, escape};
use crate::contract::{CellScore, Scoring};
use crate::numbers::context_label;
use crate::report::model::{decode_cell, header, matrix_axes, matrix_footer, scored_by};

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
pub(in crate::report) enum Baseline {
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
pub(in crate::report) fn comparison(sides: &[(String, Scoring)]) -> String {
    let mut o = String::new();
    super::head(&mut o, "Speed test comparison", &[&STYLE]);
    let _ = writeln!(o, "<h1>Speed test comparison</h1>");
    comparison_body(&mut o, sides, Baseline::First);
    let _ = writeln!(o, "</body>\n</html>");
    o
}

/// The runs' list, the ratio heat maps against `baseline`, each run's matrix and the
/// footer naming who scored each: a comparison page's body after its heading.
pub(in crate::report) fn comparison_body(
    o: &mut String,
    sides: &[(String, Scoring)],
    baseline: Baseline,
) {
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

/// One cell of a ratio heat map: B's total tok/s and median TTFT over A's, as
/// [`crate::diff::cell_ratio`] has them, coloured and labelled.
fn ratio_cell(o: &mut String, (ctx, n): (u32, u32), a: &CellScore, b: &CellScore) {
    let r = crate::diff::cell_ratio(a, b);
    let changed = r.changed();
    let style = r
        .tok_s
        .map(|x| format!(" style=\"background-color:{}\"", ratio_colour(x, true)))
        .unwrap_or_default();
    let _ = write!(
        o,
        "<td class=\"ratio{}\" data-context=\"{ctx}\" data-concurrency=\"{n}\" \
         data-ratio-tok-s=\"{}\" data-ratio-ttft=\"{}\"{style}>\
         <span class=\"rate\">{}</span><span class=\"ttft\">{}</span>",
        if changed { " flagged" } else { "" },
        data_number(r.tok_s),
        data_number(r.ttft),
        r.tok_s
            .map_or("—".to_string(), |x| format!("×{x:.2} tok/s")),
        r.ttft.map_or("—".to_string(), |x| format!("×{x:.2} TTFT")),
    );
    if changed {
        let _ = write!(
            o,
            "<span class=\"badge\">{} → {}</span>",
            escape(&r.status_a),
            escape(&r.status_b)
        );
    }
    let _ = write!(o, "</td>");
}

#[cfg(test)]
mod tests {
    use super::*;

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
