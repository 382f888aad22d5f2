//! A conversation cell's own figures and its one warning: TTFT and prefill speed by turn
//! and by the history a turn carried, the share of that history the prefix cache served
//! (the server's `cached_tokens`, and its own counters), sessions completed and their
//! goodput; `prefix_evicted` when later turns stop finding their history in the cache.

use std::collections::BTreeMap;

use tokentrace_schemas::tables::TurnRow;

use super::measure::{first_token, is_finished, meets_slo, ms, prompt_tokens, summary};
use super::view::{DecodeView, Stream};
use crate::contract::{ConversationFigures, HistoryFigures, TurnFigures, Warning};
use crate::rules::RuleSet;
use crate::stats;

/// History bands start at this many tokens and double ([`HistoryFigures`]).
pub const HISTORY_BAND_TOKENS: i64 = 256;
/// A turn that got less than this share of its history from the cache "mostly missed"
/// (counted in the warning's evidence).
pub const MOSTLY_MISSED: f64 = 0.5;

/// One turn as the figures read it.
struct Turn<'a> {
    row: &'a TurnRow,
    stream: Option<&'a Stream<'a>>,
    /// TTFT, ns, of an answered turn.
    ttft_ns: Option<i64>,
}

impl Turn<'_> {
    fn answered(&self) -> bool {
        self.ttft_ns.is_some()
    }

    /// Prompt tokens the server computed over TTFT, tokens/s.
    fn prefill_tok_s(&self) -> Option<f64> {
        let s = self.stream?;
        let ttft = self.ttft_ns.filter(|t| *t > 0)?;
        let computed = prompt_tokens(s.info) - i64::from(s.info.cached_tokens.unwrap_or(0));
        Some(computed.max(0) as f64 / (ttft as f64 / 1e9))
    }

    /// (served, could have been): cached tokens (at most the history) and history
    /// tokens, when the server said what it cached.
    fn cache(&self) -> Option<(i64, i64)> {
        let cached = i64::from(self.stream?.info.cached_tokens?);
        let history = i64::from(self.row.history_tokens);
        Some((cached.min(history), history))
    }
}

/// Served over could-have-been of `turns` that have both; `None` without history.
fn hit_ratio<'a>(turns: impl Iterator<Item = &'a Turn<'a>>) -> Option<f64> {
    let (served, could) = turns
        .filter_map(Turn::cache)
        .fold((0i64, 0i64), |(a, b), (s, c)| (a + s, b + c));
    (could > 0).then(|| served as f64 / could as f64)
}

fn turns<'a>(v: &'a DecodeView<'a>, rows: &'a [TurnRow], rules: &RuleSet) -> Vec<Turn<'a>> {
    let by_id: BTreeMap<i64, &Stream> = v.streams.iter().map(|s| (s.info.request_id, s)).collect();
    rows.iter()
        .map(|row| {
            let stream = by_id.get(&row.request_id).copied();
            let ttft_ns = stream.and_then(|s| {
                let first = first_token(&s.tokens(), rules.ttft.first)?;
                Some(first - s.info.sent_ns?)
            });
            Turn {
                row,
                stream,
                ttft_ns,
            }
        })
        .collect()
}

/// The figures of `turns` answered: TTFT and prefill speed summaries, cache hit ratio.
fn answered_figures(set: &[&Turn]) -> (Vec<f64>, Vec<f64>, Option<f64>) {
    let ttft = set.iter().filter_map(|t| t.ttft_ns.map(ms)).collect();
    let prefill = set.iter().filter_map(|t| t.prefill_tok_s()).collect();
    (ttft, prefill, hit_ratio(set.iter().copied()))
}

fn median(values: Vec<f64>, rules: &RuleSet) -> Option<f64> {
    stats::median(&stats::sorted(values), rules.stats.median)
}

fn by_turn(all: &[Turn], rules: &RuleSet) -> Vec<TurnFigures> {
    let mut places: BTreeMap<i32, Vec<&Turn>> = BTreeMap::new();
    for t in all {
        places.entry(t.row.turn).or_default().push(t);
    }
    places
        .into_iter()
        .map(|(turn, set)| {
            let answered: Vec<&Turn> = set.iter().copied().filter(|t| t.answered()).collect();
            let (ttft, prefill, ratio) = answered_figures(&answered);
            let prompts = answered
                .iter()
                .filter_map(|t| t.stream.map(|s| prompt_tokens(s.info) as f64))
                .collect();
            let history = answered
                .iter()
                .map(|t| f64::from(t.row.history_tokens))
                .collect();
            TurnFigures {
                turn,
                sent: set.len(),
                answered: answered.len(),
                prompt_tokens: median(prompts, rules),
                history_tokens: median(history, rules),
                ttft_ms: summary(ttft, rules),
                prefill_tok_s: summary(prefill, rules),
                cache_hit_ratio: ratio,
            }
        })
        .collect()
}

/// The band of `history` tokens: [0, B), [B, 2B), [2B, 4B), … with B
/// [`HISTORY_BAND_TOKENS`].
pub fn history_band(history: i64) -> (i64, i64) {
    let mut to = HISTORY_BAND_TOKENS;
    let mut from = 0;
    while history >= to && to < i64::MAX / 2 {
        from = to;
        to *= 2;
    }
    (from, to)
}

