//! The pages of a fleet's static website (`tokentrace site`): the index (a sortable,
//! filterable row per run), a run's page (its report under a navigation bar) and a
//! group's page (one model on one hardware over time), from rows kept between builds.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use tokentrace_schemas::layout::Phase;

use super::html::{
    Baseline, SCRIPT, STYLE, comparison_body, data_number, escape, head as html_head,
};
use super::model::{header, shown};
use crate::contract::{Scoring, Verdict};
use crate::numbers::{context_label, rate};

/// The verdicts in the order the index counts them.
const VERDICTS: [Verdict; 6] = [
    Verdict::Valid,
    Verdict::RequestsQueued,
    Verdict::Looped,
    Verdict::PrefillCached,
    Verdict::BadOutput,
    Verdict::Error,
];

/// Most runs a group's page draws matrices and ratio maps of (the latest); its table
/// over time lists them all.
pub const GROUP_MATRICES: usize = 12;

/// One run as the index lists it: its facts and headline figures, kept in the site's
/// state so an unchanged run is listed without being scored again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The run's page is `runs/<slug>.html`, its scoring `runs/<slug>.json`.
    pub slug: String,
    pub run_id: String,
    /// The model's display name.
    pub model: String,
    /// The hardware as the report heads it ("4× NVIDIA H200", or the user's text).
    pub hardware: String,
    /// The GPU the recorder found (else the hardware text), for the GPU filter.
    pub gpu: String,
    pub engine: String,
    pub engine_version: String,
    pub started_utc: String,
    pub rules: String,
    /// The best total tok/s of a Valid decode cell, and the cell ("8K × 64").
    pub peak_decode_tok_s: Option<f64>,
    pub peak_at: Option<String>,
    /// The prompt tok/s of the prefill cell at the largest context, and that context.
    pub prefill_tok_s: Option<f64>,
    pub prefill_context: Option<u32>,
    /// Cells per verdict (valid, requests queued, looped, prefill cached, bad output,
    /// error, in that order), and the cells not scored.
    pub verdicts: Vec<usize>,
    pub unscored: usize,
    /// The tool whose figures an imported run holds ("llm-inference-bench 0.4.18").
    pub imported: Option<String>,
    /// The group (model × hardware) the run belongs to.
    pub group: Group,
    /// What `--public` dropped from the run, one line per place.
    #[serde(default)]
    pub dropped: Vec<String>,
}

/// A model on one kind of hardware: the runs a group page compares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Group {
    pub model: String,
    pub hardware: String,
    /// Its page is `groups/<slug>.html`.
    pub slug: String,
}

impl Group {
    pub fn title(&self) -> String {
        format!("{} on {}", self.model, self.hardware)
    }
}

/// A short stable name for a text: the first 16 hex digits of its SHA-256.
pub fn short_hash(text: &str) -> String {
    let mut hex = tokentrace_schemas::digest::Sha256::of_bytes(text.as_bytes()).to_string();
    hex.truncate(16);
    hex
}

/// `text` as a file name's readable part: lower-case letters, digits and hyphens, at
/// most 40 characters.
pub fn slug_part(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    out.trim_end_matches('-').to_string()
}

/// The group of a scoring: its model's display name and its hardware.
pub fn group_of(s: &Scoring) -> Group {
    let h = header(s);
    let slug = format!(
        "{}-{}",
        slug_part(&format!("{} {}", h.model, h.hardware)),
        short_hash(&format!("{}\n{}", h.model, h.hardware))
    );
    Group {
        model: h.model,
        hardware: h.hardware,
        slug,
    }
}

/// The index's row of scoring `s`, whose page is `runs/<slug>.html`.
pub fn run_row(s: &Scoring, slug: &str, dropped: Vec<String>) -> RunRow {
    let h = header(s);
    let found = |k: &str| tokentrace_schemas::manifest::fact(&s.run.facts, k);
    let peak = s
        .cells
        .iter()
        .filter(|c| c.phase == Phase::Decode && c.verdict == Some(Verdict::Valid))
        .filter_map(|c| Some((c.figures.as_ref()?.total_tok_s?, c)))
        .filter(|(v, _)| v.is_finite())
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let prefill = s
        .cells
        .iter()
        .filter(|c| c.phase == Phase::Prefill)
        .max_by_key(|c| c.context);
    RunRow {
        slug: slug.to_string(),
        run_id: s.run.run_id.clone(),
        model: h.model.clone(),
        hardware: h.hardware.clone(),
        gpu: found("gpu.name").map_or_else(|| h.hardware.clone(), str::to_string),
        engine: s
            .run
            .engine
            .clone()
            .unwrap_or_else(|| "unknown".to_string()),
        engine_version: s.run.engine_version.clone().unwrap_or_default(),
        // An imported run has no recording's clock: when its tool saved the file.
        started_utc: match &s.run.imported {
            Some(i) if s.run.started_utc.is_empty() => i.saved_at.clone(),
            _ => s.run.started_utc.clone(),
        },
        rules: s.rules.id(),
        peak_decode_tok_s: peak.map(|(v, _)| v),
        peak_at: peak.map(|(_, c)| format!("{} × {}", context_label(c.context), c.concurrency)),
        prefill_tok_s: prefill.and_then(|c| shown(c)?.prompt_tok_s),
        prefill_context: prefill.map(|c| c.context),
        verdicts: VERDICTS
            .iter()
            .map(|v| s.cells.iter().filter(|c| c.verdict == Some(*v)).count())
            .collect(),
        unscored: s.cells.iter().filter(|c| c.verdict.is_none()).count(),
        imported: s.run.imported.as_ref().map(|i| i.source()),
        group: group_of(s),
        dropped,
    }
}

