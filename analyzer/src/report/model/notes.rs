//! The report's words for what the judges found: the notes under the report and each
//! cell's, one sentence per verdict's evidence and per warning.

use super::*;

/// Every note line of the report, cell by cell, then the figures some cells could not
/// give and why.
pub(crate) fn notes(s: &Scoring) -> Vec<String> {
    let mut out: Vec<String> = s.cells.iter().flat_map(cell_notes).collect();
    out.extend(unavailable_notes(s));
    if s.run.cached_tokens_missing {
        out.push(cached_tokens_note(s.run.engine.as_deref()));
    }
    if s.run.checksums_skipped {
        out.push(
            "Checksums not verified (--no-verify): each cell's files were read as they are, without checking them against the SHA-256 their commit marks record.".to_string(),
        );
    }
    out
}

/// Why no request has `cached_tokens`, and the server flag that reports it.
pub(super) fn cached_tokens_note(engine: Option<&str>) -> String {
    let flag = match engine {
        Some("vllm") => "start vLLM with `--enable-prompt-tokens-details`",
        Some("sglang") => "start SGLang with `--enable-cache-report`",
        _ => {
            "vLLM reports it with `--enable-prompt-tokens-details`, SGLang with `--enable-cache-report`"
        }
    };
    format!(
        "No request says how much of its prompt the prefix cache served (`cached_tokens` in usage): {flag}. Without it, no scout can be found served from cache (verdict Served from cache), and replay cells have no cache figures."
    )
}

/// One line per reason that some cells could not give figures, naming the figures
/// (those with a column) and the cells: `Spec acceptance and Acceptance length are — in
/// 9 cells (Decode 1K × 1, …): why`.
pub(super) fn unavailable_notes(s: &Scoring) -> Vec<String> {
    // (reason, cells) -> the figures' headers, in figure-table order.
    type Group<'a> = ((&'a str, Vec<String>), Vec<&'static str>);
    let mut groups: Vec<Group> = Vec::new();
    for figure in FIGURES {
        let Some(column) = figure.column else {
            continue;
        };
        let mut by_reason: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for c in &s.cells {
            if let Some(why) = c
                .figures
                .as_ref()
                .and_then(|f| f.unavailable.get(figure.name))
            {
                by_reason.entry(why).or_default().push(cell_name(c));
            }
        }
        for key in by_reason {
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, headers)) => headers.push(column.header),
                None => groups.push((key, vec![column.header])),
            }
        }
    }
    groups
        .into_iter()
        .map(|((why, cells), headers)| {
            let shown: Vec<&str> = cells.iter().take(3).map(String::as_str).collect();
            let names = match headers.split_last() {
                Some((last, rest)) if !rest.is_empty() => {
                    format!("{} and {last} are", rest.join(", "))
                }
                _ => format!("{} is", headers.join("")),
            };
            format!(
                "{names} {DASH} in {} {} ({}{}): {why}.",
                cells.len(),
                if cells.len() == 1 { "cell" } else { "cells" },
                shown.join(", "),
                if cells.len() > 3 { ", …" } else { "" }
            )
        })
        .collect()
}

/// The words of a `prefix_evicted` warning (empty for any other).
fn evicted_words(w: &Warning) -> String {
    let Warning::PrefixEvicted {
        hit_ratio,
        min_hit_ratio,
        turns,
        mostly_missed,
        kv_metric,
        kv_usage_max,
        kv_usage_mean,
    } = w
    else {
        return String::new();
    };
    format!(
        "warning: prefix evicted: the turns after the first got {}% of their history from the prefix cache (least {}%); {mostly_missed} of {turns} got under half, so the server computed the sessions' history again. KV-cache usage {}",
        fixed(hit_ratio * 100.0, 1),
        g(min_hit_ratio * 100.0),
        match (kv_metric, kv_usage_max, kv_usage_mean) {
            (Some(m), Some(max), Some(mean)) => format!(
                "(`{m}`: the blocks running requests hold) peaked at {}%, {}% on average inside the window",
                fixed(max * 100.0, 1),
                fixed(mean * 100.0, 1)
            ),
            _ => "is not exposed by this server".to_string(),
        }
    )
}

