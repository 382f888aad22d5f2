//! The per-cell view: what the rules look at in one cell, gathered from the loaded run
//! once — its streams with their token aggregates, the window, the events, the gauge
//! samples inside the window, the recorder's lag and the repetitions in each text.

use std::borrow::Cow;
use std::collections::BTreeMap;

use rayon::prelude::*;
use tokentrace_schemas::layout::CellKey;
use tokentrace_schemas::protocol::LATE_TICK_MS;
use tokentrace_schemas::tables::Role;

use crate::column::{self, Column};
use crate::data::{EventInfo, Loaded, PackedAgg, RequestInfo, Said, Sample, TickCounts, TokenAgg};

use crate::loops::Repetition;
use crate::presets::Preset;
use crate::rules::{Channel, RequestScope, RuleSet, TokenCount};

/// One request with its token aggregates, counted as the rule set says. It reads both
/// where the load holds them (a cell of many requests is not copied per view).
#[derive(Debug, Clone, Copy)]
pub struct Stream<'a> {
    pub info: &'a RequestInfo,
    /// Its aggregates as loaded (`None`: it streamed no row).
    agg: Option<&'a PackedAgg>,
    /// Counted as: `None` as recorded (a prefill cell's scout, or the decode request that
    /// stands for it).
    count: Option<TokenCount>,
}

impl Stream<'_> {
    /// Its token aggregates, with the counts taken from usage when the rule set says so
    /// and the usage holds them.
    pub fn tokens(&self) -> TokenAgg {
        self.counted().0
    }

    /// The counts in [`Stream::tokens`] came from the server's cumulative usage.
    pub fn counted_from_usage(&self) -> bool {
        self.counted().1
    }

    /// The usage total and the recorded total differ.
    pub fn disagrees(&self) -> bool {
        let raw = self.raw();
        raw.usage.is_some_and(|u| u.tokens != raw.tokens)
    }

    /// Its aggregates as recorded.
    pub fn raw(&self) -> TokenAgg {
        self.agg.map(PackedAgg::unpack).unwrap_or_default()
    }

    fn counted(&self) -> (TokenAgg, bool) {
        let raw = self.raw();
        match self.count {
            Some(count) => raw.counted(count),
            None => (raw, false),
        }
    }
}

/// A server gauge inside the window: its metric name (if the preset has one) and the
/// scrapes taken wholly inside the window, in time order.
#[derive(Debug)]
pub struct Gauge<'a> {
    pub metric: Option<&'a str>,
    pub samples: Vec<&'a Sample>,
}

impl Gauge<'_> {
    pub fn mean(&self) -> Option<f64> {
        (!self.samples.is_empty())
            .then(|| self.samples.iter().map(|s| s.value).sum::<f64>() / self.samples.len() as f64)
    }

    /// A counter's increase from its first to its last scrape inside the window;
    /// `None` with fewer than two, or when it went down (the server restarted).
    pub fn increase(&self) -> Option<f64> {
        match (self.samples.first(), self.samples.last()) {
            (Some(a), Some(b)) if self.samples.len() >= 2 && b.value >= a.value => {
                Some(b.value - a.value)
            }
            _ => None,
        }
    }
}

/// Speculative decoding's series inside the window: the engine's counters of draft
/// steps, draft tokens and accepted tokens, or its acceptance-length gauge.
#[derive(Debug)]
pub struct SpecSeries<'a> {
    pub drafts: Gauge<'a>,
    pub draft_tokens: Gauge<'a>,
    pub accepted_tokens: Gauge<'a>,
    pub accept_length: Gauge<'a>,
}

/// The repetitions found in one channel of one stream's text.
#[derive(Debug)]
pub struct Repeats<'a> {
    pub stream: &'a RequestInfo,
    pub channel: Channel,
    pub text: &'a str,
    pub found: Vec<Repetition>,
}

/// A prefill cell: its scout (the last one sent), if it has one.
#[derive(Debug)]
pub struct PrefillView<'a> {
    pub key: CellKey,
    pub scout: Option<Stream<'a>>,
}

impl<'a> PrefillView<'a> {
    pub fn new(key: CellKey, loaded: &'a Loaded) -> Self {
        // A refused scout is sent again: the last one is the measurement.
        let scout = requests(loaded, key)
            .iter()
            .rfind(|r| r.role == Role::Scout)
            .map(|r| stream(loaded, r));
        PrefillView { key, scout }
    }
}

