//! The figures of a cell: throughput over the window, per-request summaries (TTFT, time
//! between tokens, rate, end-to-end latency), inter-chunk gaps and active requests for
//! decode; the scout's TTFT and prompt rate for prefill.

use tokentrace_schemas::Phase;
use tokentrace_schemas::tables::EndReason;

use super::view::{DecodeView, PrefillView, Stream};
use crate::column;
use crate::contract::{Figures, Summary, Verdict};
use crate::data::{RequestInfo, TokenAgg};
use crate::rules::{ActiveSource, FirstToken, PerRequest, RuleSet, TbtDenominator};
use crate::stats;

pub fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

pub fn summary(values: Vec<f64>, rules: &RuleSet) -> Summary {
    let v = stats::sorted(values);
    summary_by(v.len(), &|i| v[i], rules)
}

/// The summary of `n` values of which `at(i)` gives the one at rank `i` (ascending).
fn summary_by(n: usize, at: &dyn Fn(usize) -> f64, rules: &RuleSet) -> Summary {
    Summary {
        n,
        median: stats::median_by(n, at, rules.stats.median),
        percentiles: rules
            .stats
            .percentiles
            .iter()
            .filter_map(|p| {
                stats::percentile_by(n, *p, rules.stats.percentile, at)
                    .map(|x| (format!("p{p}"), x))
            })
            .collect(),
        max: (n > 0).then(|| at(n - 1)),
    }
}

/// The summary, in ms, of the ns values a scan gives (of extent `e`), taken exactly
/// from a few passes over them ([`column::select`]) rather than from a sorted copy: the
/// same figures as [`summary`] of the same values as ms. A scan that fails to read
/// (the column's temporary file) leaves the count and nothing else.
pub fn summary_ns(scan: &column::Scan<'_>, e: Option<column::Extent>, rules: &RuleSet) -> Summary {
    let Some(e) = e else {
        return summary(Vec::new(), rules);
    };
    column::at_ranks(
        |ranks| column::select(scan, e, ranks),
        |at| summary_by(e.n, at, rules),
        ms,
    )
    .unwrap_or(Summary {
        n: e.n,
        ..Summary::default()
    })
}

/// The summary, in ms, of a column of ns values (see [`summary_ns`]).
pub fn column_summary(c: &column::Column, rules: &RuleSet) -> Summary {
    summary_ns(&|f| c.scan(f), c.extent(), rules)
}

/// The first token's arrival under the TTFT rule.
pub fn first_token(agg: &TokenAgg, rule: FirstToken) -> Option<i64> {
    match rule {
        FirstToken::FirstChunk => agg.first_chunk_ns,
        FirstToken::FirstContent => agg.first_content_ns,
        FirstToken::FirstContentOrReasoning => agg.first_text_ns,
    }
}

pub fn is_finished(r: &RequestInfo) -> bool {
    matches!(
        r.end_reason,
        EndReason::FinishedStop | EndReason::FinishedLength | EndReason::FinishedOther
    )
}

/// The prompt tokens of a request as the server counted them (else as asked).
pub fn prompt_tokens(r: &RequestInfo) -> i64 {
    i64::from(r.prompt_tokens_server.unwrap_or(r.prompt_tokens_requested))
}

/// Whether the request prefilled cold: the server said less than the rule's fraction of
/// its prompt came from the prefix cache. Unknown (no usage) is not cold.
pub fn is_cold(r: &RequestInfo, rules: &RuleSet) -> bool {
    let prompt = prompt_tokens(r);
    rules.cache.warm_min_cached_fraction.is_some_and(|f| {
        r.cached_tokens
            .is_some_and(|c| prompt > 0 && (c as f64) < f * prompt as f64)
    })
}

/// Whether the network re-chunked a request's stream (rule `[network]`): it has at
/// least the rule's token events, and they came at least the rule's number to a read on
/// average. A server writes one event per step; many to a read were held on the way.
pub fn is_rechunked(a: &TokenAgg, rules: &RuleSet) -> bool {
    let n = &rules.network;
    n.rechunk_events_per_read.is_some_and(|limit| {
        a.token_events >= i64::from(n.rechunk_min_events.max(1))
            && a.token_reads > 0
            && a.token_events as f64 >= limit * a.token_reads as f64
    })
}