pub(super) fn cell_name(c: &CellScore) -> String {
    match (c.phase, c.rate) {
        (Phase::Prefill, _) => format!("Prefill {}", context_label(c.context)),
        (Phase::Decode, _) => format!("Decode {} × {}", context_label(c.context), c.concurrency),
        (Phase::Burst, _) => format!("Burst {} × {}", context_label(c.context), c.concurrency),
        (Phase::Rate, r) => format!(
            "Rate {} at {} req/s",
            context_label(c.context),
            r.map_or_else(dash, |r| r.to_string())
        ),
        (Phase::Replay, _) => format!("Replay {}", c.replay.unwrap_or(0)),
        (Phase::Conversation, _) => format!(
            "Conversations {} × {} sessions",
            context_label(c.context),
            c.concurrency
        ),
    }
}

/// The requests of a cache warning: each with its cached share and TTFT (and its role,
/// when `roles`), then how many more.
pub(super) fn cache_list(requests: &[ColdRequest], more: usize, roles: bool) -> String {
    let listed: Vec<String> = requests
        .iter()
        .map(|r| {
            format!(
                "{}request {} ({} of {} cached, TTFT {})",
                if roles {
                    format!("{} ", r.role)
                } else {
                    String::new()
                },
                r.request_id,
                thousands(r.cached_tokens),
                thousands(r.prompt_tokens),
                opt(r.ttft_ms, ms_whole)
            )
        })
        .collect();
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}{more}", listed.join(", "))
}

/// The words of a `rechunked` warning: how the reads came, the server's own pace, the
/// requests, and what the figures did with them.
pub(super) fn rechunk_words(e: &RechunkEvidence, phase: Phase) -> String {
    let listed: Vec<String> = e
        .requests
        .iter()
        .map(|r| {
            format!(
                "{} request {} ({} token events in {} reads, up to {} in one, over {} ms; TTFT {})",
                r.role,
                r.request_id,
                thousands(r.token_events),
                thousands(r.reads),
                thousands(r.largest_read),
                opt(r.span_ms, ms_whole),
                opt(r.ttft_ms, ms_whole)
            )
        })
        .collect();
    let more = if e.more > 0 {
        format!(" and {} more", e.more)
    } else {
        String::new()
    };
    let server = e.server_token_interval_ms.map_or_else(String::new, |s| {
        format!(
            ", where the server made each request's next token every {} ms",
            fixed(s, 1)
        )
    });
    format!(
        "the network re-chunked {} of {} streams ({}: token events came {} to a read on average, limit {}{server}), so their timing is the network's: {}{more}; {}",
        e.requests.len() + e.more,
        e.of,
        e.fault,
        fixed(e.mean_events_per_read, 1),
        g(e.events_per_read),
        listed.join(", "),
        match (e.excluded_from_latency, phase) {
            (true, Phase::Prefill) => "left out of TTFT and prompt tok/s",
            (true, _) =>
                "left out of TTFT, time between tokens, per-request tok/s and ITL (total tok/s counts their tokens)",
            (false, _) => "included in every figure",
        }
    )
}

/// One line per verdict reason and warning of a cell, for the Notes section.
/// A repetition in words: who repeats what, how often, where.
pub(super) fn loop_words(l: &LoopEvidence) -> String {
    format!(
        "{} request {} repeats a {}-character passage {} times ({} characters) in its {}",
        l.role,
        l.request_id,
        thousands(l.cycle_chars as i64),
        l.cycles,
        thousands(l.span_chars as i64),
        l.channel.as_str()
    )
}

/// What a content check found, in words: how many requests, and the first one's
/// evidence with its excerpt.
pub(super) fn content_words(found: &crate::contract::ContentFindings) -> String {
    let what = match found.check.as_str() {
        "script_mix" => "answered in a script the prompt does not use",
        "empty_output" => "finished without output",
        "stop_early" => "stopped before max_tokens although the request asked ignore_eos",
        other => other,
    };
    let n = found.findings.len() + found.more;
    let first = found.findings.first().map_or_else(String::new, |f| {
        format!(
            ": request {}{} ({}), \"{}\"",
            f.request_id,
            f.channel
                .map(|c| format!(" {}", c.as_str()))
                .unwrap_or_default(),
            f.detail,
            f.excerpt
        )
    });
    format!("{n} of {} requests {what}{first}", found.of)
}