impl<'a> PrefillView<'a> {
    /// Prefill measured during decode warm-up: the first request sent in the `decode`
    /// cell (a prime, or a warm-up in runs without primes) prefilled cold; it stands
    /// for the scout of the prefill cell `key`.
    pub fn first_of(key: CellKey, decode: CellKey, loaded: &'a Loaded) -> Self {
        let all = requests(loaded, decode);
        let first = |role: Role| {
            all.iter()
                .filter(|r| r.role == role && r.sent_ns.is_some())
                .min_by_key(|r| r.sent_ns)
        };
        let scout = first(Role::Prime)
            .or_else(|| first(Role::Warmup))
            .map(|r| stream(loaded, r));
        PrefillView { key, scout }
    }
}

/// A decode cell with a measurement window.
#[derive(Debug)]
pub struct DecodeView<'a> {
    pub key: CellKey,
    /// `window_open` and `window_close`, ns.
    pub open: i64,
    pub close: i64,
    /// The warm-up and measured streams, in recorded order.
    pub streams: Vec<Stream<'a>>,
    pub events: &'a [EventInfo],
    pub running: Gauge<'a>,
    pub waiting: Gauge<'a>,
    /// The server's counter of generated tokens.
    pub generated: Gauge<'a>,
    /// The server's KV-cache usage (a gauge, 0 to 1).
    pub kv_usage: Gauge<'a>,
    /// The server's prefix-cache counters: prompt tokens looked up, and those it held.
    pub prefix_queries: Gauge<'a>,
    pub prefix_hits: Gauge<'a>,
    pub spec: SpecSeries<'a>,
    /// The recorder's lag samples over the whole cell.
    pub client_lag: &'a [Sample],
    /// The recorder's tick counts per second over the whole cell.
    pub tick_counts: &'a [TickCounts],
    /// Gaps between consecutive token events inside the window, ns.
    pub gaps: &'a Column,
    /// Whose those gaps are, in their order: (request id, how many).
    pub gap_owners: &'a [(i64, usize)],
    /// How long read chunks waited before the recorder parsed them, ns.
    pub queue_delays: &'a Column,
    /// Repetitions of at least the shorter of the loop and suspect spans, per stream
    /// and channel the loop rules look at.
    pub repeats: Vec<Repeats<'a>>,
    /// GPU telemetry over the whole cell, in time order (empty without it).
    pub gpu: &'a [tokentrace_schemas::tables::GpuRow],
    /// Per request with something found in its text: what the text rules read of it,
    /// taken as it was read ([`Loaded::said`]) or here from its whole text.
    pub said: Cow<'a, BTreeMap<i64, Said>>,
    /// What the content checks found, computed once for the figures, the warnings and
    /// the verdicts (`content::found`).
    pub content: std::cell::OnceCell<Vec<crate::contract::ContentFindings>>,
}