/// Whether a request's timing is left out of the latency figures: the network
/// re-chunked it and the rule leaves such requests out.
pub fn latency_excluded(a: &TokenAgg, rules: &RuleSet) -> bool {
    rules.network.rechunk_excludes_latency && is_rechunked(a, rules)
}

/// The summary of the gaps between token events that the figures take: all of them,
/// less those of the requests [`latency_excluded`] leaves out.
fn latency_gaps(v: &DecodeView, rules: &RuleSet) -> Summary {
    let out: std::collections::BTreeSet<i64> = v
        .streams
        .iter()
        .filter(|s| latency_excluded(&s.tokens(), rules))
        .map(|s| s.info.request_id)
        .collect();
    if out.is_empty() {
        return column_summary(v.gaps, rules);
    }
    // The column in runs of each request's gaps: those of a left-out request are
    // skipped (and any past the last run, as the runs account for every gap).
    let runs: Vec<(bool, usize)> = v
        .gap_owners
        .iter()
        .map(|(id, n)| (!out.contains(id), *n))
        .collect();
    let scan = |f: &mut dyn FnMut(i64)| {
        let mut runs = runs.iter();
        let (mut keep, mut left) = (false, 0usize);
        v.gaps.scan(&mut |x| {
            while left == 0 {
                (keep, left) = runs.next().copied().unwrap_or((false, usize::MAX));
            }
            left -= 1;
            if keep {
                f(x);
            }
        })
    };
    match column::Extent::of(&scan) {
        Ok(e) => summary_ns(&scan, e, rules),
        Err(_) => Summary::default(),
    }
}

/// The streams the per-request figures are taken over: those in the request scope that
/// streamed a token. (The rule's minimum of tokens gates only the figures that need two
/// tokens: see [`per_token_ns`]. A one-token answer has a TTFT and an E2E latency.)
pub fn scored<'v, 'a>(
    v: &'v DecodeView<'a>,
    rules: &'v RuleSet,
) -> impl Iterator<Item = &'v Stream<'a>> {
    v.in_scope(rules).filter(|s| s.tokens().tokens > 0)
}

/// The scout's TTFT, ns, under the TTFT rule.
pub fn scout_ttft(scout: &Stream, rules: &RuleSet) -> Option<i64> {
    first_token(&scout.tokens(), rules.ttft.prefill())
        .zip(scout.info.sent_ns)
        .map(|(f, s)| f - s)
}

pub fn prefill(v: &PrefillView, rules: &RuleSet) -> Figures {
    let mut f = Figures::default();
    let Some(scout) = &v.scout else { return f };
    let ttft = scout_ttft(scout, rules).filter(|_| !latency_excluded(&scout.tokens(), rules));
    let prompt = prompt_tokens(scout.info);
    f.prompt_tokens = Some(prompt);
    f.ttft_ms = summary(ttft.map(ms).into_iter().collect(), rules);
    f.prompt_tok_s = ttft
        .filter(|t| *t > 0)
        .map(|t| prompt as f64 / (t as f64 / 1e9));
    f.total_tok_s = f.prompt_tok_s;
    f.completed_requests = i64::from(is_finished(scout.info));
    f.requests_scored = usize::from(ttft.is_some());
    f
}

/// A request's time between tokens, ns: first to last token event over the tokens the
/// rule counts after the first; `None` with too few tokens or events.
fn per_token_ns(a: &TokenAgg, rules: &RuleSet) -> Option<f64> {
    if a.tokens < i64::from(rules.requests.min_tokens) {
        return None;
    }
    let denominator = match rules.requests.tbt_denominator {
        TbtDenominator::TokensMinusOne => a.tokens - 1,
        TbtDenominator::TokensAfterFirstEvent => a.tokens - a.first_token_tokens,
    };
    match (a.first_token_ns, a.last_token_ns) {
        (Some(first), Some(last)) if denominator > 0 && last > first => {
            Some((last - first) as f64 / denominator as f64)
        }
        _ => None,
    }
}

