//! The warning rules, one function each, from a decode cell's view and the rule set to
//! what a reader should know that is not a verdict: suspected loops, missing server
//! gauges, the recorder's own lag, a drain that timed out, and prefills that were not
//! what the cell measures (cold in a decode cell, warm in a burst or rate cell),
//! streams the network re-chunked, and lifecycle events whose detail could not be read.

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::protocol::{self, Drain};
use tokentrace_schemas::tables::EventKind;

use super::measure::{first_token, is_cold, is_rechunked, ms, prompt_tokens, scored};
use super::verdicts::suspect_in;
use super::view::{DecodeView, PrefillView, Stream};
use crate::contract::{ColdRequest, RechunkEvidence, RechunkedRequest, Warning};
use crate::data::RequestInfo;
use crate::rules::RuleSet;
use crate::stats;

/// A warning rule of decode cells.
pub type DecodeWarning = fn(&DecodeView, &RuleSet) -> Vec<Warning>;

/// The warning rules of burst and rate cells, in the order their warnings are listed.
pub const OPEN: [DecodeWarning; 8] = [
    suspected_loops,
    client_lag,
    drain_incomplete,
    unread_event_detail,
    warm_prefill,
    content,
    connections,
    rechunked,
];

/// Every conversation-cell warning rule but the cache's own (`talk::prefix_evicted`),
/// in the order their warnings are listed: as burst and rate cells, but a conversation's
/// warm prefixes are what it measures.
pub const CONVERSATION: [DecodeWarning; 7] = [
    suspected_loops,
    client_lag,
    drain_incomplete,
    unread_event_detail,
    content,
    connections,
    rechunked,
];

/// Every replay-cell warning rule, in the order their warnings are listed: as burst and
/// rate cells, but a replay's cache hits are the workload's own sharing (its figures
/// compare them), and its schedule is the workload's.
pub const REPLAY: [DecodeWarning; 8] = [
    suspected_loops,
    client_lag,
    drain_incomplete,
    unread_event_detail,
    schedule_lag,
    content,
    connections,
    rechunked,
];

/// Every decode warning rule, in the order their warnings are listed.
pub const DECODE: [DecodeWarning; 9] = [
    suspected_loops,
    no_server_metrics,
    client_lag,
    drain_incomplete,
    unread_event_detail,
    cold_prefill,
    content,
    connections,
    rechunked,
];

/// Cold requests listed in a `cold_prefill` warning; the rest are counted.
const COLD_LISTED: usize = 10;

/// The scored requests of `v` that `pick` selects, as listed in a cache warning: the
/// first [`COLD_LISTED`], how many more, and how many requests are scored.
fn cache_requests(
    v: &DecodeView,
    rules: &RuleSet,
    pick: impl Fn(&RequestInfo) -> bool,
) -> Option<(Vec<ColdRequest>, usize, usize)> {
    let mut of = 0;
    let all: Vec<ColdRequest> = scored(v, rules)
        .inspect(|_| of += 1)
        .filter(|s| pick(s.info))
        .map(|s| ColdRequest {
            request_id: s.info.request_id,
            role: s.info.role.as_str().to_string(),
            cached_tokens: i64::from(s.info.cached_tokens.unwrap_or(0)),
            prompt_tokens: prompt_tokens(s.info),
            ttft_ms: first_token(&s.tokens(), rules.ttft.first)
                .zip(s.info.sent_ns)
                .map(|(f, t)| ms(f - t)),
        })
        .collect();
    if all.is_empty() {
        return None;
    }
    let more = all.len().saturating_sub(COLD_LISTED);
    Some((all.into_iter().take(COLD_LISTED).collect(), more, of))
}

/// Requests whose TTFT counts in the figures but whose prompt was mostly not cached:
/// their TTFT holds a cold prefill (a per-slot cache the warm-up missed, an evicted
/// prefix).
pub fn cold_prefill(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    let Some(min_fraction) = rules.cache.warm_min_cached_fraction else {
        return Vec::new();
    };
    cache_requests(v, rules, |r| is_cold(r, rules))
        .map(|(requests, more, _)| Warning::ColdPrefill {
            requests,
            more,
            min_fraction,
            excluded_from_ttft: rules.cache.ttft_excludes_cold,
        })
        .into_iter()
        .collect()
}

/// Burst and rate cells: requests whose prompt the server mostly served from its prefix
/// cache (at least the rule's fraction), so their TTFT and E2E latency are not those of
/// the cold prefill these cells measure.
pub fn warm_prefill(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    let Some(min_fraction) = rules.cache.warm_min_cached_fraction else {
        return Vec::new();
    };
    let warm = |r: &RequestInfo| {
        let prompt = prompt_tokens(r);
        r.cached_tokens
            .is_some_and(|c| prompt > 0 && c as f64 >= min_fraction * prompt as f64)
    };
    cache_requests(v, rules, warm)
        .map(|(requests, more, of)| Warning::WarmPrefill {
            requests,
            more,
            of,
            min_fraction,
        })
        .into_iter()
        .collect()
}