impl<'a> DecodeView<'a> {
    /// The view of `key`, or `None` when the cell has no measurement window.
    pub fn new(
        key: CellKey,
        loaded: &'a Loaded,
        rules: &RuleSet,
        preset: &'a Preset,
    ) -> Option<Self> {
        let &(open, close) = loaded.windows.get(&key)?;
        let all = requests(loaded, key);
        // Sized for every request up front: a cell of many requests would otherwise
        // grow the vector by doubling, to twice what it holds.
        let mut streams: Vec<Stream<'a>> = Vec::with_capacity(all.len());
        streams.extend(
            all.iter()
                .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
                .map(|r| Stream {
                    count: Some(rules.tokens.count),
                    ..stream(loaded, r)
                }),
        );
        let samples = loaded.samples.get(&key);
        let series = |name: Option<&'a String>| samples.zip(name).and_then(|(s, n)| s.get(n));
        let gauge = |name: &'a Option<String>| Gauge {
            metric: name.as_deref(),
            samples: series(name.as_ref())
                .map(|v| {
                    v.iter()
                        .filter(|s| s.start_ns >= open && s.end_ns <= close)
                        .collect()
                })
                .unwrap_or_default(),
        };
        let said = said_of(&streams, loaded, rules);
        let repeats = repeats(&streams, &said, loaded);
        let (queries, hits) = preset.prefix_cache();
        let named = |name: Option<&'static str>| Gauge {
            metric: name,
            samples: name
                .and_then(|n| samples.and_then(|s| s.get(n)))
                .map(|v| {
                    v.iter()
                        .filter(|s| s.start_ns >= open && s.end_ns <= close)
                        .collect()
                })
                .unwrap_or_default(),
        };
        Some(DecodeView {
            key,
            open,
            close,
            events: loaded.events.get(&key).map(Vec::as_slice).unwrap_or(&[]),
            running: gauge(&preset.running),
            waiting: gauge(&preset.waiting),
            generated: gauge(&preset.generated_tokens),
            kv_usage: gauge(&preset.kv_cache_usage),
            prefix_queries: named(queries),
            prefix_hits: named(hits),
            spec: SpecSeries {
                drafts: gauge(&preset.spec_drafts),
                draft_tokens: gauge(&preset.spec_draft_tokens),
                accepted_tokens: gauge(&preset.spec_accepted_tokens),
                accept_length: gauge(&preset.spec_accept_length),
            },
            client_lag: samples
                .and_then(|s| s.get(tokentrace_schemas::protocol::CLIENT_LAG_METRIC))
                .map(Vec::as_slice)
                .unwrap_or(&[]),
            tick_counts: loaded
                .tick_counts
                .get(&key)
                .map(Vec::as_slice)
                .unwrap_or(&[]),
            gaps: loaded.gaps.get(&key).unwrap_or(&column::EMPTY),
            gap_owners: loaded
                .gap_owners
                .get(&key)
                .map(Vec::as_slice)
                .unwrap_or(&[]),
            queue_delays: loaded.queue_delays.get(&key).unwrap_or(&column::EMPTY),
            streams,
            repeats,
            gpu: loaded.gpu.get(&key).map(Vec::as_slice).unwrap_or(&[]),
            said,
            content: std::cell::OnceCell::new(),
        })
    }

    /// The GPUs' mean power draw over the window, watts, summed over GPUs. Per GPU: its
    /// energy counter's increase between its first and last sample inside the window
    /// over the time between them; without two such readings, the mean of its power
    /// samples inside the window. `None` without telemetry inside the window.
    pub fn gpu_power_w(&self) -> Option<f64> {
        let inside: Vec<&tokentrace_schemas::tables::GpuRow> = self
            .gpu
            .iter()
            .filter(|r| r.sample_ns >= self.open && r.sample_ns <= self.close)
            .collect();
        let mut gpus: Vec<i32> = inside.iter().map(|r| r.gpu).collect();
        gpus.sort_unstable();
        gpus.dedup();
        let mut total = None;
        for g in gpus {
            let rows: Vec<_> = inside.iter().filter(|r| r.gpu == g).collect();
            let counters: Vec<(i64, i64)> = rows
                .iter()
                .filter_map(|r| r.energy_mj.map(|e| (r.sample_ns, e)))
                .collect();
            let from_energy = match (counters.first(), counters.last()) {
                (Some(&(t0, e0)), Some(&(t1, e1))) if t1 > t0 && e1 >= e0 => {
                    Some((e1 - e0) as f64 / 1e3 / ((t1 - t0) as f64 / 1e9))
                }
                _ => None,
            };
            let power: Vec<f64> = rows
                .iter()
                .filter_map(|r| r.power_w)
                .filter(|p| p.is_finite())
                .collect();
            let mean = (!power.is_empty()).then(|| power.iter().sum::<f64>() / power.len() as f64);
            if let Some(w) = from_energy.or(mean) {
                *total.get_or_insert(0.0) += w;
            }
        }
        total
    }

    pub fn window_ns(&self) -> i64 {
        self.close - self.open
    }

    /// The server's own time between one request's tokens over the window, ns: its mean
    /// running requests over its generated tokens per second, between the first and
    /// the last scrape inside the window; `None` without both series.
    pub fn server_token_interval_ns(&self) -> Option<f64> {
        let tokens = self.generated.increase()?;
        let (first, last) = (
            self.generated.samples.first()?,
            self.generated.samples.last()?,
        );
        let span_ns = (last.start_ns - first.start_ns) as f64;
        let running = self.running.mean()?;
        (tokens > 0.0 && span_ns > 0.0 && running > 0.0).then(|| running * span_ns / tokens)
    }

    /// The recorder's latest tick in the seconds that overlap the window, ms.
    pub fn tick_lateness_max_ms(&self) -> Option<f64> {
        Some(
            self.client_lag
                .iter()
                .filter(|s| s.end_ns > self.open && s.start_ns < self.close && !s.value.is_nan())
                .map(|s| s.value * 1e3)
                .fold(f64::NAN, f64::max),
        )
        .filter(|t| !t.is_nan())
    }

    /// The share of the ticks in the seconds that overlap the window that were later
    /// than the first of the recorder's thresholds at or above `late_ms`; `None` without
    /// tick counts.
    pub fn late_tick_share(&self, late_ms: f64) -> Option<f64> {
        let at = LATE_TICK_MS
            .iter()
            .position(|&t| f64::from(t) >= late_ms)
            .unwrap_or(LATE_TICK_MS.len() - 1);
        let (late, ticks) = self
            .tick_counts
            .iter()
            .filter(|s| s.end_ns > self.open && s.start_ns < self.close)
            .fold((0.0, 0.0), |(l, t), s| {
                (l + s.over.get(at).copied().unwrap_or(0.0), t + s.ticks)
            });
        (ticks > 0.0).then(|| late / ticks)
    }

    /// The streams the rule set's request scope keeps, whether or not they streamed a
    /// token.
    pub fn in_scope<'v>(&'v self, rules: &'v RuleSet) -> impl Iterator<Item = &'v Stream<'a>> {
        let (open, close) = (self.open, self.close);
        self.streams
            .iter()
            .filter(move |s| match rules.requests.scope {
                RequestScope::All => true,
                RequestScope::OverlappingWindow => {
                    s.info.sent_ns.is_some_and(|t| t < close)
                        && s.info.end_ns.is_none_or(|e| e >= open)
                }
            })
    }

    /// Whether `t` falls inside the window (both ends included).
    pub fn in_window(&self, t: i64) -> bool {
        t >= self.open && t <= self.close
    }
}