pub fn decode(v: &DecodeView, rules: &RuleSet) -> Figures {
    let (open, close) = (v.open, v.close);
    let window_ns = v.window_ns();
    let window_s = window_ns as f64 / 1e9;
    let mut f = Figures {
        window_s: Some(window_s),
        ..Figures::default()
    };
    f.output_tokens = v.streams.iter().map(|s| s.tokens().tokens_in_window).sum();
    // Requests without a token count either way (none streamed) say nothing.
    let usage = v.streams.iter().filter(|s| s.counted_from_usage()).count();
    let recorded = v
        .streams
        .iter()
        .filter(|s| !s.counted_from_usage() && s.tokens().tokens > 0)
        .count();
    f.token_source = Some(
        match (usage, recorded) {
            (0, _) => "recorded",
            (_, 0) => "usage",
            _ => "usage and recorded",
        }
        .to_string(),
    );
    f.token_disagreements = v.streams.iter().filter(|s| s.disagrees()).count();
    f.client_tick_lateness_max_ms = v.tick_lateness_max_ms();
    f.client_late_tick_share = rules
        .client_lag
        .late_tick_ms
        .and_then(|ms| v.late_tick_share(ms));
    f.total_tok_s = (window_ns > 0).then(|| f.output_tokens as f64 / window_s);
    f.gpu_power_w = v.gpu_power_w();
    f.tokens_per_joule = match (f.total_tok_s, f.gpu_power_w) {
        (Some(rate), Some(w)) if w > 0.0 => Some(rate / w),
        _ => None,
    };
    // Burst and rate cells measure the wait a user sees, a cold prefill included; a
    // decode cell's TTFT may leave cold requests out (the rule's choice).
    let open_cell = matches!(v.key.phase, Phase::Burst | Phase::Rate);
    let (mut reasoning_sum, mut token_sum, mut count) = (0i64, 0i64, 0usize);
    for s in scored(v, rules) {
        let a = s.tokens();
        count += 1;
        reasoning_sum += a.reasoning_tokens;
        token_sum += a.tokens;
    }
    // Each figure's values are gathered, summarised and dropped in turn: a cell of many
    // requests holds one such vector at a time, sized to its requests.
    let per = |value: &dyn Fn(&RequestInfo, &TokenAgg, bool) -> Option<f64>| {
        let mut values = Vec::with_capacity(count);
        values.extend(scored(v, rules).filter_map(|s| {
            let a = s.tokens();
            // The network's timing is not the engine's (rule `[network]`).
            value(s.info, &a, !latency_excluded(&a, rules))
        }));
        summary(values, rules)
    };
    let since_sent = |t: Option<i64>, r: &RequestInfo, timed: bool| {
        t.zip(r.sent_ns)
            .filter(|_| timed)
            .map(|(t, sent)| ms(t - sent))
    };
    f.requests_scored = count;
    f.ttft_ms = per(&|r, a, timed| {
        let counted = open_cell || !(rules.cache.ttft_excludes_cold && is_cold(r, rules));
        since_sent(first_token(a, rules.ttft.first), r, timed && counted)
    });
    f.ttft_reasoning_ms = per(&|r, a, timed| since_sent(a.first_reasoning_ns, r, timed));
    f.ttft_content_ms = per(&|r, a, timed| since_sent(a.first_content_ns, r, timed));
    f.reasoning_tokens = per(&|_, a, _| Some(a.reasoning_tokens as f64));
    f.reasoning_share = (token_sum > 0).then(|| reasoning_sum as f64 / token_sum as f64);
    f.time_between_tokens_ms =
        per(&|_, a, timed| per_token_ns(a, rules).filter(|_| timed).map(|ns| ns / 1e6));
    f.per_request_tok_s = match rules.requests.per_request {
        // One figure per closed-loop cell: its median, no spread. Open-loop cells have no
        // concurrency to divide by: the median of the requests' own speeds.
        PerRequest::TotalOverConcurrency if v.key.concurrency > 0 => Summary {
            n: count,
            median: f.total_tok_s.map(|t| t / f64::from(v.key.concurrency)),
            ..Summary::default()
        },
        _ => per(&|_, a, timed| per_token_ns(a, rules).filter(|_| timed).map(|ns| 1e9 / ns)),
    };
    f.e2e_latency_ms = per(&|r, _, _| {
        let (sent, end) = (r.sent_ns?, r.end_ns?);
        is_finished(r).then(|| ms(end - sent))
    });
    f.itl_ms = latency_gaps(v, rules);
    f.completed_requests = v
        .streams
        .iter()
        .filter(|s| is_finished(s.info) && s.info.end_ns.is_some_and(|e| v.in_window(e)))
        .count() as i64;
    goodput(v, rules, &mut f);
    speculative(v, &mut f);
    connections(v, &mut f);
    content(v, rules, &mut f);

    if v.key.phase == Phase::Decode {
        let sends: Vec<i64> = v
            .streams
            .iter()
            .filter_map(|s| s.info.sent_ns)
            .filter(|&t| t >= open && t < close)
            .collect();
        (f.sends_per_10ms_max, f.send_dispersion) = burstiness(&sends, open, close);
    }
    let client_active = {
        let busy: i64 = v
            .streams
            .iter()
            .filter_map(|s| {
                let start = s.info.sent_ns?.max(open);
                let end = s.info.end_ns.unwrap_or(close).min(close);
                (end > start).then_some(end - start)
            })
            .sum();
        (window_ns > 0).then(|| busy as f64 / window_ns as f64)
    };
    (f.active_requests, f.active_source) = match (rules.active.source, v.running.mean()) {
        (ActiveSource::Server, Some(m)) => (Some(m), Some("server".to_string())),
        _ => (client_active, Some("client".to_string())),
    };
    f
}

