//! The plain per-cell data every rule reads: request lifecycles, token aggregates,
//! in-window gaps, gauge samples, lifecycle events and text, built from a committed
//! cell's rows by [`crate::read`] (the analyzer, the live view, `watch`).

use std::collections::BTreeMap;

use tokentrace_schemas::layout::CellKey;
use tokentrace_schemas::tables::{EndReason, EventKind, Role};

use crate::column::Column;
use crate::rules::Channel;

/// One request's lifecycle (from `requests`), in its table's types (128 bytes: a cell
/// holds one per request). Its cell is the one it is filed under.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    pub request_id: i64,
    pub role: Role,
    pub end_reason: EndReason,
    pub prompt_tokens_requested: i32,
    pub prompt_tokens_server: Option<i32>,
    /// Prompt tokens the server served from its prefix cache (when it said).
    pub cached_tokens: Option<i32>,
    /// When it was due: a rate cell's schedule; when it was run, for other cells.
    pub scheduled_ns: i64,
    pub sent_ns: Option<i64>,
    pub end_ns: Option<i64>,
    pub error: Option<Box<str>>,
    /// The closed-loop worker that sent it (null for open-loop requests).
    pub slot: Option<i32>,
    pub max_tokens: Option<i32>,
    /// The connection that carried it; whether it opened that connection (a new one, not
    /// one reused); and how often it was sent again on a new connection. All null in
    /// runs recorded before the recorder wrote its connection columns.
    pub connection_id: Option<i64>,
    pub opened_connection: Option<bool>,
    pub retries: Option<i32>,
}

impl RequestInfo {
    /// Whether a request opened its connection: one that got a connection (at
    /// `connection_ns`) either opened it (a connect start) or reused an open one.
    pub fn opened(connection_ns: Option<i64>, connect_start_ns: Option<i64>) -> Option<bool> {
        connection_ns.map(|_| connect_start_ns.is_some())
    }
}

/// One request's token aggregates (from `chunks`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
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

/// A request's [`TokenAgg`] as a cell of many requests holds it: its counts in 32 bits
/// and which times it has in a bit set, 88 bytes where the aggregate takes 192. A count
/// that does not fit (a corrupt file; no stream carries 4 G tokens) keeps the whole
/// aggregate instead, so every value reads back as it was put in.
#[derive(Clone, PartialEq)]
pub enum PackedAgg {
    Narrow(NarrowAgg),
    Wide(Box<TokenAgg>),
}

/// The narrow form: `times` are the first chunk's, content's, reasoning's and token's
/// and the last token's, each present where `present` has its bit (bit 7 is always
/// set: the enum's tag lives there); `counts` are [`TokenAgg`]'s in its order, then the
/// usage's (present with bit 5). The first text is the earlier of the first content and
/// the first reasoning, as the fold takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct NarrowAgg {
    times: [i64; 5],
    counts: [u32; 11],
    present: std::num::NonZeroU8,
}

impl NarrowAgg {
    const USAGE: u8 = 1 << 5;
    const SET: u8 = 1 << 7;
}

/// The earlier of two times, either of which may be absent.
fn earlier(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl std::fmt::Debug for PackedAgg {
    /// As the aggregate it holds (what the tests compare two loads by).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.unpack().fmt(f)
    }
}

impl PackedAgg {
    pub fn pack(a: &TokenAgg) -> PackedAgg {
        if earlier(a.first_content_ns, a.first_reasoning_ns) != a.first_text_ns {
            return PackedAgg::Wide(Box::new(*a));
        }
        let times = [
            a.first_chunk_ns,
            a.first_content_ns,
            a.first_reasoning_ns,
            a.first_token_ns,
            a.last_token_ns,
        ];
        let u = a.usage.unwrap_or_default();
        let wide = [
            a.tokens,
            a.tokens_in_window,
            a.token_events_in_window,
            a.reasoning_tokens,
            a.first_token_tokens,
            a.token_events,
            a.token_reads,
            a.largest_read,
            u.tokens,
            u.tokens_in_window,
            u.first_token_tokens,
        ];
        let mut counts = [0u32; 11];
        for (to, from) in counts.iter_mut().zip(wide) {
            match u32::try_from(from) {
                Ok(c) => *to = c,
                Err(_) => return PackedAgg::Wide(Box::new(*a)),
            }
        }
        let mut present = NarrowAgg::SET;
        if a.usage.is_some() {
            present |= NarrowAgg::USAGE;
        }
        for (i, t) in times.iter().enumerate() {
            if t.is_some() {
                present |= 1 << i;
            }
        }
        PackedAgg::Narrow(NarrowAgg {
            times: times.map(|t| t.unwrap_or(0)),
            counts,
            // Bit 7 is set: never zero.
            present: std::num::NonZeroU8::new(present).unwrap_or(std::num::NonZeroU8::MAX),
        })
    }

