//! The plain per-cell data every rule reads: request lifecycles, token aggregates,
//! in-window gaps, gauge samples, lifecycle events and text, built from a committed
//! cell's rows by [`crate::read`] (the analyzer, the live view, `watch`).

use std::collections::BTreeMap;

use tokentrace_schemas::layout::CellKey;
use tokentrace_schemas::tables::{EndReason, EventKind, Role};

use crate::column::Column;
use crate::rules::Channel;

/// One request's lifecycle (from `requests`).
#[derive(Debug, Clone)]
pub struct RequestInfo {
    pub request_id: i64,
    pub key: CellKey,
    pub role: Role,
    pub end_reason: EndReason,
    pub prompt_tokens_requested: i64,
    pub prompt_tokens_server: Option<i64>,
    /// Prompt tokens the server served from its prefix cache (when it said).
    pub cached_tokens: Option<i64>,
    /// When it was due: a rate cell's schedule; when it was run, for other cells.
    pub scheduled_ns: i64,
    pub sent_ns: Option<i64>,
    pub end_ns: Option<i64>,
    pub error: Option<String>,
    /// The closed-loop worker that sent it (null for open-loop requests).
    pub slot: Option<i64>,
    pub max_tokens: Option<i64>,
    /// The connection that carried it; whether it opened that connection (a new one, not
    /// one reused); and how often it was sent again on a new connection. All null in
    /// runs recorded before the recorder wrote its connection columns.
    pub connection_id: Option<i64>,
    pub opened_connection: Option<bool>,
    pub retries: Option<i64>,
}

impl RequestInfo {
    /// Whether a request opened its connection: one that got a connection (at
    /// `connection_ns`) either opened it (a connect start) or reused an open one.
    pub fn opened(connection_ns: Option<i64>, connect_start_ns: Option<i64>) -> Option<bool> {
        connection_ns.map(|_| connect_start_ns.is_some())
    }
}

/// One request's token aggregates (from `chunks`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenAgg {
    /// Tokens over the whole stream.
    pub tokens: i64,
    /// Tokens that arrived inside the cell's window …
    pub tokens_in_window: i64,
    /// … and the events that carried them (the recorded count, whatever the rule set
    /// counts tokens by).
    pub token_events_in_window: i64,
    pub first_chunk_ns: Option<i64>,
    /// First event with answer text.
    pub first_content_ns: Option<i64>,
    /// First event with answer or reasoning text.
    pub first_text_ns: Option<i64>,
    /// First event with reasoning text.
    pub first_reasoning_ns: Option<i64>,
    /// Tokens of the events that carried reasoning text (the recorded count).
    pub reasoning_tokens: i64,
    /// First event carrying tokens, and how many it carried.
    pub first_token_ns: Option<i64>,
    pub first_token_tokens: i64,
    pub last_token_ns: Option<i64>,
    /// Events that carried tokens, over the whole stream; the reads they came in (events
    /// of one read share an arrival time), and the most events of one read. A server
    /// writes one event per step, so many events to a read mean that something between
    /// it and the recorder held the stream and let it go in bursts.
    pub token_events: i64,
    pub token_reads: i64,
    pub largest_read: i64,
    /// The same counts from the server's cumulative usage (its increases per event),
    /// when every event that carried tokens also carried the cumulative count.
    pub usage: Option<UsageCount>,
}

impl TokenAgg {
    /// These aggregates with their token counts (in all, in the window, of the first
    /// token event) taken from the server's usage when `count` says so and the usage
    /// holds them; and whether they were.
    pub fn counted(mut self, count: crate::rules::TokenCount) -> (TokenAgg, bool) {
        match (count, self.usage) {
            (crate::rules::TokenCount::Usage, Some(u)) => {
                self.tokens = u.tokens;
                self.tokens_in_window = u.tokens_in_window;
                self.first_token_tokens = u.first_token_tokens;
                (self, true)
            }
            _ => (self, false),
        }
    }
}

/// A request's token counts taken from the server's cumulative usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageCount {
    pub tokens: i64,
    pub tokens_in_window: i64,
    /// Of the first event that carried tokens.
    pub first_token_tokens: i64,
}

/// One lifecycle mark.
#[derive(Debug, Clone)]
pub struct EventInfo {
    pub time_ns: i64,
    pub kind: EventKind,
    pub detail: Option<String>,
}

/// One metric series' value at one scrape, summed over its label sets.
#[derive(Debug, Clone)]
pub struct Sample {
    pub start_ns: i64,
    pub end_ns: i64,
    pub value: f64,
}

/// One second of the recorder's tick counts: how many ticks fired, and how many were
/// later than each of `protocol::LATE_TICK_MS`.
#[derive(Debug, Clone, PartialEq)]
pub struct TickCounts {
    pub start_ns: i64,
    pub end_ns: i64,
    pub ticks: f64,
    pub over: Vec<f64>,
}

