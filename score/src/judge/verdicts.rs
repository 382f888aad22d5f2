//! The verdict rules, one function each, from a cell's view and the rule set to the
//! evidence it found: Error (failed streams, missing window or scout), Looped, and the
//! Requests-queued signs (warm-up never ready, running and waiting gauges).

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::protocol::Readiness;
use tokentrace_schemas::tables::EventKind;

use super::measure::{prompt_tokens, scout_ttft};
use super::view::{DecodeView, PrefillView, Repeats};
use crate::contract::{Evidence, LoopEvidence};
use crate::data::RequestInfo;
use crate::loops::Repetition;
use crate::rules::{ErrorScope, RuleSet};

/// Characters of a loop's cycle quoted as evidence.
const EXCERPT_CHARS: usize = 80;

/// A verdict rule of decode cells.
pub type DecodeRule = fn(&DecodeView, &RuleSet) -> Vec<Evidence>;

/// The verdict rules of burst and rate cells, in the order their evidence is listed.
pub const OPEN: [DecodeRule; 3] = [failed_streams, looped, bad_output];

/// Every decode verdict rule, in the order their evidence is listed.
pub const DECODE: [DecodeRule; 8] = [
    failed_streams,
    looped,
    bad_output,
    warmup_not_ready,
    running_never_reached_n,
    running_mean_below,
    waiting_mean_above,
    waiting_sample_above,
];

/// The content checks' findings, where the rule set makes them a verdict (`content.
/// verdict`); otherwise they are warnings.
pub fn bad_output(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    if !rules.content.verdict {
        return Vec::new();
    }
    super::content::found(v, rules)
        .iter()
        .cloned()
        .map(Evidence::Content)
        .collect()
}

fn failed(r: &RequestInfo, rules: &RuleSet) -> bool {
    rules
        .error
        .end_reasons
        .iter()
        .any(|e| e == r.end_reason.as_str())
}

fn failed_evidence(r: &RequestInfo, open: Option<i64>) -> Evidence {
    Evidence::FailedStream {
        request_id: r.request_id,
        role: r.role.as_str().to_string(),
        end_reason: r.end_reason.as_str().to_string(),
        error: r.error.as_ref().map(|e| e.chars().take(200).collect()),
        end_s: r.end_ns.zip(open).map(|(e, o)| (e - o) as f64 / 1e9),
    }
}

/// Error: the prefill cell has no scout, its scout failed, or it never produced a first
/// token under the TTFT rule.
pub fn scout(v: &PrefillView, rules: &RuleSet) -> Vec<Evidence> {
    let Some(scout) = &v.scout else {
        return vec![Evidence::Missing {
            what: "no scout request in the prefill cell".to_string(),
        }];
    };
    if failed(scout.info, rules) {
        vec![failed_evidence(scout.info, None)]
    } else if scout_ttft(scout, rules).is_none() {
        vec![Evidence::Missing {
            what: format!(
                "the scout (request {}) produced no first token by the rule `{:?}`",
                scout.info.request_id,
                rules.ttft.prefill()
            ),
        }]
    } else {
        Vec::new()
    }
}

/// Prefill cached: the scout (when it streamed) had more of its prompt served from the
/// prefix cache than the rule allows, so its TTFT measured a cache hit, not prefill.
pub fn scout_cached(v: &PrefillView, rules: &RuleSet) -> Vec<Evidence> {
    let (Some(scout), Some(max)) = (&v.scout, rules.cache.scout_max_cached_fraction) else {
        return Vec::new();
    };
    let prompt = prompt_tokens(scout.info);
    match scout.info.cached_tokens {
        Some(cached)
            if !failed(scout.info, rules) && prompt > 0 && cached as f64 > max * prompt as f64 =>
        {
            vec![Evidence::ScoutCached {
                request_id: scout.info.request_id,
                cached_tokens: i64::from(cached),
                prompt_tokens: prompt,
                max_fraction: max,
            }]
        }
        _ => Vec::new(),
    }
}