/// Speculative decoding over the window, from the engine's counters (vLLM): accepted
/// over proposed draft tokens, and the mean acceptance length (1 + accepted tokens per
/// draft step: tokens per request per step, as vLLM's log prints it); else from its
/// acceptance-length gauge (SGLang). And, from the client's side, output tokens per
/// streamed event: what a step delivered to each request. What cannot be computed is
/// named in `unavailable` with the reason.
pub fn speculative(v: &DecodeView, f: &mut Figures) {
    let events: i64 = v
        .streams
        .iter()
        .map(|s| s.tokens().token_events_in_window)
        .sum();
    let tokens: i64 = v.streams.iter().map(|s| s.tokens().tokens_in_window).sum();
    f.tokens_per_event = (events > 0).then(|| tokens as f64 / events as f64);
    if events == 0 {
        f.unavailable.insert(
            "tokens_per_event".to_string(),
            "no token events inside the window".to_string(),
        );
    }
    let s = &v.spec;
    let counted = [&s.drafts, &s.draft_tokens, &s.accepted_tokens];
    let why = if counted.iter().all(|g| g.metric.is_none()) && s.accept_length.metric.is_none() {
        Some("the engine preset names no speculative-decoding series".to_string())
    } else if counted.iter().all(|g| g.samples.is_empty()) && s.accept_length.samples.is_empty() {
        Some(format!(
            "no {} scraped inside the window: speculative decoding off, or the server does \
             not expose it",
            counted
                .iter()
                .chain([&&s.accept_length])
                .filter_map(|g| g.metric)
                .collect::<Vec<_>>()
                .join(" or ")
        ))
    } else {
        match (
            s.drafts.increase(),
            s.draft_tokens.increase(),
            s.accepted_tokens.increase(),
        ) {
            (Some(steps), Some(proposed), Some(accepted)) if steps > 0.0 && proposed > 0.0 => {
                f.spec_draft_tokens = Some(proposed as i64);
                f.spec_accepted_tokens = Some(accepted as i64);
                f.spec_acceptance_rate = Some(accepted / proposed);
                f.spec_acceptance_length = Some(1.0 + accepted / steps);
                None
            }
            (Some(_), Some(_), Some(_)) => {
                Some("no draft steps inside the window (the counters did not move)".to_string())
            }
            _ => match s.accept_length.mean() {
                Some(mean) => {
                    f.spec_acceptance_length = Some(mean);
                    None
                }
                None => Some(
                    "fewer than two scrapes of the draft counters inside the window".to_string(),
                ),
            },
        }
    };
    if let Some(why) = why {
        for name in ["spec_acceptance_rate", "spec_acceptance_length"] {
            f.unavailable.insert(name.to_string(), why.clone());
        }
    } else if f.spec_acceptance_rate.is_none() {
        f.unavailable.insert(
            "spec_acceptance_rate".to_string(),
            "the engine gives a mean acceptance length only, no draft-token counters".to_string(),
        );
    }
}