impl RunRow {
    /// "12 valid · 2 requests queued · 1 not scored".
    pub fn verdict_text(&self) -> String {
        let mut parts: Vec<String> = VERDICTS
            .iter()
            .zip(&self.verdicts)
            .filter(|(_, n)| **n > 0)
            .map(|(v, n)| format!("{n} {}", v.label().to_lowercase()))
            .collect();
        if self.unscored > 0 {
            parts.push(format!("{} not scored", self.unscored));
        }
        if parts.is_empty() {
            "no cells".to_string()
        } else {
            parts.join(" · ")
        }
    }

    /// The date and time it started, to the minute ("2026-12-06 09:05"); an imported
    /// run's is when its tool saved the file, in that box's local time ("… local").
    pub fn date(&self) -> String {
        let shown = self
            .started_utc
            .chars()
            .take(16)
            .collect::<String>()
            .replace('T', " ");
        if self.imported.is_some() {
            format!("{shown} local")
        } else {
            shown
        }
    }

    /// How a comparison names the run: engine, version and date.
    pub fn label(&self) -> String {
        format!("{} {} · {}", self.engine, self.engine_version, self.date()).replace("  ", " ")
    }

    /// Where its figures came from.
    pub fn figures_from(&self) -> String {
        match &self.imported {
            Some(tool) => format!("imported: {tool}"),
            None => "tokentrace".to_string(),
        }
    }
}

/// What every page of a site says about how it was made.
#[derive(Debug, Clone)]
pub struct Banner {
    /// The rule set every run was scored under.
    pub rules: String,
    /// Set when `--rules` named it (the runs were re-scored for the site).
    pub rescored: bool,
    /// Set with `--public`.
    pub public: bool,
}

impl Banner {
    pub fn text(&self) -> String {
        let mut t = if self.rescored {
            format!(
                "Every recorded run re-scored under rule set {} for this site",
                self.rules
            )
        } else {
            format!("Every recorded run scored under rule set {}", self.rules)
        };
        t.push_str(" (imported runs keep the figures their tool computed)");
        if self.public {
            t.push_str(" · public: host names, IP addresses and paths dropped");
        }
        t
    }
}

/// The index's and group pages' tables (text to the left, numbers to the right) and
/// filters.
const INDEX_STYLE: &str = include_str!("../../assets/site/site.css");

const NAV_STYLE: &str = "background:#f3f4f6;border:1px solid #e5e7eb;padding:.4rem .75rem;margin:0 0 1rem;font-size:13px";

/// The navigation bar of a run's page: back to the index and the run's group, its
/// scoring as JSON, how the site scored it and what `--public` dropped. One element,
/// so that the page is the run's report with this bar inserted.
fn run_nav(row: &RunRow, banner: &Banner) -> String {
    let mut o = format!(
        "<nav class=\"site\" style=\"{NAV_STYLE}\"><a href=\"../index.html\">All runs</a> · \
         <a href=\"../groups/{}.html\">{}</a> · <a href=\"{}.json\">Scoring (JSON)</a> · {}",
        escape(&row.group.slug),
        escape(&row.group.title()),
        escape(&row.slug),
        escape(&banner.text())
    );
    if let Some(tool) = &row.imported {
        let _ = write!(o, " · imported from {}", escape(tool));
    }
    dropped_list(&mut o, &row.dropped);
    o.push_str("</nav>\n");
    o
}

fn dropped_list(o: &mut String, dropped: &[String]) {
    if dropped.is_empty() {
        return;
    }
    let _ = write!(
        o,
        "<details><summary>Dropped for the public: {} places</summary><ul>",
        dropped.len()
    );
    for d in dropped {
        let _ = write!(o, "<li>{}</li>", escape(d));
    }
    o.push_str("</ul></details>");
}