fn requests(loaded: &Loaded, key: CellKey) -> &[RequestInfo] {
    loaded.requests.get(&key).map(Vec::as_slice).unwrap_or(&[])
}

/// Request `r` with its aggregates, counted as recorded.
fn stream<'a>(loaded: &'a Loaded, r: &'a RequestInfo) -> Stream<'a> {
    Stream {
        info: r,
        agg: loaded.tokens.get(&r.request_id),
        count: None,
    }
}

/// What the text rules read of each stream's text: as the fold took it while reading
/// (when the load was given the rules: [`Loaded::text_rules`]), else from each whole
/// text here, in parallel (each request's is independent).
fn said_of<'a>(
    streams: &[Stream<'a>],
    loaded: &'a Loaded,
    rules: &RuleSet,
) -> Cow<'a, BTreeMap<i64, Said>> {
    if loaded.text_rules.is_some() {
        return Cow::Borrowed(&loaded.said);
    }
    let found: Vec<(i64, Said)> = streams
        .par_iter()
        .filter_map(|s| {
            let (content, reasoning) = loaded.text.get(&s.info.request_id)?;
            let said = crate::said::said(s.info, &s.raw(), content, reasoning, rules);
            (!said.is_empty()).then_some((s.info.request_id, said))
        })
        .collect();
    Cow::Owned(found.into_iter().collect())
}

/// The repetitions found in every text the loop rules look at, in stream and channel
/// order (`found` holds the repetitions within the cycle cap, then those beyond it).
fn repeats<'a>(
    streams: &[Stream<'a>],
    said: &BTreeMap<i64, Said>,
    loaded: &'a Loaded,
) -> Vec<Repeats<'a>> {
    let mut out = Vec::new();
    for s in streams {
        let r = s.info;
        let (Some(said), Some((content, reasoning))) =
            (said.get(&r.request_id), loaded.text.get(&r.request_id))
        else {
            continue;
        };
        for (channel, found) in &said.repeats {
            out.push(Repeats {
                stream: r,
                channel: *channel,
                text: match channel {
                    Channel::Content => content,
                    Channel::Reasoning => reasoning,
                },
                found: found.clone(),
            });
        }
    }
    out
}
