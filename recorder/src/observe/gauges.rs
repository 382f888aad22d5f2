//! The server's gauges and the GPUs' telemetry as the live view shows them: kept scrape
//! by scrape from the rows the scraper writes ([`Gauges`]), and shared with the view
//! ([`Feed`]), never touched by a request; with the cell writer's count of the cell
//! under way ([`Lanes`]: tokens per stream, outcomes, and notes of what went wrong).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokentrace_schemas::protocol::{Engine, EngineSeries};
use tokentrace_schemas::tables::{EndReason, GpuRow, MetricRow, RequestRow};

/// Points kept per gauge (two minutes at the default scrape interval).
pub const SERIES_POINTS: usize = 120;

/// The recent values of one gauge, oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series(pub VecDeque<f64>);

impl Series {
    pub fn push(&mut self, v: f64) {
        if self.0.len() == SERIES_POINTS {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    pub fn last(&self) -> Option<f64> {
        self.0.back().copied()
    }
}

/// The server's gauges and the GPUs' telemetry, scrape by scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gauges {
    pub running: Series,
    pub waiting: Series,
    /// KV-cache use, 0–1, where the engine exposes it.
    pub kv_cache: Series,
    /// Speculative decoding: accepted over proposed draft tokens between scrapes (0–1),
    /// or the engine's mean acceptance length where it gives no counters.
    pub spec: Series,
    pub spec_is_length: bool,
    /// All GPUs' power draw together, W, and their mean utilisation, %.
    pub gpu_power_w: Series,
    pub gpu_util_pct: Series,
    /// Tokens so far of each stream in flight, in request order (the writer's count).
    pub lanes: Vec<u64>,
    /// The cell under way's requests so far, by outcome (the writer's count).
    pub outcomes: Outcomes,
    /// The last scrape's (accepted, proposed) draft token counters.
    last_spec: Option<(f64, f64)>,
}

impl Gauges {
    /// Adds a scrape's rows: the first engine whose running gauge appears names them.
    pub fn scraped(&mut self, rows: &[MetricRow]) {
        let sum = |name: &str| {
            let mut v = rows
                .iter()
                .filter(|r| r.name == name)
                .map(|r| r.value)
                .peekable();
            v.peek().is_some().then(|| v.sum::<f64>())
        };
        let Some(series) = Engine::ALL
            .iter()
            .map(|e| e.series())
            .find(|s| sum(s.running).is_some())
        else {
            return;
        };
        let EngineSeries {
            running,
            waiting,
            kv_cache_usage,
            spec_draft_tokens,
            spec_accepted_tokens,
            spec_accept_length,
            ..
        } = series;
        self.running.push(sum(running).unwrap_or(0.0));
        self.waiting.push(sum(waiting).unwrap_or(0.0));
        if let Some(kv) = kv_cache_usage.and_then(sum) {
            // vLLM reports a share (0–1); some engines a percentage.
            self.kv_cache.push(if kv > 1.0 { kv / 100.0 } else { kv });
        }
        if let (Some(acc), Some(prop)) = (
            spec_accepted_tokens.and_then(sum),
            spec_draft_tokens.and_then(sum),
        ) {
            if let Some((a0, p0)) = self.last_spec
                && prop > p0
            {
                self.spec.push((acc - a0) / (prop - p0));
            }
            self.last_spec = Some((acc, prop));
        } else if let Some(len) = spec_accept_length.and_then(sum) {
            self.spec_is_length = true;
            self.spec.push(len);
        }
    }