/// A run's page: its report (`report --format html`) with the navigation bar as the
/// body's first element.
pub fn run_page(report: &str, row: &RunRow, banner: &Banner) -> String {
    const BODY: &str = "<body>\n";
    let nav = run_nav(row, banner);
    match report.find(BODY) {
        Some(at) => {
            let at = at + BODY.len();
            let mut o = String::with_capacity(report.len() + nav.len());
            o.push_str(&report[..at]);
            o.push_str(&nav);
            o.push_str(&report[at..]);
            o
        }
        None => format!("{nav}{report}"),
    }
}

fn head(o: &mut String, title: &str) {
    html_head(o, title, &[&STYLE, &INDEX_STYLE]);
}

/// A number cell of a sortable table: its value to sort by, its text.
fn number_cell(v: Option<f64>, text: &str) -> String {
    format!("<td data-sort=\"{}\">{}</td>", data_number(v), escape(text))
}

fn peak_text(row: &RunRow) -> String {
    match (row.peak_decode_tok_s, &row.peak_at) {
        (Some(v), Some(at)) => format!("{} at {at}", rate(v, false)),
        _ => "—".to_string(),
    }
}

fn prefill_text(row: &RunRow) -> String {
    match (row.prefill_tok_s, row.prefill_context) {
        (Some(v), Some(c)) => format!("{} at {}", rate(v, true), context_label(c)),
        (None, Some(c)) => format!("— at {}", context_label(c)),
        _ => "—".to_string(),
    }
}

/// Shows only the rows of `#runs` whose `data-model`, `data-gpu` and `data-engine`
/// match the filters' choices, and how many that is.
const FILTER: &str = include_str!("../../assets/site/filter.js");

/// The index: the groups, then one row per run (sortable by any column, filterable by
/// model, GPU and engine), ordered by group, then date.
pub fn index_page(title: &str, rows: &[&RunRow], banner: &Banner) -> String {
    let mut o = String::new();
    head(&mut o, title);
    let mut groups: Vec<&Group> = rows
        .iter()
        .map(|r| &r.group)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // As a reader looks for them: by title, whatever the case.
    groups.sort_by_key(|g| (g.title().to_lowercase(), g.slug.clone()));
    let _ = writeln!(
        o,
        "<h1>{}</h1>\n<p class=\"sub\">{} runs · {} groups (a model on one kind of hardware) · {}</p>",
        escape(title),
        rows.len(),
        groups.len(),
        escape(&banner.text())
    );
    let _ = writeln!(o, "<h2>Groups</h2>\n<ul id=\"groups\">");
    for g in &groups {
        let members: Vec<&&RunRow> = rows.iter().filter(|r| &r.group == *g).collect();
        let engines: BTreeSet<String> = members
            .iter()
            .map(|r| {
                format!("{} {}", r.engine, r.engine_version)
                    .trim()
                    .to_string()
            })
            .collect();
        let _ = writeln!(
            o,
            "<li><a href=\"groups/{}.html\">{}</a>: {} run{} ({})</li>",
            escape(&g.slug),
            escape(&g.title()),
            members.len(),
            if members.len() == 1 { "" } else { "s" },
            escape(&engines.into_iter().collect::<Vec<_>>().join(", "))
        );
    }
    let _ = writeln!(o, "</ul>\n<h2>Runs</h2>\n<p class=\"filters\">");
    for (key, label, pick) in [
        (
            "model",
            "Model",
            (|r: &RunRow| r.model.clone()) as fn(&RunRow) -> String,
        ),
        ("gpu", "GPU", |r: &RunRow| r.gpu.clone()),
        ("engine", "Engine", |r: &RunRow| r.engine.clone()),
    ] {
        // An empty value would be "all"'s: such rows show under "all" only.
        let values: BTreeSet<String> = rows
            .iter()
            .map(|r| pick(r))
            .filter(|v| !v.is_empty())
            .collect();
        let _ = write!(
            o,
            "<label>{label} <select id=\"filter-{key}\" data-filter=\"{key}\"><option value=\"\">all</option>"
        );
        for v in values {
            // The choice's text at most 60 characters (a whole `nvidia-smi` line is a
            // hardware text too); its value whole.
            let mut shown: String = v.chars().take(60).collect();
            if shown.len() < v.len() {
                shown.push('…');
            }
            let _ = write!(
                o,
                "<option value=\"{}\">{}</option>",
                escape(&v),
                escape(&shown)
            );
        }
        let _ = writeln!(o, "</select></label>");
    }
    let _ = writeln!(
        o,
        "<span id=\"shown\">{0} of {0} runs shown</span></p>\n<p>Click a column to sort. \
         Peak decode is the best total tok/s of a Valid decode cell; prefill is the prompt \
         tok/s at the run's largest prefill context.</p>\n\
         <table class=\"sortable\" id=\"runs\">\n<thead><tr><th>Group</th><th>Model</th>\
         <th>Hardware</th><th>Engine</th><th>Version</th><th>Started</th><th>Rules</th>\
         <th>Peak decode tok/s</th><th>Prefill tok/s</th><th>Verdicts</th><th>Figures from</th>\
         </tr></thead>\n<tbody>",
        rows.len()
    );
    let mut ordered: Vec<&&RunRow> = rows.iter().collect();
    // In the groups' order (by title, whatever the case), then by date.
    ordered.sort_by_cached_key(|r| {
        (
            r.group.title().to_lowercase(),
            r.group.slug.clone(),
            r.started_utc.clone(),
            r.slug.clone(),
        )
    });
    for r in ordered {
        let _ = writeln!(
            o,
            "<tr data-model=\"{}\" data-gpu=\"{}\" data-engine=\"{}\" data-slug=\"{}\">\
             <td><a href=\"groups/{}.html\">{}</a></td><td><a href=\"runs/{}.html\">{}</a></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}{}\
             <td data-sort=\"{}\">{}</td><td>{}</td></tr>",
            escape(&r.model),
            escape(&r.gpu),
            escape(&r.engine),
            escape(&r.slug),
            escape(&r.group.slug),
            escape(&r.group.title()),
            escape(&r.slug),
            escape(&r.model),
            escape(&r.hardware),
            escape(&r.engine),
            escape(&r.engine_version),
            escape(&r.date()),
            escape(&r.rules),
            number_cell(r.peak_decode_tok_s, &peak_text(r)),
            number_cell(r.prefill_tok_s, &prefill_text(r)),
            r.verdicts.first().copied().unwrap_or_default(),
            escape(&r.verdict_text()),
            escape(&r.figures_from())
        );
    }
    let _ = writeln!(
        o,
        "</tbody>\n</table>\n<footer>Made by tokentrace site; every page works offline.</footer>\n\
         <script>{SCRIPT}</script>\n<script>{FILTER}</script>\n</body>\n</html>"
    );
    o
}

