//! The figure table: every figure a cell reports, defined once — its name in diffs, its
//! CSV column, its column and number format in the Markdown report, and how it is read
//! from [`Figures`]. A new figure is a field in `Figures`, its computation, and a row here.

use tokentrace_schemas::layout::Phase;

use crate::contract::{CellScore, Figures, Verdict};
use crate::numbers::{fixed, ms_whole, rate, thousands};

/// What a report shows for a figure it does not have.
pub const DASH: &str = "—";

/// `v` as `f` writes it, or [`DASH`].
pub fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| DASH.to_string())
}

/// A cell's figures when its verdict lets them be shown.
pub fn shown(c: &CellScore) -> Option<&Figures> {
    c.figures
        .as_ref()
        .filter(|_| c.verdict.is_some_and(Verdict::shows_figures))
}

/// A decode matrix cell's parts when it shows figures: total tok/s, the verdict when not
/// Valid, and "N ms TTFT" (median), as the report and the live view show them.
pub fn matrix_parts(c: &CellScore) -> Option<(String, Option<Verdict>, String)> {
    let (v, f) = (c.verdict?, shown(c)?);
    Some((
        opt(f.total_tok_s, |x| rate(x, false)),
        (v != Verdict::Valid).then_some(v),
        format!("{} TTFT", opt(f.ttft_ms.median, ms_whole)),
    ))
}

/// A matrix cell's text: total tok/s, the verdict when not Valid, median TTFT; or the
/// cell's state when it was not scored; a dash for no cell.
pub fn matrix_text(cell: Option<&CellScore>) -> String {
    match cell {
        None => DASH.to_string(),
        Some(c) => match matrix_parts(c) {
            Some((rate, verdict, ttft)) => {
                let mut parts = vec![rate];
                parts.extend(verdict.map(|v| v.label().to_string()));
                parts.push(ttft);
                parts.join(" · ")
            }
            None => c.status_label(),
        },
    }
}

/// One figure of one cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Number(Option<f64>),
    Count(Option<i64>),
    Text(Option<String>),
}

impl Value {
    /// As a number, for diffs; text has none.
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Number(v) => *v,
            Value::Count(v) => v.map(|c| c as f64),
            Value::Text(_) => None,
        }
    }

    /// At full precision, for CSV; empty when absent.
    pub fn csv(&self) -> String {
        match self {
            Value::Number(v) => v.map(|x| x.to_string()),
            Value::Count(v) => v.map(|c| c.to_string()),
            Value::Text(v) => v.clone(),
        }
        .unwrap_or_default()
    }

    /// As the Markdown report writes it; `None` when absent.
    pub fn show(&self, how: Show) -> Option<String> {
        if let Value::Count(Some(c)) = self
            && how == Show::Thousands
        {
            return Some(thousands(*c));
        }
        let v = self.number()?;
        Some(match how {
            Show::Rate => rate(v, false),
            Show::Decimal1 => fixed(v, 1),
            Show::WholeMs => ms_whole(v),
            Show::Ms1 => format!("{} ms", fixed(v, 1)),
            Show::Thousands => thousands(v as i64),
            Show::Seconds1 => format!("{} s", fixed(v, 1)),
            Show::Decimal2 => fixed(v, 2),
            Show::Percent => format!("{}%", fixed(v * 100.0, 0)),
        })
    }
}

/// Number formats of the Markdown report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// `19.3K`, `1,259.4`.
    Rate,
    /// `12.5`.
    Decimal1,
    /// `4,454 ms`.
    WholeMs,
    /// `12.5 ms`.
    Ms1,
    /// `196,574`.
    Thousands,
    /// `30.0 s`.
    Seconds1,
    /// `2.31`.
    Decimal2,
    /// A share as a whole percentage: `73%`.
    Percent,
}

/// A figure's column in the report's "All measurements" table.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub header: &'static str,
    pub show: Show,
    /// The phases whose rows show it; the others show a dash.
    pub phases: &'static [Phase],
}