/// A verdict rule of prefill cells.
pub type PrefillRule = fn(&PrefillView, &RuleSet) -> Vec<Evidence>;

/// Every prefill verdict rule, in the order their evidence is listed.
pub const PREFILL: [PrefillRule; 2] = [scout, scout_cached];

/// Error: a stream ended with one of the rule set's error end reasons (in the cell, or
/// inside the window, per the error scope).
pub fn failed_streams(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    v.streams
        .iter()
        .map(|s| s.info)
        .filter(|r| failed(r, rules))
        .filter(|r| match rules.error.scope {
            ErrorScope::Cell => true,
            ErrorScope::Window => r.end_ns.is_some_and(|e| v.in_window(e)),
        })
        .map(|r| failed_evidence(r, Some(v.open)))
        .collect()
}

/// A repetition as the rules count it: its span without the partial final cycle when
/// the rule set says that does not count.
fn counted(rep: &Repetition, rules: &RuleSet) -> Repetition {
    if rules.looped.partial_cycle_in_span {
        *rep
    } else {
        Repetition {
            span: rep.cycles() * rep.cycle,
            ..*rep
        }
    }
}

/// The longest repetition of a text with a cycle in `cycles` that has `min_cycles`
/// cycles and `min_span` characters; ties go to the shorter cycle, then the earlier
/// start.
fn longest(
    found: &[Repetition],
    rules: &RuleSet,
    cycles: std::ops::RangeInclusive<usize>,
    min_cycles: u32,
    min_span: u32,
) -> Option<Repetition> {
    found
        .iter()
        .filter(|rep| cycles.contains(&rep.cycle))
        .map(|rep| counted(rep, rules))
        .filter(|rep| rep.cycles() >= min_cycles as usize && rep.span >= min_span as usize)
        .max_by_key(|rep| {
            (
                rep.span,
                std::cmp::Reverse(rep.cycle),
                std::cmp::Reverse(rep.start),
            )
        })
}

/// Cycle lengths within the rule set's cap.
fn within_cap(rules: &RuleSet) -> std::ops::RangeInclusive<usize> {
    1..=rules.looped.max_cycle_chars as usize
}

pub fn loop_evidence(r: &Repeats, rep: &Repetition) -> LoopEvidence {
    LoopEvidence {
        request_id: r.stream.request_id,
        role: r.stream.role.as_str().to_string(),
        channel: r.channel,
        start_char: rep.start,
        cycle_chars: rep.cycle,
        cycles: rep.cycles(),
        span_chars: rep.span,
        cycle_excerpt: r
            .text
            .chars()
            .skip(rep.start)
            .take(rep.cycle.min(EXCERPT_CHARS))
            .collect(),
    }
}

/// The loop a text holds under the loop thresholds, if any.
pub fn loop_in(r: &Repeats, rules: &RuleSet) -> Option<LoopEvidence> {
    let l = &rules.looped;
    longest(
        &r.found,
        rules,
        within_cap(rules),
        l.min_cycles,
        l.min_span_chars,
    )
    .map(|rep| loop_evidence(r, &rep))
}

/// The repetition short of a loop that a text holds under the suspect thresholds.
pub fn suspect_in(r: &Repeats, rules: &RuleSet) -> Option<LoopEvidence> {
    let l = &rules.looped;
    if loop_in(r, rules).is_some() {
        return None;
    }
    let beyond = (l.beyond_cap_suspect_min_cycles > 0)
        .then(|| {
            longest(
                &r.found,
                rules,
                l.max_cycle_chars as usize + 1..=usize::MAX,
                l.beyond_cap_suspect_min_cycles,
                l.suspect_min_span_chars,
            )
        })
        .flatten();
    longest(
        &r.found,
        rules,
        within_cap(rules),
        l.suspect_min_cycles,
        l.suspect_min_span_chars,
    )
    .into_iter()
    .chain(beyond)
    .max_by_key(|rep| (rep.span, std::cmp::Reverse(rep.cycle)))
    .map(|rep| loop_evidence(r, &rep))
}