/// A group's page: its runs over time (every one, with the change of peak decode tok/s
/// from the run before), then the latest [`GROUP_MATRICES`] side by side with a ratio
/// heat map for each step. `rows` and `sides` are in time order, `sides` the latest.
pub fn group_page(
    group: &Group,
    rows: &[&RunRow],
    sides: &[(String, Scoring)],
    banner: &Banner,
) -> String {
    let mut o = String::new();
    let title = group.title();
    head(&mut o, &title);
    let _ = writeln!(
        o,
        "<nav class=\"site\" style=\"{NAV_STYLE}\"><a href=\"../index.html\">All runs</a> · {}</nav>\n\
         <h1>{}</h1>\n<p class=\"sub\">{} run{} over time</p>\n<h2>Over time</h2>\n\
         <table class=\"sortable\" id=\"over-time\">\n<thead><tr><th>Started</th>\
         <th>Run</th><th>Engine</th><th>Peak decode tok/s</th><th>Change</th>\
         <th>Prefill tok/s</th><th>Verdicts</th><th>Figures from</th></tr></thead>\n<tbody>",
        escape(&banner.text()),
        escape(&title),
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    let peaks: Vec<Option<f64>> = rows.iter().map(|r| r.peak_decode_tok_s).collect();
    for (r, change) in rows.iter().zip(crate::diff::over_previous(&peaks)) {
        let _ = writeln!(
            o,
            "<tr data-slug=\"{}\"><td>{}</td><td><a href=\"../runs/{}.html\">{}</a></td><td>{}</td>{}{}{}<td>{}</td><td>{}</td></tr>",
            escape(&r.slug),
            escape(&r.date()),
            escape(&r.slug),
            escape(&r.run_id),
            escape(&format!("{} {}", r.engine, r.engine_version)),
            number_cell(r.peak_decode_tok_s, &peak_text(r)),
            number_cell(
                change,
                &change.map_or("—".to_string(), |c| format!("×{c:.2}"))
            ),
            number_cell(r.prefill_tok_s, &prefill_text(r)),
            escape(&r.verdict_text()),
            escape(&r.figures_from())
        );
    }
    let _ = writeln!(o, "</tbody>\n</table>");
    if rows.len() > sides.len() {
        let _ = writeln!(
            o,
            "<p>The matrices below are the latest {} runs'; the table above lists all {}.</p>",
            sides.len(),
            rows.len()
        );
    }
    if sides.len() < 2 {
        let _ = writeln!(o, "<p>One run: nothing to compare it with yet.</p>");
    }
    comparison_body(&mut o, sides, Baseline::Previous);
    let _ = writeln!(o, "<script>{SCRIPT}</script>\n</body>\n</html>");
    o
}