/// The cell's connections, over its warm-up and measured requests: how many they
/// opened, how many a closed-loop worker opened beyond its first in the cell
/// (reconnects: the server closed a kept-alive one), and how often a request was sent
/// again on a new connection (retries).
pub fn connections(v: &DecodeView, f: &mut Figures) {
    let known: Vec<&Stream> = v
        .streams
        .iter()
        .filter(|s| s.info.opened_connection.is_some())
        .collect();
    if known.is_empty() {
        let why = if v.streams.iter().any(|s| s.info.sent_ns.is_some()) {
            "recorded before the recorder wrote its connection columns"
        } else {
            "no request was sent"
        };
        for name in ["reconnects", "retries"] {
            f.unavailable.insert(name.to_string(), why.to_string());
        }
        return;
    }
    f.connections_opened = Some(
        known
            .iter()
            .filter(|s| s.info.opened_connection == Some(true))
            .count() as i64,
    );
    f.retries = Some(
        known
            .iter()
            .filter_map(|s| s.info.retries.map(i64::from))
            .sum(),
    );
    let mut slots: std::collections::BTreeMap<i64, Vec<&Stream>> = Default::default();
    for s in &known {
        if let Some(slot) = s.info.slot {
            slots.entry(i64::from(slot)).or_default().push(s);
        }
    }
    if slots.is_empty() {
        f.unavailable.insert(
            "reconnects".to_string(),
            "open-loop requests take any free connection, so a new one is the pool growing, not a reconnect"
                .to_string(),
        );
        return;
    }
    // Per worker, in send order: every connection it opened after its first request.
    f.reconnects = Some(
        slots
            .values_mut()
            .map(|requests| {
                requests.sort_by_key(|s| (s.info.sent_ns, s.info.request_id));
                requests
                    .iter()
                    .skip(1)
                    .filter(|s| s.info.opened_connection == Some(true))
                    .count() as i64
            })
            .sum(),
    );
}

/// How many requests each content check of the rule set found; a check the rule set
/// does not make is unavailable.
pub fn content(v: &DecodeView, rules: &RuleSet, f: &mut Figures) {
    let c = &rules.content;
    if c.script_mix_max_share.is_none() && !c.empty_output && !c.stop_early {
        f.unavailable.insert(
            "content_flags".to_string(),
            format!("rule set {} makes no content checks", rules.id()),
        );
        return;
    }
    let found = super::content::found(v, rules);
    let count = |check: &str, on: bool| {
        on.then(|| {
            found
                .iter()
                .find(|x| x.check == check)
                .map_or(0, |x| (x.findings.len() + x.more) as i64)
        })
    };
    f.script_mix_requests = count("script_mix", c.script_mix_max_share.is_some());
    f.empty_output_requests = count("empty_output", c.empty_output);
    f.stop_early_requests = count("stop_early", c.stop_early);
    f.content_flags = Some(
        [
            f.script_mix_requests,
            f.empty_output_requests,
            f.stop_early_requests,
        ]
        .into_iter()
        .flatten()
        .sum(),
    );
}

/// Width of the slices sends are counted in.
const SEND_SLICE_NS: i64 = 10_000_000;