/// Why a cell is not Valid, in one line of words; the samples behind it are in the JSON
/// scoring's `evidence`.
pub(super) fn verdict_note(c: &CellScore) -> Option<String> {
    let verdict = c.verdict.filter(|v| *v != Verdict::Valid)?;
    let (mut failed, mut loops, mut queued, mut why) = (vec![], vec![], vec![], vec![]);
    for e in &c.evidence {
        match e {
            Evidence::FailedStream { .. } => failed.push(e),
            Evidence::Loop(l) => loops.push(l),
            Evidence::WarmupNotReady { .. }
            | Evidence::RunningNeverReachedN { .. }
            | Evidence::RunningMeanBelow { .. }
            | Evidence::WaitingMeanAbove { .. }
            | Evidence::WaitingSampleAbove { .. }
            | Evidence::KvBudget { .. } => queued.push(e),
            Evidence::Missing { what } => why.push(what.clone()),
            Evidence::Imported { said, .. } => why.push(said.clone()),
            Evidence::Content(found) => why.push(content_words(found)),
            Evidence::ScoutCached {
                request_id,
                cached_tokens,
                prompt_tokens,
                max_fraction,
            } => why.push(format!(
                "the scout (request {request_id}) had {} of its {} prompt tokens served from the prefix cache (more than {}%), so prefill was not measured",
                thousands(*cached_tokens),
                thousands(*prompt_tokens),
                g(max_fraction * 100.0)
            )),
        }
    }
    let more = |listed: usize| {
        let n = listed.saturating_sub(1) + c.evidence_omitted;
        if n > 0 {
            format!(", and {n} more")
        } else {
            String::new()
        }
    };
    if let Some(Evidence::FailedStream {
        request_id,
        role,
        end_reason,
        error,
        end_s,
    }) = failed.first()
    {
        why.push(format!(
            "{role} request {request_id} ended `{end_reason}`{}{}{}",
            end_s
                .map(|s| format!(" {} s into the window", fixed(s, 2)))
                .unwrap_or_default(),
            error
                .as_deref()
                .map(|e| format!(": {}", e.replace(['\n', '|'], " ")))
                .unwrap_or_default(),
            more(failed.len())
        ));
    }
    if let Some(l) = loops.first() {
        why.push(format!("{}{}", loop_words(l), more(loops.len())));
    }
    let clauses: Vec<String> = queued
        .iter()
        .filter_map(|e| match e {
            Evidence::WarmupNotReady { detail } => Some(format!(
                "the warm-up ended before every stream had a token ({detail})"
            )),
            Evidence::RunningNeverReachedN {
                max, concurrency, ..
            } => Some(format!(
                "at most {} of the {concurrency} requests ran at once",
                g(*max)
            )),
            Evidence::RunningMeanBelow {
                mean, threshold, ..
            } => Some(format!(
                "{} requests ran on average (fewer than {})",
                fixed(*mean, 2),
                g(*threshold)
            )),
            Evidence::WaitingMeanAbove {
                mean, threshold, ..
            } => Some(format!(
                "{} requests waited on average (more than {})",
                fixed(*mean, 2),
                g(*threshold)
            )),
            Evidence::WaitingSampleAbove {
                samples_above,
                samples,
                ..
            } => Some(format!(
                "requests waited in {samples_above} of {samples} scrapes"
            )),
            Evidence::KvBudget {
                need_tokens,
                budget_tokens,
                source,
            } => Some(if need_tokens > budget_tokens {
                format!(
                    "its prompts take {} tokens of KV cache, more than the server's {} ({source})",
                    thousands(i64::try_from(*need_tokens).unwrap_or(i64::MAX)),
                    thousands(i64::try_from(*budget_tokens).unwrap_or(i64::MAX))
                )
            } else {
                format!(
                    "its prompts take {} of the server's {} tokens of KV cache ({source})",
                    thousands(i64::try_from(*need_tokens).unwrap_or(i64::MAX)),
                    thousands(i64::try_from(*budget_tokens).unwrap_or(i64::MAX))
                )
            }),
            _ => None,
        })
        .collect();
    if !clauses.is_empty() {
        why.push(clauses.join(", "));
    }
    if why.is_empty() {
        return Some(format!("{}: see the JSON scoring", verdict.label()));
    }
    Some(format!(
        "{}: {}; samples in the JSON scoring",
        verdict.label(),
        why.join("; ")
    ))
}