    pub fn unpack(&self) -> TokenAgg {
        let n = match self {
            PackedAgg::Wide(a) => return **a,
            PackedAgg::Narrow(n) => n,
        };
        let present = n.present.get();
        let t = |i: usize| (present & (1 << i) != 0).then_some(n.times[i]);
        let c = |i: usize| i64::from(n.counts[i]);
        let (first_content_ns, first_reasoning_ns) = (t(1), t(2));
        TokenAgg {
            tokens: c(0),
            tokens_in_window: c(1),
            token_events_in_window: c(2),
            first_chunk_ns: t(0),
            first_content_ns,
            first_text_ns: earlier(first_content_ns, first_reasoning_ns),
            first_reasoning_ns,
            reasoning_tokens: c(3),
            first_token_ns: t(3),
            first_token_tokens: c(4),
            last_token_ns: t(4),
            token_events: c(5),
            token_reads: c(6),
            largest_read: c(7),
            usage: (present & NarrowAgg::USAGE != 0).then(|| UsageCount {
                tokens: c(8),
                tokens_in_window: c(9),
                first_token_tokens: c(10),
            }),
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
    pub tokens: ById<PackedAgg>,
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
    /// Per decode cell: its token events, (arrival ns, tokens), in bounded memory;
    /// loaded only for the HTML page's drill-down traces (`read::cell` with `traces`).
    pub timelines: BTreeMap<CellKey, crate::timeline::Timeline>,
    /// Values of a per-token column held in memory before the rest go to a temporary
    /// file (`None`: [`crate::column::MEMORY_VALUES`]; the tests make it small).
    pub memory_values: Option<usize>,
}

impl Loaded {
    /// An empty column of this load's memory limit.
    pub fn column(&self) -> Column {
        Column::with_limit(self.memory_limit())
    }

    /// An empty timeline of this load's memory limit.
    pub fn timeline(&self) -> crate::timeline::Timeline {
        crate::timeline::Timeline::with_limit(self.memory_limit())
    }

    /// Values a per-token column holds in memory before it spills.
    fn memory_limit(&self) -> usize {
        self.memory_values.unwrap_or(crate::column::MEMORY_VALUES)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(seed: u64) -> TokenAgg {
        // A small generator: every field present or not, small and huge values.
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut count = || match next() % 5 {
            0 => 0,
            1 => i64::from(u32::MAX),
            2 if seed.is_multiple_of(7) => i64::from(u32::MAX) + 1,
            3 if seed.is_multiple_of(11) => -1,
            _ => (next() % 5000) as i64,
        };
        let counts: Vec<i64> = (0..11).map(|_| count()).collect();
        let mut time = || (next() % 3 != 0).then(|| (next() >> 1) as i64 - (1 << 40));
        let times: Vec<Option<i64>> = (0..6).map(|_| time()).collect();
        let earlier = match (times[1], times[3]) {
            (Some(c), Some(r)) => Some(c.min(r)),
            (c, r) => c.or(r),
        };
        TokenAgg {
            tokens: counts[0],
            tokens_in_window: counts[1],
            token_events_in_window: counts[2],
            first_chunk_ns: times[0],
            first_content_ns: times[1],
            // Mostly as the fold takes it; now and then not (then kept wide).
            first_text_ns: if seed.is_multiple_of(13) {
                times[2]
            } else {
                earlier
            },
            first_reasoning_ns: times[3],
            reasoning_tokens: counts[3],
            first_token_ns: times[4],
            first_token_tokens: counts[4],
            last_token_ns: times[5],
            token_events: counts[5],
            token_reads: counts[6],
            largest_read: counts[7],
            usage: (!seed.is_multiple_of(3)).then_some(UsageCount {
                tokens: counts[8],
                tokens_in_window: counts[9],
                first_token_tokens: counts[10],
            }),
        }
    }

    #[test]
    fn a_packed_aggregate_reads_back_as_it_was() {
        let (mut narrow, mut wide) = (0, 0);
        for seed in 0..5000 {
            let a = agg(seed);
            let p = PackedAgg::pack(&a);
            match p {
                PackedAgg::Narrow(_) => narrow += 1,
                PackedAgg::Wide(_) => wide += 1,
            }
            assert_eq!(p.unpack(), a, "seed {seed}");
        }
        assert!(narrow > 1000 && wide > 100, "{narrow} narrow, {wide} wide");
        assert_eq!(
            PackedAgg::pack(&TokenAgg::default()).unpack(),
            TokenAgg::default()
        );
        assert_eq!(std::mem::size_of::<PackedAgg>(), 88);
        assert_eq!(std::mem::size_of::<RequestInfo>(), 128);
    }
}