/// One row of the figure table.
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    /// The name `diff` reports.
    pub name: &'static str,
    /// The CSV column.
    pub csv: &'static str,
    /// Whether `diff` compares it.
    pub compared: bool,
    /// Its column in the Markdown report, if it has one.
    pub column: Option<Column>,
    read: fn(&Figures) -> Value,
}

impl Figure {
    /// The figure's value in `f`.
    pub fn value(&self, f: &Figures) -> Value {
        (self.read)(f)
    }
}

const BOTH: &[Phase] = &[
    Phase::Prefill,
    Phase::Decode,
    Phase::Burst,
    Phase::Rate,
    Phase::Replay,
    Phase::Conversation,
];
/// Every phase whose cells stream many requests (decode, burst, rate, replay,
/// conversation).
const DECODE: &[Phase] = &[
    Phase::Decode,
    Phase::Burst,
    Phase::Rate,
    Phase::Replay,
    Phase::Conversation,
];

/// Closed-loop cells (decode): a request is sent when another ends.
const CLOSED_LOOP: &[Phase] = &[Phase::Decode];

const fn column(header: &'static str, show: Show, phases: &'static [Phase]) -> Option<Column> {
    Some(Column {
        header,
        show,
        phases,
    })
}

/// Every figure, in CSV (and report column) order.
pub const FIGURES: &[Figure] = &[
    Figure {
        name: "total_tok_s",
        csv: "total_tok_s",
        compared: true,
        // Prefill: the scout's prompt tok/s.
        column: column("Total tok/s", Show::Rate, BOTH),
        read: |f| Value::Number(f.total_tok_s),
    },
    Figure {
        name: "per_request_tok_s",
        csv: "per_request_tok_s_median",
        compared: true,
        column: column("Per request tok/s", Show::Decimal1, DECODE),
        read: |f| Value::Number(f.per_request_tok_s.median),
    },
    Figure {
        name: "ttft_ms",
        csv: "ttft_ms_median",
        compared: true,
        column: column("TTFT", Show::WholeMs, BOTH),
        read: |f| Value::Number(f.ttft_ms.median),
    },
    Figure {
        name: "ttft_reasoning_ms",
        csv: "ttft_reasoning_ms_median",
        compared: true,
        column: column("First reasoning token", Show::WholeMs, DECODE),
        read: |f| Value::Number(f.ttft_reasoning_ms.median),
    },
    Figure {
        name: "ttft_content_ms",
        csv: "ttft_content_ms_median",
        compared: true,
        column: column("First content token", Show::WholeMs, DECODE),
        read: |f| Value::Number(f.ttft_content_ms.median),
    },
    Figure {
        name: "reasoning_tokens",
        csv: "reasoning_tokens_median",
        compared: true,
        column: column("Reasoning tokens", Show::Thousands, DECODE),
        read: |f| Value::Number(f.reasoning_tokens.median),
    },
    Figure {
        name: "reasoning_share",
        csv: "reasoning_share",
        compared: true,
        column: column("Reasoning share", Show::Percent, DECODE),
        read: |f| Value::Number(f.reasoning_share),
    },
    Figure {
        name: "time_between_tokens_ms",
        csv: "time_between_tokens_ms_median",
        compared: true,
        column: column("Time between tokens", Show::Ms1, DECODE),
        read: |f| Value::Number(f.time_between_tokens_ms.median),
    },
    Figure {
        name: "itl_ms",
        csv: "itl_ms_median",
        compared: true,
        column: None,
        read: |f| Value::Number(f.itl_ms.median),
    },
    Figure {
        name: "e2e_latency_ms",
        csv: "e2e_latency_ms_median",
        compared: true,
        column: None,
        read: |f| Value::Number(f.e2e_latency_ms.median),
    },
    Figure {
        name: "active_requests",
        csv: "active_requests",
        compared: true,
        column: column("Average active requests", Show::Decimal1, DECODE),
        read: |f| Value::Number(f.active_requests),
    },
    Figure {
        name: "sends_per_10ms_max",
        csv: "sends_per_10ms_max",
        compared: true,
        column: column("Most sends in 10 ms", Show::Thousands, CLOSED_LOOP),
        read: |f| Value::Count(f.sends_per_10ms_max),
    },
    Figure {
        name: "send_dispersion",
        csv: "send_dispersion",
        compared: true,
        column: None,
        read: |f| Value::Number(f.send_dispersion),
    },
    Figure {
        name: "active_source",
        csv: "active_source",
        compared: false,
        column: None,
        read: |f| Value::Text(f.active_source.clone()),
    },
    Figure {
        name: "completed_requests",
        csv: "completed_requests",
        compared: true,
        column: column("Completed requests", Show::Thousands, BOTH),
        read: |f| Value::Count(Some(f.completed_requests)),
    },
    Figure {
        name: "output_tokens",
        csv: "output_tokens",
        compared: true,
        column: column("Output tokens", Show::Thousands, DECODE),
        read: |f| Value::Count(Some(f.output_tokens)),
    },
    Figure {
        name: "requests_scored",
        csv: "requests_scored",
        compared: false,
        column: None,
        read: |f| Value::Count(i64::try_from(f.requests_scored).ok()),
    },
    Figure {
        name: "window_s",
        csv: "window_s",
        compared: true,
        column: column("Measured for", Show::Seconds1, DECODE),
        read: |f| Value::Number(f.window_s),
    },
    Figure {
        name: "prompt_tokens",
        csv: "prompt_tokens",
        compared: false,
        column: None,
        read: |f| Value::Count(f.prompt_tokens),
    },
    Figure {
        name: "prompt_tok_s",
        csv: "prompt_tok_s",
        compared: true,
        column: None,
        read: |f| Value::Number(f.prompt_tok_s),
    },
    Figure {
        name: "gpu_power_w",
        csv: "gpu_power_w",
        compared: true,
        column: None,
        read: |f| Value::Number(f.gpu_power_w),
    },
    Figure {
        name: "tokens_per_joule",
        csv: "tokens_per_joule",
        compared: true,
        column: None,
        read: |f| Value::Number(f.tokens_per_joule),
    },
    Figure {
        name: "e2e_latency_ms_p99",
        csv: "e2e_latency_ms_p99",
        compared: true,
        column: None,
        read: |f| Value::Number(f.e2e_latency_ms.percentiles.get("p99").copied()),
    },
    Figure {
        name: "ttft_ms_p99",
        csv: "ttft_ms_p99",
        compared: true,
        column: None,
        read: |f| Value::Number(f.ttft_ms.percentiles.get("p99").copied()),
    },
    Figure {
        name: "request_rate",
        csv: "request_rate",
        compared: true,
        column: None,
        read: |f| Value::Number(f.request_rate),
    },
    Figure {
        name: "offered_rate",
        csv: "offered_rate",
        compared: false,
        column: None,
        read: |f| Value::Number(f.offered_rate),
    },
    Figure {
        name: "schedule_rate",
        csv: "schedule_rate",
        compared: false,
        column: None,
        read: |f| Value::Number(f.schedule_rate),
    },
    Figure {
        name: "capacity",
        csv: "capacity",
        compared: false,
        column: None,
        read: |f| Value::Text(f.capacity.clone()),
    },
    Figure {
        name: "schedule_lag_ms",
        csv: "schedule_lag_ms_p99",
        compared: true,
        column: None,
        read: |f| Value::Number(f.schedule_lag_ms.percentiles.get("p99").copied()),
    },
    Figure {
        name: "slo_met",
        csv: "slo_met",
        compared: false,
        column: None,
        read: |f| {
            Value::Text(
                f.slo_met
                    .map(|m| if m { "met" } else { "missed" }.to_string()),
            )
        },
    },
    Figure {
        name: "goodput",
        csv: "goodput",
        compared: true,
        column: column("Goodput req/s", Show::Rate, DECODE),
        read: |f| Value::Number(f.goodput),
    },
    Figure {
        name: "goodput_share",
        csv: "goodput_share",
        compared: true,
        column: column("Goodput share", Show::Percent, DECODE),
        read: |f| Value::Number(f.goodput_share),
    },
    Figure {
        name: "cached_tokens",
        csv: "cached_tokens",
        compared: true,
        column: None,
        read: |f| Value::Count(f.cached_tokens),
    },
    Figure {
        name: "expected_cached_tokens",
        csv: "expected_cached_tokens",
        compared: false,
        column: None,
        read: |f| Value::Count(f.expected_cached_tokens),
    },
    Figure {
        name: "replay_skipped",
        csv: "replay_skipped",
        compared: true,
        column: None,
        read: |f| Value::Count(f.replay_skipped.map(|n| n as i64)),
    },
    Figure {
        name: "spec_acceptance_rate",
        csv: "spec_acceptance_rate",
        compared: true,
        column: column("Spec acceptance", Show::Percent, DECODE),
        read: |f| Value::Number(f.spec_acceptance_rate),
    },
    Figure {
        name: "spec_acceptance_length",
        csv: "spec_acceptance_length",
        compared: true,
        column: column("Acceptance length", Show::Decimal2, DECODE),
        read: |f| Value::Number(f.spec_acceptance_length),
    },
    Figure {
        name: "spec_draft_tokens",
        csv: "spec_draft_tokens",
        compared: false,
        column: None,
        read: |f| Value::Count(f.spec_draft_tokens),
    },
    Figure {
        name: "spec_accepted_tokens",
        csv: "spec_accepted_tokens",
        compared: false,
        column: None,
        read: |f| Value::Count(f.spec_accepted_tokens),
    },
    Figure {
        name: "tokens_per_event",
        csv: "tokens_per_event",
        compared: true,
        column: column("Tokens / event", Show::Decimal2, DECODE),
        read: |f| Value::Number(f.tokens_per_event),
    },
    Figure {
        name: "connections_opened",
        csv: "connections_opened",
        compared: false,
        column: None,
        read: |f| Value::Count(f.connections_opened),
    },
    Figure {
        name: "reconnects",
        csv: "reconnects",
        compared: true,
        column: column("Reconnects", Show::Thousands, DECODE),
        read: |f| Value::Count(f.reconnects),
    },
    Figure {
        name: "retries",
        csv: "retries",
        compared: true,
        column: column("Retries", Show::Thousands, DECODE),
        read: |f| Value::Count(f.retries),
    },
    Figure {
        name: "script_mix_requests",
        csv: "script_mix_requests",
        compared: true,
        column: None,
        read: |f| Value::Count(f.script_mix_requests),
    },
    Figure {
        name: "empty_output_requests",
        csv: "empty_output_requests",
        compared: true,
        column: None,
        read: |f| Value::Count(f.empty_output_requests),
    },
    Figure {
        name: "stop_early_requests",
        csv: "stop_early_requests",
        compared: true,
        column: None,
        read: |f| Value::Count(f.stop_early_requests),
    },
    Figure {
        name: "content_flags",
        csv: "content_flags",
        compared: true,
        column: column("Content flags", Show::Thousands, DECODE),
        read: |f| Value::Count(f.content_flags),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_columns_are_unique() {
        let mut names: Vec<&str> = FIGURES.iter().map(|f| f.name).collect();
        let mut csv: Vec<&str> = FIGURES.iter().map(|f| f.csv).collect();
        names.sort();
        names.dedup();
        csv.sort();
        csv.dedup();
        assert_eq!(names.len(), FIGURES.len());
        assert_eq!(csv.len(), FIGURES.len());
    }

    #[test]
    fn values_read_their_own_field() {
        let f = Figures {
            total_tok_s: Some(19_312.0),
            output_tokens: 196_574,
            requests_scored: 7,
            active_source: Some("server".to_string()),
            ..Figures::default()
        };
        let get = |name: &str| {
            FIGURES
                .iter()
                .find(|x| x.name == name)
                .map(|x| x.value(&f))
                .expect("figure")
        };
        assert_eq!(
            get("total_tok_s").show(Show::Rate).as_deref(),
            Some("19.3K")
        );
        assert_eq!(
            get("output_tokens").show(Show::Thousands).as_deref(),
            Some("196,574")
        );
        assert_eq!(get("requests_scored").csv(), "7");
        assert_eq!(get("active_source").csv(), "server");
        assert_eq!(get("active_source").number(), None);
        assert_eq!(get("window_s").csv(), "");
        assert_eq!(get("window_s").show(Show::Seconds1), None);
    }
}