/// Looped: a text repeats one cycle for at least the loop thresholds.
pub fn looped(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    v.repeats
        .iter()
        .filter_map(|r| loop_in(r, rules))
        .map(Evidence::Loop)
        .collect()
}

/// Requests queued: the readiness warm-up gave up before every stream produced a token.
pub fn warmup_not_ready(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    if !rules.queued.warmup_not_ready {
        return Vec::new();
    }
    v.events
        .iter()
        .filter(|e| e.kind == EventKind::WarmupEnd)
        .find_map(|e| e.detail.as_deref().and_then(Readiness::from_detail))
        .filter(|r| *r != Readiness::Ready)
        .map(|r| Evidence::WarmupNotReady {
            detail: r.to_string(),
        })
        .into_iter()
        .collect()
}

/// Whether the running-gauge checks count: enough scrapes saw a request waiting (or
/// the rule asks for none, or the engine has no waiting gauge).
fn running_checks_count(v: &DecodeView, rules: &RuleSet) -> bool {
    let need = rules.queued.running_needs_waiting_samples as usize;
    need == 0
        || v.waiting.metric.is_none()
        || v.waiting.samples.is_empty()
        || v.waiting.samples.iter().filter(|s| s.value > 0.0).count() >= need
}

/// Requests queued: the running gauge never reached the cell's concurrency.
pub fn running_never_reached_n(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    let (q, n) = (&rules.queued, v.key.concurrency);
    if !running_checks_count(v, rules) {
        return Vec::new();
    }
    let Some(metric) = v.running.metric.filter(|_| !v.running.samples.is_empty()) else {
        return Vec::new();
    };
    let max = v
        .running
        .samples
        .iter()
        .map(|s| s.value)
        .fold(f64::MIN, f64::max);
    if n >= q.min_concurrency && q.running_never_reached_n && max < f64::from(n) {
        vec![Evidence::RunningNeverReachedN {
            metric: metric.to_string(),
            max,
            concurrency: n,
        }]
    } else {
        Vec::new()
    }
}

/// Requests queued: the running gauge's mean stayed below a fraction of the concurrency.
pub fn running_mean_below(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    let (q, n) = (&rules.queued, v.key.concurrency);
    let (Some(metric), Some(mean)) = (v.running.metric, v.running.mean()) else {
        return Vec::new();
    };
    if !running_checks_count(v, rules) {
        return Vec::new();
    }
    match q.running_mean_below_fraction {
        Some(frac) if n >= q.min_concurrency && mean < frac * f64::from(n) => {
            vec![Evidence::RunningMeanBelow {
                metric: metric.to_string(),
                mean,
                threshold: frac * f64::from(n),
                samples: v.running.samples.len(),
            }]
        }
        _ => Vec::new(),
    }
}

/// Requests queued: the waiting gauge's mean was above the threshold.
pub fn waiting_mean_above(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    let (Some(metric), Some(mean)) = (v.waiting.metric, v.waiting.mean()) else {
        return Vec::new();
    };
    match rules.queued.waiting_mean_above {
        Some(t) if mean > t => vec![Evidence::WaitingMeanAbove {
            metric: metric.to_string(),
            mean,
            threshold: t,
            samples: v.waiting.samples.len(),
        }],
        _ => Vec::new(),
    }
}

/// Requests queued: a scrape saw the waiting gauge above the threshold.
pub fn waiting_sample_above(v: &DecodeView, rules: &RuleSet) -> Vec<Evidence> {
    let (Some(metric), Some(t)) = (v.waiting.metric, rules.queued.waiting_max_above) else {
        return Vec::new();
    };
    let above: Vec<_> = v.waiting.samples.iter().filter(|s| s.value > t).collect();
    above
        .first()
        .map(|first| Evidence::WaitingSampleAbove {
            metric: metric.to_string(),
            value: first.value,
            threshold: t,
            at_s: (first.start_ns - v.open) as f64 / 1e9,
            samples_above: above.len(),
            samples: v.waiting.samples.len(),
        })
        .into_iter()
        .collect()
}