    /// Adds one sampling of the GPUs.
    pub fn gpu(&mut self, rows: &[GpuRow]) {
        let power: Vec<f64> = rows.iter().filter_map(|r| r.power_w).collect();
        if !power.is_empty() {
            self.gpu_power_w.push(power.iter().sum());
        }
        let util: Vec<f64> = rows.iter().filter_map(|r| r.utilization_pct).collect();
        if !util.is_empty() {
            self.gpu_util_pct
                .push(util.iter().sum::<f64>() / util.len() as f64);
        }
    }
}

/// The cell under way's ended requests, by how they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes {
    pub requests: u64,
    /// Ended in an error before their first token (a refusal: an HTTP error, a stream
    /// error, a disconnect, a stall) …
    pub refused: u64,
    /// … and after it.
    pub failed: u64,
    /// Of the refused and failed: ended by the stall timeout.
    pub stalled: u64,
    /// Sent again on a new connection (their reused one was closed).
    pub retried: u64,
}

/// Why a request ended in an error, or `None` when it did not.
fn error_of(row: &RequestRow) -> Option<String> {
    Some(match row.end_reason {
        EndReason::HttpError => match row.http_status {
            Some(s) => format!("HTTP {s}"),
            None => "an HTTP error".to_string(),
        },
        EndReason::StreamError => "an error event in the stream".to_string(),
        EndReason::Disconnect => "the connection ended early".to_string(),
        EndReason::StallTimeout => "no bytes within the stall timeout".to_string(),
        EndReason::FinishedStop
        | EndReason::FinishedLength
        | EndReason::FinishedOther
        | EndReason::Cancelled => return None,
    })
}

fn is_error(row: &RequestRow) -> bool {
    matches!(
        row.end_reason,
        EndReason::HttpError
            | EndReason::StreamError
            | EndReason::Disconnect
            | EndReason::StallTimeout
    )
}

fn was_retried(row: &RequestRow) -> bool {
    row.retries.is_some_and(|r| r > 0)
}

impl Outcomes {
    /// Counts the request row `row` the cell's writer takes.
    pub fn count(&mut self, row: &RequestRow) {
        self.requests += 1;
        if is_error(row) {
            if row.first_token_ns.is_some() {
                self.failed += 1;
            } else {
                self.refused += 1;
            }
        }
        self.stalled += u64::from(row.end_reason == EndReason::StallTimeout);
        self.retried += u64::from(was_retried(row));
    }

    /// "12 requests, none failed" or "12 requests (2 refused before streaming, 1 failed
    /// mid-stream)": the cell's progress line.
    pub fn requests_line(&self) -> String {
        let plural = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
        let mut parts = Vec::new();
        if self.refused > 0 {
            parts.push(format!("{} refused before streaming", self.refused));
        }
        if self.failed > 0 {
            parts.push(format!("{} failed mid-stream", self.failed));
        }
        if parts.is_empty() {
            format!("{}, none failed", plural(self.requests, "request"))
        } else {
            format!(
                "{} ({})",
                plural(self.requests, "request"),
                parts.join(", ")
            )
        }
    }

    /// "1,234 requests · 2 refused · 1 failed (1 stalled) · 3 retried", the zeros left
    /// out.
    pub fn line(&self) -> String {
        let mut parts = vec![format!("{} requests", self.requests)];
        if self.refused > 0 {
            parts.push(format!("{} refused", self.refused));
        }
        if self.failed > 0 {
            parts.push(format!("{} failed", self.failed));
        }
        if self.stalled > 0 {
            parts.push(format!("{} stalled", self.stalled));
        }
        if self.retried > 0 {
            parts.push(format!("{} retried", self.retried));
        }
        parts.join(" · ")
    }
}

/// Notes the feed holds for the view between two frames; more are counted, not kept.
pub const NOTES_HELD: usize = 32;

/// Notes of one cell's requests (refusals, failures, stalls, retries, faults) the writer
/// makes; after them, the cell's outcomes only count.
pub const NOTES_PER_CELL: u32 = 8;

/// The gauges the scraper publishes for the view: taken by the scraper once a scrape
/// and by the view at most four times a second, never by a request.
#[derive(Debug, Default)]
pub struct Feed {
    gauges: Mutex<Gauges>,
    /// Whether a view draws the lanes (the cell writer counts them only then).
    lanes_wanted: std::sync::atomic::AtomicBool,
    /// Lines for the view's event log, and how many were dropped since it last took them.
    notes: Mutex<(VecDeque<String>, usize)>,
}

