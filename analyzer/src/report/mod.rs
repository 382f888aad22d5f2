//! The report of a [`Scoring`], in every format, through this one door: Markdown in the
//! reference report's layout, CSV with one row per cell at full precision, the JSON
//! document itself, and one self-contained HTML page (with the cells' traces when given),
//! or a page comparing runs. `model` holds the format-free sections (header, matrix,
//! tables, notes); `markdown`, `csv` and `html` each read the model and never each other;
//! `site` lays out a fleet's website from the HTML page's parts.

mod csv;
mod html;
mod markdown;
mod model;
pub mod site;

use std::collections::BTreeMap;

use tokentrace_schemas::layout::CellKey;

use crate::contract::Scoring;
use crate::trace::CellTrace;

pub use model::model_display_name;

/// Output formats of `report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
    Csv,
    /// One self-contained page (no network requests).
    Html,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "md" | "markdown" => Some(Format::Markdown),
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            "html" => Some(Format::Html),
            _ => None,
        }
    }
}

/// Renders `s` in `format` (an HTML page without drill-down traces: see [`html_page`]).
pub fn render(s: &Scoring, format: Format) -> String {
    match format {
        Format::Markdown => markdown::markdown(s),
        Format::Json => json(s),
        Format::Csv => csv::csv(s),
        Format::Html => html::html(s, &BTreeMap::new()),
    }
}

/// The scoring as pretty JSON, newline-terminated.
pub fn json(s: &Scoring) -> String {
    // Serializing plain data with string keys cannot fail; fall back to an error object
    // rather than panic if it ever did.
    let mut out = serde_json::to_string_pretty(s)
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    out.push('\n');
    out
}

/// The HTML page of `s` with each cell's drill-down trace (`trace::token_timelines`).
pub fn html_page(s: &Scoring, traces: &BTreeMap<CellKey, CellTrace>) -> String {
    html::html(s, traces)
}

/// One HTML page comparing runs side by side (each with its label), the ratio of each
/// figure to the first run's as a heat map.
pub fn comparison(sides: &[(String, Scoring)]) -> String {
    html::comparison(sides)
}