fn by_history(all: &[Turn], rules: &RuleSet) -> Vec<HistoryFigures> {
    let mut bands: BTreeMap<(i64, i64), Vec<&Turn>> = BTreeMap::new();
    for t in all.iter().filter(|t| t.answered()) {
        bands
            .entry(history_band(i64::from(t.row.history_tokens)))
            .or_default()
            .push(t);
    }
    bands
        .into_iter()
        .map(|((from, to), set)| {
            let (ttft, prefill, ratio) = answered_figures(&set);
            HistoryFigures {
                from,
                to,
                answered: set.len(),
                ttft_ms: summary(ttft, rules),
                prefill_tok_s: summary(prefill, rules),
                cache_hit_ratio: ratio,
            }
        })
        .collect()
}

/// Sessions started, completed (every turn sent and answered, each ending inside the
/// window), and completed with every turn within the SLO (null without one).
fn sessions(v: &DecodeView, all: &[Turn], rules: &RuleSet) -> (usize, usize, Option<usize>) {
    let mut by_session: BTreeMap<i64, Vec<&Turn>> = BTreeMap::new();
    for t in all {
        by_session.entry(t.row.session).or_default().push(t);
    }
    let started = by_session.len();
    let mut completed = 0;
    let mut good = 0;
    for set in by_session.values() {
        let whole = set.len() == usize::try_from(set[0].row.turns).unwrap_or(0)
            && set.iter().all(|t| {
                t.stream.is_some_and(|s| {
                    is_finished(s.info) && s.info.end_ns.is_some_and(|e| v.in_window(e))
                })
            });
        if whole {
            completed += 1;
            if set
                .iter()
                .all(|t| t.stream.is_some_and(|s| meets_slo(s, rules)))
            {
                good += 1;
            }
        }
    }
    (started, completed, rules.slo.is_set().then_some(good))
}

/// A conversation cell's figures and its `prefix_evicted` warning (if any), from its
/// streams and its `turns` rows, read once for both.
pub fn judge(
    v: &DecodeView,
    rows: &[TurnRow],
    rules: &RuleSet,
) -> (ConversationFigures, Vec<Warning>) {
    let all = turns(v, rows, rules);
    let f = figures(v, &all, rules);
    let warned = prefix_evicted(v, &all, f.cache_hit_ratio, rules);
    (f, warned)
}

/// A conversation cell's figures from its turns.
fn figures(v: &DecodeView, all: &[Turn], rules: &RuleSet) -> ConversationFigures {
    let (started, completed, good) = sessions(v, all, rules);
    let span_s = v.window_ns() as f64 / 1e9;
    let per_s = |n: usize| (span_s > 0.0).then(|| n as f64 / span_s);
    let later = all.iter().filter(|t| t.row.turn > 1 && t.answered());
    let ttft = |first: bool| {
        let values = all
            .iter()
            .filter(|t| (t.row.turn == 1) == first)
            .filter_map(|t| t.ttft_ns.map(ms))
            .collect();
        summary(values, rules)
    };
    let server = match (v.prefix_hits.increase(), v.prefix_queries.increase()) {
        (Some(h), Some(q)) if q > 0.0 => Some(h / q),
        _ => None,
    };
    ConversationFigures {
        sessions_started: started,
        sessions_completed: completed,
        sessions_per_s: per_s(completed),
        session_goodput: good.and_then(per_s),
        sessions_good: good,
        cache_hit_ratio: hit_ratio(later),
        server_cache_hit_ratio: server,
        kv_usage_max: v
            .kv_usage
            .samples
            .iter()
            .map(|s| s.value)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
        ttft_first_turn_ms: ttft(true),
        ttft_later_turns_ms: ttft(false),
        by_turn: by_turn(all, rules),
        by_history: by_history(all, rules),
    }
}

/// `prefix_evicted`: the answered turns from the second on got less than the rule's
/// share of their history from the prefix cache (`ratio`, the figures' hit ratio).
fn prefix_evicted(
    v: &DecodeView,
    all: &[Turn],
    ratio: Option<f64>,
    rules: &RuleSet,
) -> Vec<Warning> {
    let (Some(min), Some(ratio)) = (rules.conversation.min_hit_ratio, ratio) else {
        return Vec::new();
    };
    let later: Vec<&Turn> = all
        .iter()
        .filter(|t| t.row.turn > 1 && t.answered())
        .collect();
    if ratio >= min {
        return Vec::new();
    }
    let mostly_missed = later
        .iter()
        .filter_map(|t| t.cache())
        .filter(|&(s, c)| c > 0 && (s as f64) < MOSTLY_MISSED * c as f64)
        .count();
    let usage: Vec<f64> = v.kv_usage.samples.iter().map(|s| s.value).collect();
    vec![Warning::PrefixEvicted {
        hit_ratio: ratio,
        min_hit_ratio: min,
        turns: later.len(),
        mostly_missed,
        kv_metric: v.kv_usage.metric.map(str::to_string),
        kv_usage_max: usage.iter().copied().reduce(f64::max),
        kv_usage_mean: v.kv_usage.mean(),
    }]
}