impl Feed {
    fn with<T>(&self, f: impl FnOnce(&mut Gauges) -> T) -> T {
        // A poisoned lock only means a panic elsewhere; the gauges are still usable.
        let mut g = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    pub fn scraped(&self, rows: &[MetricRow]) {
        self.with(|g| g.scraped(rows));
    }

    pub fn gpu(&self, rows: &[GpuRow]) {
        self.with(|g| g.gpu(rows));
    }

    /// A view draws the lanes from now on: the cell writers started after this count them.
    pub fn want_lanes(&self) {
        self.lanes_wanted
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A counter of lanes for a new cell's writer, when a view draws them (the last
    /// cell's outcomes cleared).
    pub fn lanes_counter(&self) -> Option<Lanes> {
        let wanted = self.lanes_wanted.load(std::sync::atomic::Ordering::Relaxed);
        wanted.then(|| {
            self.outcomes(Outcomes::default());
            Lanes::default()
        })
    }

    /// The streams in flight and their tokens so far.
    pub fn lanes(&self, lanes: Vec<u64>) {
        self.with(|g| g.lanes = lanes);
    }

    /// The cell under way's outcomes so far.
    pub fn outcomes(&self, o: Outcomes) {
        self.with(|g| g.outcomes = o);
    }

    /// A line for the view's event log (at most [`NOTES_HELD`] wait; more are counted).
    pub fn note(&self, line: String) {
        let mut n = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if n.0.len() < NOTES_HELD {
            n.0.push_back(line);
        } else {
            n.1 += 1;
        }
    }

    /// The lines noted since the last call, the dropped ones counted in a last line.
    pub fn take_notes(&self) -> Vec<String> {
        let mut n = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines: Vec<String> = n.0.drain(..).collect();
        if n.1 > 0 {
            lines.push(format!("… {} more lines not shown", n.1));
            n.1 = 0;
        }
        lines
    }

    /// A copy of the gauges now.
    pub fn gauges(&self) -> Gauges {
        self.with(|g| g.clone())
    }
}

/// How often the writer hands the view its lanes.
pub const LANES_EVERY: Duration = Duration::from_millis(250);

/// The cell writer's count of each stream's tokens so far, handed to the [`Feed`] at
/// most every [`LANES_EVERY`] (the writer's thread, never a request's). Its clock is the
/// reads' own arrival times, so counting costs no clock read of its own.
#[derive(Debug, Default)]
pub struct Lanes {
    tokens: BTreeMap<i64, u64>,
    /// When the lanes were last handed over (run clock, ns); none yet.
    sent_ns: Option<i64>,
    /// Notes made for this cell.
    noted: u32,
}

impl Lanes {
    /// Request `id` received `n` more tokens in a read that arrived at `at_ns`; `so_far`
    /// is the cell's outcomes, handed over with the lanes.
    pub fn add(&mut self, id: i64, n: u64, at_ns: i64, so_far: &Outcomes, feed: &Feed) {
        *self.tokens.entry(id).or_default() += n;
        let every = LANES_EVERY.as_nanos() as i64;
        if self
            .sent_ns
            .is_none_or(|t| at_ns.saturating_sub(t) >= every)
        {
            self.sent_ns = Some(at_ns);
            feed.lanes(self.tokens.values().copied().collect());
            feed.outcomes(*so_far);
        }
    }

    /// Request `row` ended: its lane closes; the cell's first few refusals, failures,
    /// stalls and retries are noted for the event log (`cell` names the cell).
    pub fn ended(&mut self, row: &RequestRow, cell: &str, feed: &Feed) {
        self.tokens.remove(&row.request_id);
        let line = if let Some(why) = error_of(row) {
            let when = if row.first_token_ns.is_some() {
                "after its first token"
            } else {
                "before its first token"
            };
            let detail = row
                .error
                .as_deref()
                .map(|e| format!(": {}", e.chars().take(80).collect::<String>()))
                .unwrap_or_default();
            format!(
                "{cell}: request {} ended {when}: {why}{detail}",
                row.request_id
            )
        } else if was_retried(row) {
            format!(
                "{cell}: request {} sent again on a new connection (its reused one was closed)",
                row.request_id
            )
        } else {
            return;
        };
        self.note(line, cell, feed);
    }

    /// A fault the cell's writer recorded (`detail` as the events table has it).
    pub fn fault(&mut self, detail: &str, cell: &str, feed: &Feed) {
        self.note(format!("{cell}: {detail}"), cell, feed);
    }

    fn note(&mut self, line: String, cell: &str, feed: &Feed) {
        self.noted += 1;
        if self.noted < NOTES_PER_CELL {
            feed.note(line);
        } else if self.noted == NOTES_PER_CELL {
            feed.note(format!(
                "{cell}: further refusals, failures and retries are counted under way, not \
                 listed (events.parquet and requests.parquet hold each)"
            ));
        }
    }

    /// The cell's writer is done: its last outcomes handed over, the lanes emptied.
    pub fn finish(&self, outcomes: &Outcomes, feed: &Feed) {
        feed.outcomes(*outcomes);
        feed.lanes(Vec::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::scrape::parse_exposition;

    fn scrape(text: &str) -> Vec<MetricRow> {
        parse_exposition(text, 0, 1).expect("parses")
    }

    #[test]
    fn vllm_gauges_and_spec_acceptance_between_scrapes() {
        let mut g = Gauges::default();
        let at = |accepted: u32, proposed: u32, running: u32| {
            format!(
                "# TYPE vllm:num_requests_running gauge\n\
                 vllm:num_requests_running{{engine=\"0\"}} {running}\n\
                 vllm:num_requests_running{{engine=\"1\"}} 1\n\
                 # TYPE vllm:num_requests_waiting gauge\n\
                 vllm:num_requests_waiting{{engine=\"0\"}} 3\n\
                 # TYPE vllm:kv_cache_usage_perc gauge\n\
                 vllm:kv_cache_usage_perc{{engine=\"0\"}} 0.25\n\
                 # TYPE vllm:spec_decode_num_draft_tokens counter\n\
                 vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {proposed}\n\
                 # TYPE vllm:spec_decode_num_accepted_tokens counter\n\
                 vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {accepted}\n"
            )
        };
        g.scraped(&scrape(&at(10, 20, 4)));
        // One scrape of counters gives no rate yet.
        assert!(g.spec.0.is_empty());
        g.scraped(&scrape(&at(40, 60, 6)));
        assert_eq!(g.running.0, [5.0, 7.0]);
        assert_eq!(g.waiting.last(), Some(3.0));
        assert_eq!(g.kv_cache.last(), Some(0.25));
        // (40 − 10) accepted of (60 − 20) proposed.
        assert_eq!(g.spec.last(), Some(0.75));
        assert!(!g.spec_is_length);
        for _ in 0..SERIES_POINTS + 5 {
            g.scraped(&scrape(&at(40, 60, 6)));
        }
        assert_eq!(g.running.0.len(), SERIES_POINTS);
    }

    #[test]
    fn llama_cpp_metrics_give_running_and_waiting_only() {
        let text = include_str!("../../../fixtures/sse/llamacpp-metrics.txt");
        let mut g = Gauges::default();
        g.scraped(&scrape(text));
        assert_eq!(g.running.0.len(), 1);
        assert_eq!(g.waiting.0.len(), 1);
        assert!(g.kv_cache.0.is_empty() && g.spec.0.is_empty());
    }

    #[test]
    fn lanes_are_counted_only_for_a_view_and_handed_over_every_quarter_second() {
        let feed = Feed::default();
        assert!(feed.lanes_counter().is_none(), "no view: nothing counted");
        feed.want_lanes();
        let mut lanes = feed.lanes_counter().expect("a view draws lanes");
        let none = Outcomes::default();
        let ms = 1_000_000;
        lanes.add(7, 1, 1000 * ms, &none, &feed);
        assert_eq!(
            feed.gauges().lanes,
            vec![1],
            "the first read is handed over"
        );
        lanes.add(3, 2, 1100 * ms, &none, &feed);
        lanes.add(7, 4, 1200 * ms, &none, &feed);
        assert_eq!(feed.gauges().lanes, vec![1], "within 250 ms: not yet");
        lanes.ended(&ended(3, EndReason::FinishedStop, None, true), "c", &feed);
        lanes.add(7, 1, 1250 * ms, &none, &feed);
        assert_eq!(
            feed.gauges().lanes,
            vec![6],
            "request 3 ended; 7 has 1 + 4 + 1"
        );
    }

    fn ended(id: i64, reason: EndReason, status: Option<i32>, first: bool) -> RequestRow {
        use tokentrace_schemas::tables::{Endpoint, Role};
        RequestRow {
            end_reason: reason,
            http_status: status,
            first_token_ns: first.then_some(5),
            error: status.map(|s| format!("server said {s}")),
            ..RequestRow::unsent(id, Role::Measured, Endpoint::Completions, 0)
        }
    }

    #[test]
    fn ended_requests_are_counted_and_the_first_few_noted() {
        let feed = Feed::default();
        feed.want_lanes();
        let mut lanes = feed.lanes_counter().expect("wanted");
        let mut tally = Outcomes::default();
        // As the cell's writer takes a request row: counted, then its lane closed.
        let mut end = |row: RequestRow, lanes: &mut Lanes| {
            tally.count(&row);
            lanes.ended(&row, "ctx 1K ×2", &feed);
        };
        lanes.add(1, 3, 0, &Outcomes::default(), &feed);
        end(ended(1, EndReason::FinishedStop, None, true), &mut lanes);
        end(ended(2, EndReason::HttpError, Some(503), false), &mut lanes);
        end(ended(3, EndReason::StallTimeout, None, true), &mut lanes);
        let retried = RequestRow {
            retries: Some(1),
            ..ended(4, EndReason::FinishedLength, None, true)
        };
        end(retried, &mut lanes);
        lanes.fault("the scraper lost /metrics", "ctx 1K ×2", &feed);
        let notes = feed.take_notes();
        assert_eq!(
            notes,
            [
                "ctx 1K ×2: request 2 ended before its first token: HTTP 503: server said 503",
                "ctx 1K ×2: request 3 ended after its first token: no bytes within the stall timeout",
                "ctx 1K ×2: request 4 sent again on a new connection (its reused one was closed)",
                "ctx 1K ×2: the scraper lost /metrics",
            ]
        );
        assert!(feed.take_notes().is_empty(), "taken once");
        lanes.finish(&tally, &feed);
        let o = feed.gauges().outcomes;
        assert_eq!(
            o,
            Outcomes {
                requests: 4,
                refused: 1,
                failed: 1,
                stalled: 1,
                retried: 1
            }
        );
        assert_eq!(
            o.line(),
            "4 requests · 1 refused · 1 failed · 1 stalled · 1 retried"
        );
        assert!(
            feed.gauges().lanes.is_empty(),
            "the lanes end with the cell"
        );

        // Past the cell's allowance, one line says so; past what the feed holds, a count.
        for id in 10..30 {
            lanes.ended(&ended(id, EndReason::Disconnect, None, false), "c", &feed);
        }
        let notes = feed.take_notes();
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(
            notes[3].contains("counted under way, not listed"),
            "{notes:?}"
        );
        for i in 0..(NOTES_HELD + 5) {
            feed.note(format!("line {i}"));
        }
        let notes = feed.take_notes();
        assert_eq!(notes.len(), NOTES_HELD + 1);
        assert_eq!(notes[NOTES_HELD], "… 5 more lines not shown");
        assert!(
            feed.lanes_counter().is_some() && feed.gauges().outcomes == Outcomes::default(),
            "a new cell starts from nothing"
        );
    }
}