/// Everything of a run the rules look at, keyed by cell.
#[derive(Debug, Default)]
pub struct Loaded {
    pub requests: BTreeMap<CellKey, Vec<RequestInfo>>,
    pub tokens: ById<TokenAgg>,
    /// Per cell: gaps (ns) between consecutive token events of a request, the later one
    /// inside the window, in bounded memory ([`Column`]).
    pub gaps: BTreeMap<CellKey, Column>,
    /// Per cell: whose those gaps are, in their order: (request id, how many of them).
    pub gap_owners: BTreeMap<CellKey, Vec<(i64, usize)>>,
    /// Per cell: the recorder's queueing delay (ns) of every event inside the window.
    pub queue_delays: BTreeMap<CellKey, Column>,
    pub events: BTreeMap<CellKey, Vec<EventInfo>>,
    /// Per decode cell: (window_open, window_close); absent when the cell has no window.
    pub windows: BTreeMap<CellKey, (i64, i64)>,
    /// Per cell, per series name: samples in time order.
    pub samples: BTreeMap<CellKey, BTreeMap<String, Vec<Sample>>>,
    /// Per cell: the recorder's tick counts per second, in time order (runs recorded
    /// before the recorder counted late ticks have none).
    pub tick_counts: BTreeMap<CellKey, Vec<TickCounts>>,
    /// Per request: (content, reasoning) text in stream order, for requests with text
    /// (with [`Loaded::text_rules`], only those whose text the loop evidence quotes).
    pub text: BTreeMap<i64, (String, String)>,
    /// The rules the text rules read each request's text by as its last row comes
    /// ([`Loaded::said`]), after which the text is dropped; `None`: every text is kept
    /// whole and read when the cell is judged (the same findings).
    pub text_rules: Option<crate::rules::RuleSet>,
    /// With `text_rules`: per request with something found, what the text rules read.
    pub said: BTreeMap<i64, Said>,
    /// Per cell with GPU telemetry: its `gpu` rows in time order (cells recorded
    /// without NVML have none).
    pub gpu: BTreeMap<CellKey, Vec<tokentrace_schemas::tables::GpuRow>>,
    /// Per replay cell: its workload's `replay` rows (request id order).
    pub replay: BTreeMap<CellKey, Vec<tokentrace_schemas::tables::ReplayRow>>,
    /// Per conversation cell: its `turns` rows (request id order).
    pub turns: BTreeMap<CellKey, Vec<tokentrace_schemas::tables::TurnRow>>,
    /// Per decode cell: its token events in time order, (arrival ns, tokens); loaded
    /// only for the HTML page's drill-down traces (`read::cell` with `traces`).
    pub timelines: BTreeMap<CellKey, Vec<(i64, i64)>>,
    /// Values of a per-token column held in memory before the rest go to a temporary
    /// file (`None`: [`crate::column::MEMORY_VALUES`]; the tests make it small).
    pub memory_values: Option<usize>,
}

impl Loaded {
    /// An empty column of this load's memory limit.
    pub fn column(&self) -> Column {
        Column::with_limit(self.memory_values.unwrap_or(crate::column::MEMORY_VALUES))
    }
}

/// What the text rules found in one request's text ([`crate::said`]); empty for most
/// requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Said {
    /// Per channel the loop rules search (in channel order): the repetitions of at
    /// least the shorter of the loop and suspect spans (channels without any are left
    /// out). The text is kept where this is not empty (the evidence quotes it).
    pub repeats: Vec<(Channel, Vec<crate::loops::Repetition>)>,
    /// The channels whose share of letters foreign to the allowed scripts is over the
    /// rule's: (channel, what was found, an excerpt from the first such letter).
    pub script_mix: Vec<(Channel, String, String)>,
    /// The answer's last characters, for a request that stopped before its
    /// `max_tokens`.
    pub tail: Option<String>,
}

impl Said {
    pub fn is_empty(&self) -> bool {
        self.repeats.is_empty() && self.script_mix.is_empty() && self.tail.is_none()
    }
}

/// Values by request id, in a vector sorted by id: requests are filed in id order, so
/// each insert is a push, and a cell of many requests costs its values and their ids
/// (a B-tree filled in order leaves its nodes half empty: twice that).
#[derive(Clone, PartialEq)]
pub struct ById<T>(Vec<(i64, T)>);

impl<T> Default for ById<T> {
    fn default() -> Self {
        ById(Vec::new())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ById<T> {
    /// As a map (what the tests compare two loads by).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl<T> ById<T> {
    pub fn get(&self, id: &i64) -> Option<&T> {
        self.0
            .binary_search_by_key(id, |(k, _)| *k)
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, v)| v)
    }

    /// Sets `id`'s value (appended when `id` is above every id so far).
    pub fn insert(&mut self, id: i64, value: T) {
        if self.0.last().is_none_or(|(k, _)| *k < id) {
            self.0.push((id, value));
            return;
        }
        match self.0.binary_search_by_key(&id, |(k, _)| *k) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (id, value)),
        }
    }

    /// Room for `more` values beyond those held (a cell's request count, known from its
    /// requests table: no growth by doubling).
    pub fn reserve(&mut self, more: usize) {
        self.0.reserve_exact(more);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&i64, &T)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}