/// A text repeats itself, short of the loop thresholds but above the suspect ones.
pub fn suspected_loops(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    v.repeats
        .iter()
        .filter_map(|r| suspect_in(r, rules))
        .map(Warning::SuspectedLoop)
        .collect()
}

/// The server's running or waiting gauge has no scrape inside the window (or the preset
/// names none): queueing was not judged from the server.
pub fn no_server_metrics(v: &DecodeView, _: &RuleSet) -> Vec<Warning> {
    let missing: Vec<String> = [
        (&v.running, "requests running"),
        (&v.waiting, "requests waiting"),
    ]
    .into_iter()
    .filter(|(g, _)| g.metric.is_none() || g.samples.is_empty())
    .map(|(g, what)| g.metric.unwrap_or(what).to_string())
    .collect();
    if missing.is_empty() {
        Vec::new()
    } else {
        vec![Warning::NoServerMetrics { missing }]
    }
}

/// The `p`-th percentile of the cell's queueing delays, ms, taken exactly from the
/// column (`None` when it has none, or its temporary file could not be read).
fn queue_delay_percentile(v: &DecodeView, p: f64, rules: &RuleSet) -> Option<f64> {
    let n = v.queue_delays.extent()?.n;
    crate::column::at_ranks(
        |ranks| v.queue_delays.select(ranks),
        |at| stats::percentile_by(n, p, rules.stats.percentile, at),
        ms,
    )
    .ok()
    .flatten()
}

/// The recorder lagged: more than the rule's share of its ticks were late (sustained
/// lag; one late tick is only in the figures), or, for runs without tick counts, its
/// latest tick was beyond the limit; or chunks waited to be parsed beyond the limit.
pub fn client_lag(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    let lag = &rules.client_lag;
    let tick_max = v.tick_lateness_max_ms();
    let queue_p99 = queue_delay_percentile(v, 99.0, rules);
    let share = lag
        .late_tick_ms
        .zip(lag.late_tick_share_max)
        .and_then(|(late_ms, _)| v.late_tick_share(late_ms));
    let ticks_late = match (share, lag.late_tick_share_max) {
        (Some(s), Some(max)) => s > max,
        _ => tick_max.is_some_and(|t| t > lag.tick_lateness_max_ms),
    };
    if ticks_late || queue_p99.is_some_and(|q| q > lag.queue_delay_p99_ms) {
        vec![Warning::ClientLag {
            tick_lateness_max_ms: tick_max,
            queue_delay_p99_ms: queue_p99,
            tick_threshold_ms: lag.tick_lateness_max_ms,
            queue_threshold_ms: lag.queue_delay_p99_ms,
            late_tick_share: share,
            late_tick_ms: share.and(lag.late_tick_ms),
            late_tick_share_max: share.and(lag.late_tick_share_max),
        }]
    } else {
        Vec::new()
    }
}

/// The drain barrier after the cell timed out with requests still on the server. Only a
/// timeout is evidence: without metrics there was nothing to check (that has its own
/// warning).
pub fn drain_incomplete(v: &DecodeView, _: &RuleSet) -> Vec<Warning> {
    v.events
        .iter()
        .filter(|e| e.kind == EventKind::DrainEnd)
        .find_map(|e| e.detail.as_deref().and_then(Drain::from_detail))
        .filter(|d| matches!(d, Drain::TimedOut { .. }))
        .map(|d| Warning::DrainIncomplete {
            detail: d.to_string(),
        })
        .into_iter()
        .collect()
}

/// The cell's `warmup_end` and `drain_end` events whose detail this reader cannot read
/// ([`protocol::unread_detail`]): the warm-up and drain checks read them as saying
/// nothing, so each is named, with its text, rather than let the cell pass as Valid
/// without a word.
pub fn unread_event_detail(v: &DecodeView, _: &RuleSet) -> Vec<Warning> {
    v.events
        .iter()
        .filter(|e| protocol::unread_detail(e.kind, e.detail.as_deref()))
        .map(|e| Warning::UnreadEventDetail {
            event: e.kind.as_str().to_string(),
            time_ns: e.time_ns,
            detail: e.detail.clone().unwrap_or_default(),
        })
        .collect()
}

/// The content checks' findings, where the rule set does not make them a verdict.
pub fn content(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    if rules.content.verdict {
        return Vec::new();
    }
    super::content::found(v, rules)
        .iter()
        .cloned()
        .map(Warning::Content)
        .collect()
}