/// Requests sent per 10 ms slice of `[open, close)`: the most in one slice, and the
/// index of dispersion (variance over mean of the counts, every slice counted, empty
/// ones too); both null with no sends, the dispersion null with fewer than two.
fn burstiness(sends: &[i64], open: i64, close: i64) -> (Option<i64>, Option<f64>) {
    if sends.is_empty() || close <= open {
        return (None, None);
    }
    let slices = usize::try_from((close - open + SEND_SLICE_NS - 1) / SEND_SLICE_NS).unwrap_or(0);
    let mut counts = vec![0i64; slices.max(1)];
    for &t in sends {
        let i = usize::try_from((t - open) / SEND_SLICE_NS).unwrap_or(0);
        if let Some(c) = counts.get_mut(i) {
            *c += 1;
        }
    }
    let max = counts.iter().copied().max();
    if sends.len() < 2 {
        return (max, None);
    }
    let n = counts.len() as f64;
    let mean = counts.iter().sum::<i64>() as f64 / n;
    let var = counts
        .iter()
        .map(|&c| (c as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    (max, (mean > 0.0).then(|| var / mean))
}

/// The figures of a burst or rate cell: the decode figures over its span (every
/// measured request ran inside it, so nothing is clipped), with the completed request
/// rate; for a rate cell, the offered rate and the schedule lag.
pub fn open(v: &DecodeView, rules: &RuleSet) -> Figures {
    let mut f = decode(v, rules);
    let span_s = v.window_ns() as f64 / 1e9;
    f.request_rate = (span_s > 0.0).then(|| f.completed_requests as f64 / span_s);
    if let Some(rate) = v.key.rate {
        f.offered_rate = (!rate.is_inf()).then(|| rate.per_second());
    }
    if v.key.phase == Phase::Rate {
        f.schedule_rate = schedule_rate(v);
    }
    if matches!(v.key.phase, Phase::Rate | Phase::Replay) {
        let lag = v
            .streams
            .iter()
            .filter_map(|s| s.info.sent_ns.map(|sent| ms(sent - s.info.scheduled_ns)))
            .collect();
        f.schedule_lag_ms = summary(lag, rules);
    }
    f
}

/// The rate a rate cell's schedule offered: its measured requests − 1 over the span of their
/// scheduled times; `None` with fewer than two requests or all at once (`inf`).
fn schedule_rate(v: &DecodeView) -> Option<f64> {
    let times: Vec<i64> = v
        .streams
        .iter()
        .filter(|s| s.info.role == tokentrace_schemas::tables::Role::Measured)
        .map(|s| s.info.scheduled_ns)
        .collect();
    let span = times.iter().max()? - times.iter().min()?;
    (times.len() > 1 && span > 0).then(|| (times.len() - 1) as f64 / (span as f64 / 1e9))
}

/// Whether a rate cell meets the rule set's SLO, and each limit it missed; `None` when
/// the rule set has none. `figures` are the cell's, from [`open`].
pub fn slo(
    v: &DecodeView,
    rules: &RuleSet,
    figures: &Figures,
    verdict: Verdict,
) -> (Option<bool>, Vec<String>) {
    let slo = &rules.slo;
    let Some(p) = slo.percentile.filter(|_| slo.is_set()) else {
        return (None, Vec::new());
    };
    // The cell's figures when they summarize the SLO's percentile; else again, with it.
    let again;
    let f = if rules.stats.percentiles.contains(&p) {
        figures
    } else {
        let mut with_p = rules.clone();
        with_p.stats.percentiles.push(p);
        again = open(v, &with_p);
        &again
    };
    let mut misses = Vec::new();
    if verdict != Verdict::Valid {
        misses.push(format!("the cell is {}, not Valid", verdict.label()));
    }
    // As for one request (`meets_slo`): a cell of one-token answers has no time between
    // tokens, which does not count against it; TTFT and E2E latency every request has.
    for (name, limit, values, needed) in [
        ("TTFT", slo.ttft_ms, &f.ttft_ms, true),
        (
            "time between tokens",
            slo.time_between_tokens_ms,
            &f.time_between_tokens_ms,
            f.requests_scored == 0,
        ),
        ("E2E latency", slo.e2e_latency_ms, &f.e2e_latency_ms, true),
    ] {
        let Some(limit) = limit else { continue };
        let value = values.percentiles.get(&format!("p{p}")).copied();
        match value {
            Some(x) if x <= limit => {}
            Some(x) => misses.push(format!("p{p} {name} {x:.1} ms > {limit} ms")),
            None if needed => misses.push(format!("p{p} {name}: no requests to judge")),
            None => {}
        }
    }
    (Some(misses.is_empty()), misses)
}

/// A replay cell's own figures, added to [`open`]'s: the workload's offered rate (its
/// sent requests over their schedule's span) and the prefix cache's hits against the
/// workload's sharing.
pub fn replay(v: &DecodeView, rows: &[tokentrace_schemas::tables::ReplayRow], f: &mut Figures) {
    let sent: Vec<&tokentrace_schemas::tables::ReplayRow> =
        rows.iter().filter(|r| r.skipped.is_none()).collect();
    f.replay_skipped = Some(rows.len() - sent.len());
    let span_ns = sent.iter().map(|r| r.offset_ns).max().unwrap_or(0)
        - sent.iter().map(|r| r.offset_ns).min().unwrap_or(0);
    f.offered_rate =
        (span_ns > 0 && sent.len() > 1).then(|| (sent.len() - 1) as f64 / (span_ns as f64 / 1e9));
    let by_id: std::collections::HashMap<i64, &tokentrace_schemas::tables::ReplayRow> =
        sent.iter().map(|r| (r.request_id, *r)).collect();
    let (mut cached, mut expected, mut prompt, mut any) = (0i64, 0i64, 0i64, false);
    for s in &v.streams {
        let (Some(row), Some(c)) = (by_id.get(&s.info.request_id), s.info.cached_tokens) else {
            continue;
        };
        any = true;
        cached += i64::from(c);
        expected += i64::from(row.expected_cached_tokens);
        prompt += prompt_tokens(s.info);
    }
    if any {
        f.cached_tokens = Some(cached);
        f.expected_cached_tokens = Some(expected);
        f.replay_prompt_tokens = Some(prompt);
    }
}

/// Goodput under the rule set's SLO, judged per request (as vLLM's `--goodput`): the
/// requests that met every limit on their own, per second of the cell's window, and
/// their share of the requests judged. A decode cell judges the requests that ended
/// inside its window; a burst, rate or replay cell its measured requests (all of them
/// run inside its span). Nothing without an SLO.
fn goodput(v: &DecodeView, rules: &RuleSet, f: &mut Figures) {
    if !rules.slo.is_set() {
        return;
    }
    let judged: Vec<&Stream> = v
        .streams
        .iter()
        .filter(|s| match v.key.phase {
            Phase::Decode => s.info.end_ns.is_some_and(|e| v.in_window(e)),
            _ => s.info.role == tokentrace_schemas::tables::Role::Measured,
        })
        .collect();
    let good = judged.iter().filter(|s| meets_slo(s, rules)).count();
    f.goodput_requests = Some(good);
    let span_s = v.window_ns() as f64 / 1e9;
    f.goodput = (span_s > 0.0).then(|| good as f64 / span_s);
    f.goodput_share = (!judged.is_empty()).then(|| good as f64 / judged.len() as f64);
}

/// Whether one request met every limit of the SLO on its own: finished, its TTFT, time
/// between tokens and E2E latency each within its limit (a limit it has no value for,
/// such as the time between tokens of a one-token answer, does not count against it).
pub(crate) fn meets_slo(s: &Stream, rules: &RuleSet) -> bool {
    let (r, a) = (s.info, &s.tokens());
    if !is_finished(r) {
        return false;
    }
    let slo = &rules.slo;
    let ttft = first_token(a, rules.ttft.first)
        .zip(r.sent_ns)
        .map(|(f, t)| ms(f - t));
    let tbt = per_token_ns(a, rules).map(|ns| ns / 1e6);
    let e2e = r.sent_ns.zip(r.end_ns).map(|(t, e)| ms(e - t));
    let within = |limit: Option<f64>, value: Option<f64>, needed: bool| match (limit, value) {
        (None, _) => true,
        (Some(l), Some(x)) => x <= l,
        (Some(_), None) => !needed,
    };
    within(slo.ttft_ms, ttft, true)
        && within(slo.time_between_tokens_ms, tbt, false)
        && within(slo.e2e_latency_ms, e2e, true)
}

#[cfg(test)]
mod burstiness_tests {
    use super::burstiness;

    #[test]
    fn sends_together_are_a_burst_and_evenly_spread_ones_are_not() {
        let ms = 1_000_000;
        // 100 ms, ten slices: four sends in the first 10 ms, none after.
        let (max, d) = burstiness(&[0, 1, 2 * ms, 9 * ms], 0, 100 * ms);
        assert_eq!(max, Some(4));
        // counts [4, 0 × 9]: mean 0.4, variance 1.44, dispersion 3.6.
        assert!((d.expect("dispersion") - 3.6).abs() < 1e-9, "{d:?}");
        // One per slice: no dispersion at all.
        let even: Vec<i64> = (0..10).map(|i| i * 10 * ms + ms).collect();
        assert_eq!(burstiness(&even, 0, 100 * ms), (Some(1), Some(0.0)));
        assert_eq!(burstiness(&[], 0, 100 * ms), (None, None));
        assert_eq!(burstiness(&[5 * ms], 0, 100 * ms), (Some(1), None));
    }
}