pub(crate) fn cell_notes(c: &CellScore) -> Vec<String> {
    let name = cell_name(c);
    let mut out = Vec::new();
    if c.verdict.is_none() {
        out.push(format!(
            "{name}: {}{}",
            c.status_label(),
            c.reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        ));
    }
    if let Some(line) = verdict_note(c) {
        out.push(format!("{name}: {line}"));
    }
    for w in &c.warnings {
        let line = match w {
            Warning::ClientLag {
                tick_lateness_max_ms,
                queue_delay_p99_ms,
                tick_threshold_ms,
                queue_threshold_ms,
                late_tick_share,
                late_tick_ms,
                late_tick_share_max,
            } => match (late_tick_share, late_tick_ms, late_tick_share_max) {
                (Some(share), Some(ms), Some(max)) => format!(
                    "warning: the recorder lagged ({}% of its ticks were over {} ms late, limit {}%; chunk queueing p99 {} ms, limit {}): its timings may be distorted",
                    fixed(share * 100.0, 1),
                    g(*ms),
                    g(max * 100.0),
                    opt(*queue_delay_p99_ms, |v| fixed(v, 3)),
                    g(*queue_threshold_ms)
                ),
                _ => format!(
                    "warning: the recorder lagged (tick lateness max {} ms, limit {}; chunk queueing p99 {} ms, limit {}): its timings may be distorted",
                    opt(*tick_lateness_max_ms, |v| fixed(v, 2)),
                    g(*tick_threshold_ms),
                    opt(*queue_delay_p99_ms, |v| fixed(v, 3)),
                    g(*queue_threshold_ms)
                ),
            },
            Warning::SuspectedLoop(l) => format!("warning: suspected loop, {}", loop_words(l)),
            Warning::NoServerMetrics { missing } => format!(
                "warning: no server samples of {} inside the window: queueing not judged from the server; active requests counted by the client",
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Warning::DrainIncomplete { detail } => {
                format!("warning: the server did not drain after the cell ({detail})")
            }
            Warning::UnreadEventDetail {
                event,
                time_ns,
                detail,
            } => format!(
                "warning: the `{event}` event at {} s says `{}`, which this reader cannot read: its {} check was not read, so a failed one would not show",
                g(*time_ns as f64 / 1e9),
                detail.chars().take(200).collect::<String>(),
                if event == "warmup_end" {
                    "warm-up"
                } else {
                    "drain"
                }
            ),
            Warning::ColdPrefill {
                requests,
                more,
                min_fraction,
                excluded_from_ttft,
            } => {
                format!(
                    "warning: {} requests prefilled cold (less than {}% of the prompt cached), so their TTFT holds a prefill: {}; {}",
                    requests.len() + more,
                    g(min_fraction * 100.0),
                    cache_list(requests, *more, true),
                    if *excluded_from_ttft {
                        "left out of the TTFT figures"
                    } else {
                        "included in the TTFT figures"
                    }
                )
            }
            Warning::WarmPrefill {
                requests,
                more,
                of,
                min_fraction,
            } => {
                format!(
                    "warning: {} of {of} requests had {}% or more of the prompt served from the prefix cache, so their TTFT and E2E latency are a warm prefix's, not a cold prefill's (a run recorded with one prompt per context, or a server that caches across requests): {}",
                    requests.len() + more,
                    g(min_fraction * 100.0),
                    cache_list(requests, *more, false)
                )
            }
            Warning::ScheduleLag {
                lag_ms,
                percentile,
                max_lag_ms,
                worst_ms,
                late,
                of,
            } => format!(
                "warning: the replay fell behind its schedule: p{} lag {} ms (limit {} ms), the latest request {} ms late; {late} of {of} requests left more than {} ms late, so the server did not see the workload's load",
                g(*percentile),
                fixed(*lag_ms, 1),
                g(*max_lag_ms),
                fixed(*worst_ms, 1),
                g(*max_lag_ms)
            ),
            Warning::ReplaySkipped { skipped, of, first } => format!(
                "{skipped} of the workload's {of} requests were not sent (never cut to fit): {first}{}",
                if *skipped > 1 { ", and others" } else { "" }
            ),
            Warning::PrefixEvicted { .. } => evicted_words(w),
            Warning::Content(found) => format!("warning: {}", content_words(found)),
            Warning::Rechunked(e) => format!("warning: {}", rechunk_words(e, c.phase)),
            Warning::Connections {
                retries,
                reconnects,
                connections_opened,
                max_retries,
                max_reconnects,
            } => format!(
                "warning: {retries} {} sent again on a new connection (the kept-alive one closed under {}; limit {}), {} reconnects by its workers (limit {}), {connections_opened} connections opened: each retry paid a failed send and a connect inside its latency",
                if *retries == 1 {
                    "request was"
                } else {
                    "requests were"
                },
                if *retries == 1 { "it" } else { "them" },
                max_retries.map_or_else(dash, |m| m.to_string()),
                reconnects.map_or_else(dash, |r| r.to_string()),
                max_reconnects.map_or_else(dash, |m| m.to_string()),
            ),
        };
        out.push(format!("{name}: {line}"));
    }
    out
}
