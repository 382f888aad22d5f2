//! The report in Markdown, in the reference report's layout: header, Prefill, Sustained
//! decode matrix, legend, Burst / E2E, Request rate with its knee, Replay, All
//! measurements, GPU power, notes, footer.

use std::fmt::Write as _;

use crate::contract::{Scoring, Verdict};
use crate::numbers::{context_label, ms_whole, rate, thousands};

use super::model::*;

/// The report in Markdown, in the reference report's layout.
pub(super) fn markdown(s: &Scoring) -> String {
    let mut o = String::new();
    let (contexts, levels) = matrix_axes(s);
    let prefill = prefill_cells(s);
    let h = header(s);
    let _ = writeln!(o, "# Speed test matrix\n");
    let _ = writeln!(o, "**{}** on {}\n", h.model, h.hardware);
    let _ = writeln!(o, "{}\n", h.subtitle.join(" · "));
    if h.nothing_measured {
        let _ = writeln!(
            o,
            "Nothing was measured: no cell of this run was recorded (the Notes say why).\n"
        );
    }
    for (i, (name, facts)) in h.sections.iter().enumerate() {
        let _ = writeln!(o, "{}## {name}\n", if i > 0 { "\n" } else { "" });
        for (k, v) in facts {
            let _ = writeln!(o, "- {k}: {v}");
        }
    }
    if let Some(cmd) = &h.launch_command {
        let _ = writeln!(o, "\n## Launch command\n\n```\n{cmd}\n```");
    }

    if !prefill.is_empty() {
        let _ = writeln!(o, "\n## Prefill\n\nprompt tok/s by context length\n");
        let _ = writeln!(
            o,
            "| Context | Prompt tok/s | TTFT | Status |\n|---|---|---|---|"
        );
        for c in &prefill {
            let f = shown(c);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                context_label(c.context),
                opt(f.and_then(|f| f.prompt_tok_s), |v| rate(v, true)),
                opt(f.and_then(|f| f.ttft_ms.median), ms_whole),
                c.status_label()
            );
        }
        if prefill
            .iter()
            .any(|c| c.verdict == Some(Verdict::PrefillCached))
        {
            let _ = writeln!(
                o,
                "\nServed from cache: the server answered the prefill scout from its prompt cache, so prefill was not measured."
            );
        }
    }

    if !contexts.is_empty() {
        let _ = writeln!(
            o,
            "\n## Sustained decode\n\ntotal tok/s · rows are context length, columns are simultaneous requests\n"
        );
        let _ = write!(o, "| Context |");
        for n in &levels {
            let _ = write!(o, " {n} |");
        }
        let _ = writeln!(o, "\n|---|{}", "---|".repeat(levels.len()));
        for ctx in &contexts {
            let _ = write!(o, "| {} |", context_label(*ctx));
            for n in &levels {
                let _ = write!(o, " {} |", matrix_text(decode_cell(s, *ctx, *n)));
            }
            let _ = writeln!(o);
        }
        let footer = matrix_footer(s);
        if !footer.is_empty() {
            let _ = writeln!(o, "\n{}", footer.join("\n"));
        }
    }

    if let Some(t) = burst_table(s) {
        let _ = writeln!(
            o,
            "\n## Burst / E2E\n\nexactly {} requests per cell at the given concurrency, each run to completion · latencies in ms as p50 / p90 / p99 / max\n",
            s.run
                .burst_requests
                .map_or_else(|| DASH.to_string(), |n| thousands(i64::from(n)))
        );
        table(&t, &mut o);
    }
    let curves = rate_curves(s);
    if !curves.is_empty() {
        let _ = writeln!(o, "\n## Request rate\n\n{}\n", rate_intro(s));
        for c in &curves {
            let _ = writeln!(o, "### {}\n", context_label(c.context));
            table(&c.table, &mut o);
            let _ = writeln!(o, "\n{}\n", c.knee);
        }
    }

    if let Some(t) = replay_table(s) {
        let _ = writeln!(o, "\n## Replay\n\n{}\n", replay_intro(s).join("\n\n"));
        table(&t, &mut o);
    }

    conversations(s, &mut o);

    let _ = writeln!(o, "\n## All measurements\n");
    let _ = writeln!(
        o,
        "Latencies are medians. Total tok/s is output across all simultaneous requests. \
         Most sends in 10 ms is a closed-loop cell's burstiness: streams that finish in one \
         server step are sent again together and wait in the server's socket queue (the \
         index of dispersion is in the JSON and CSV: 1 for Poisson arrivals).\n"
    );
    let (headers, rows) = measurements(s);
    let _ = writeln!(o, "| {} |", headers.join(" | "));
    let _ = writeln!(o, "|{}", "---|".repeat(headers.len()));
    for row in &rows {
        let cells: Vec<&str> = row.iter().map(|(text, _)| text.as_str()).collect();
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }

    if !contexts.is_empty() {
        let _ = writeln!(o, "\n## GPU power\n");
        match power_rows(s) {
            Ok(rows) => {
                let _ = writeln!(o, "{POWER_INTRO}\n");
                let _ = write!(o, "| Context |");
                for n in &levels {
                    let _ = write!(o, " {n} |");
                }
                let _ = writeln!(o, "\n|---|{}", "---|".repeat(levels.len()));
                for (ctx, cells) in rows {
                    let _ = writeln!(o, "| {} | {} |", context_label(ctx), cells.join(" | "));
                }
            }
            Err(line) => {
                let _ = writeln!(o, "{line}");
            }
        }
    }

    let notes = notes(s);
    if !notes.is_empty() {
        let _ = writeln!(o, "\n## Notes\n");
        for n in notes {
            let _ = writeln!(o, "- {n}");
        }
    }
    let _ = writeln!(o, "\n---\n\n{}", scored_by(s));
    o
}

/// A format-free table as a Markdown table.
/// The Conversations section: its introduction, the sweep table and the table by turn
/// (nothing without conversation cells).
fn conversations(s: &Scoring, o: &mut String) {
    let Some(t) = conversation_table(s) else {
        return;
    };
    let intro = conversation_intro(s).join("\n\n");
    let _ = writeln!(o, "\n## Conversations\n\n{intro}\n");
    table(&t, o);
    if let Some(turns) = turn_table(s) {
        let _ = writeln!(o, "\n### By turn\n");
        table(&turns, o);
    }
}

fn table(t: &Table, o: &mut String) {
    let _ = writeln!(o, "| {} |", t.headers.join(" | "));
    let _ = writeln!(o, "|{}", "---|".repeat(t.headers.len()));
    for row in &t.rows {
        let _ = writeln!(o, "| {} |", row.join(" | "));
    }
}