/// Requests sent again on a new connection, or workers that reconnected, beyond the
/// rule's limits.
pub fn connections(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    let c = &rules.connections;
    if c.max_retries.is_none() && c.max_reconnects.is_none() {
        return Vec::new();
    }
    let mut f = crate::contract::Figures::default();
    super::measure::connections(v, &mut f);
    let (Some(retries), Some(opened)) = (f.retries, f.connections_opened) else {
        return Vec::new();
    };
    let over = |n: Option<i64>, max: Option<u32>| n.zip(max).is_some_and(|(n, m)| n > i64::from(m));
    if over(Some(retries), c.max_retries) || over(f.reconnects, c.max_reconnects) {
        vec![Warning::Connections {
            retries,
            reconnects: f.reconnects,
            connections_opened: opened,
            max_retries: c.max_retries,
            max_reconnects: c.max_reconnects,
        }]
    } else {
        Vec::new()
    }
}

/// Replay cells: requests left later than their schedule by more than the rule's limit
/// at its percentile, so the server did not see the workload's load.
pub fn schedule_lag(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    let (Some(p), Some(max_lag_ms)) = (rules.replay.lag_percentile, rules.replay.max_lag_ms) else {
        return Vec::new();
    };
    let lags: Vec<f64> = v
        .streams
        .iter()
        .filter(|s| s.info.role == tokentrace_schemas::tables::Role::Measured)
        .filter_map(|s| s.info.sent_ns.map(|sent| ms(sent - s.info.scheduled_ns)))
        .collect();
    let of = lags.len();
    let sorted = crate::stats::sorted(lags);
    let Some(lag_ms) = crate::stats::percentile(&sorted, p, rules.stats.percentile) else {
        return Vec::new();
    };
    if lag_ms <= max_lag_ms {
        return Vec::new();
    }
    vec![Warning::ScheduleLag {
        lag_ms,
        percentile: p,
        max_lag_ms,
        worst_ms: sorted.last().copied().unwrap_or(lag_ms),
        late: sorted.iter().filter(|l| **l > max_lag_ms).count(),
        of,
    }]
}

/// Re-chunked requests listed in a `rechunked` warning; the rest are counted.
const RECHUNKED_LISTED: usize = 10;

/// "The network re-chunked this stream": the scored requests whose token events came
/// the rule's number or more to a read (rule `[network]`), with the server's own time
/// between a request's tokens beside them where its metrics give it.
pub fn rechunked(v: &DecodeView, rules: &RuleSet) -> Vec<Warning> {
    let server = v.server_token_interval_ns().map(|ns| ns / 1e6);
    rechunk_warning(scored(v, rules), rules, rules.ttft.first, server)
        .into_iter()
        .collect()
}

/// A prefill cell's scout whose stream the network re-chunked: its TTFT is the buffer's.
pub fn rechunked_scout(v: &PrefillView, rules: &RuleSet) -> Vec<Warning> {
    rechunk_warning(v.scout.iter(), rules, rules.ttft.prefill(), None)
        .into_iter()
        .collect()
}

/// The warning over `streams`, or `None` when the rule is off or none was re-chunked.
fn rechunk_warning<'s, 'a: 's>(
    streams: impl Iterator<Item = &'s Stream<'a>>,
    rules: &RuleSet,
    first: crate::rules::FirstToken,
    server_token_interval_ms: Option<f64>,
) -> Option<Warning> {
    let n = &rules.network;
    let events_per_read = n.rechunk_events_per_read?;
    let min = i64::from(n.rechunk_min_events.max(1));
    let judged: Vec<&Stream> = streams.filter(|s| s.tokens().token_events >= min).collect();
    let flagged: Vec<&Stream> = judged
        .iter()
        .copied()
        .filter(|s| is_rechunked(&s.tokens(), rules))
        .collect();
    if flagged.is_empty() {
        return None;
    }
    let (events, reads) = flagged.iter().fold((0, 0), |(e, r), s| {
        (e + s.tokens().token_events, r + s.tokens().token_reads)
    });
    let requests = flagged
        .iter()
        .take(RECHUNKED_LISTED)
        .map(|s| {
            let a = s.tokens();
            RechunkedRequest {
                request_id: s.info.request_id,
                role: s.info.role.as_str().to_string(),
                token_events: a.token_events,
                reads: a.token_reads,
                largest_read: a.largest_read,
                span_ms: a
                    .first_token_ns
                    .zip(a.last_token_ns)
                    .map(|(f, l)| ms(l - f)),
                ttft_ms: first_token(&a, first)
                    .zip(s.info.sent_ns)
                    .map(|(f, t)| ms(f - t)),
            }
        })
        .collect();
    Some(Warning::Rechunked(Box::new(RechunkEvidence {
        fault: "buffering".to_string(),
        requests,
        more: flagged.len().saturating_sub(RECHUNKED_LISTED),
        of: judged.len(),
        events_per_read,
        mean_events_per_read: events as f64 / reads.max(1) as f64,
        server_token_interval_ms,
        excluded_from_latency: n.rechunk_excludes_latency,
    })))
}
