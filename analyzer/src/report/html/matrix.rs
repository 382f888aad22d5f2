//! The decode matrix as a heat map: the page's own (its cells open drill-downs) and each
//! run's on a comparison page.

use std::fmt::Write as _;

use tokentrace_schemas::layout::Phase;

use super::{badge, data_number, escape, heat};
use crate::contract::{Scoring, Verdict};
use crate::numbers::context_label;
use crate::report::model::{decode_cell, matrix_axes, matrix_parts, matrix_text, shown};

/// A matrix table's column heads (after the table's opening and its "Context" head),
/// up to its body.
pub(super) fn matrix_head(o: &mut String, levels: &[u32]) {
    for n in levels {
        let _ = write!(o, "<th>{n}</th>");
    }
    let _ = writeln!(o, "</tr></thead>\n<tbody>");
}

/// A matrix row's opening and its context head.
pub(super) fn row_head(o: &mut String, context: u32) {
    let _ = write!(
        o,
        "<tr><th scope=\"row\">{}</th>",
        escape(&context_label(context))
    );
}

/// The decode matrix as a heat map; `id` names the page's main matrix, whose cells open
/// drill-downs.
pub(super) fn heat_table(o: &mut String, s: &Scoring, id: Option<&str>) {
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
