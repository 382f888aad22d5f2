//! The Conversations section: what the sessions were, one row per cell (the sweep over
//! live sessions, where a prefix cache that stops holding them shows), and one row per
//! cell and turn (TTFT, prefill speed and cache hits as the history grows).

use super::*;
use crate::contract::{ConversationFigures, Summary};

/// The conversation cells, in the scoring's order.
fn cells(s: &Scoring) -> Vec<&CellScore> {
    s.cells
        .iter()
        .filter(|c| c.phase == Phase::Conversation)
        .collect()
}

fn talk_of(c: &CellScore) -> Option<&ConversationFigures> {
    shown(c).and_then(|f| f.conversation.as_ref())
}

/// A share as a percentage with one decimal, or a dash.
fn percent(x: Option<f64>) -> String {
    opt(x, |x| format!("{}%", fixed(x * 100.0, 1)))
}

/// `p50 / p90` of a summary, or a dash.
fn p50_p90(s: &Summary, decimals: usize) -> String {
    match (s.median, s.percentiles.get("p90")) {
        (Some(m), Some(p)) => format!("{} / {}", fixed(m, decimals), fixed(*p, decimals)),
        (Some(m), None) => fixed(m, decimals),
        _ => DASH.to_string(),
    }
}

/// What the conversation cells sent: one line from the run's settings.
pub(crate) fn conversation_intro(s: &Scoring) -> Vec<String> {
    let Some(c) = &s.run.conversation else {
        return Vec::new();
    };
    let turns = if c.turns_min == c.turns_max {
        format!("{} turns", c.turns_min)
    } else {
        format!("{} to {} turns (drawn)", c.turns_min, c.turns_max)
    };
    let think = match c.think {
        tokentrace_schemas::manifest::Think::Fixed => "fixed",
        tokentrace_schemas::manifest::Think::Exponential => "exponential, mean",
    };
    let mut lines = Vec::new();
    if let Some(f) = &c.from {
        lines.push(format!(
            "Recorded sessions from `{}` (SHA-256 {}…, {} sessions), each sent once: its user messages as its turns, in place of the filler described next; the answers are the server's own",
            f.file,
            f.sha256.get(..12).unwrap_or(&f.sha256),
            f.sessions
        ));
    }
    lines.extend([
        format!(
            "Each session sends {turns}: the whole history (the server's own answers included) plus a new message of {} tokens, then waits for the answer ({} tokens{}) and a think time ({think} {} s) · {} · a session that ends is replaced, so each cell keeps its sessions live for the window",
            thousands(i64::from(c.message_tokens)),
            thousands(i64::from(c.answer_tokens)),
            if c.stop_at_eos { " at most" } else { "" },
            fixed(c.think_ns as f64 / 1e9, 2),
            [
                if c.system_tokens > 0 {
                    format!(
                        "a shared system prompt of {} tokens",
                        thousands(i64::from(c.system_tokens))
                    )
                } else {
                    "no system prompt".to_string()
                },
                if c.tool_tokens > 0 {
                    format!(
                        " · every turn after the first a tool result of {} tokens instead of a message",
                        thousands(i64::from(c.tool_tokens))
                    )
                } else {
                    String::new()
                }
            ]
            .concat(),
        ),
        "Cache hit is what the server said it served from its prefix cache (`cached_tokens`) of the history each turn repeated, over the turns after the first; Server hit is its own counters' ratio over the window (all prompt tokens). TTFT in ms and prefill tok/s (prompt tokens computed, not cached, over TTFT) as p50 / p90.".to_string(),
    ]);
    lines
}

/// One row per conversation cell: sessions, their rate and goodput, TTFT of first and
/// later turns, cache hits and KV-cache usage. `None` without conversation cells.
pub(crate) fn conversation_table(s: &Scoring) -> Option<Table> {
    let cells = cells(s);
    if cells.is_empty() {
        return None;
    }
    let headers = [
        "Sessions",
        "Message",
        "Status",
        "Sessions done",
        "Sessions/s",
        "Good sessions/s",
        "TTFT turn 1",
        "TTFT later turns",
        "Cache hit",
        "Server hit",
        "KV cache peak",
    ]
    .map(str::to_string)
    .to_vec();
    let rows = cells
        .iter()
        .map(|c| {
            let t = talk_of(c);
            let ttft = |pick: fn(&ConversationFigures) -> &Summary| {
                t.map_or_else(|| DASH.to_string(), |t| p50_p90(pick(t), 0))
            };
            vec![
                c.concurrency.to_string(),
                context_label(c.context),
                c.status_label(),
                t.map_or_else(
                    || DASH.to_string(),
                    |t| format!("{} of {}", t.sessions_completed, t.sessions_started),
                ),
                opt(t.and_then(|t| t.sessions_per_s), |x| fixed(x, 2)),
                opt(t.and_then(|t| t.session_goodput), |x| fixed(x, 2)),
                ttft(|t| &t.ttft_first_turn_ms),
                ttft(|t| &t.ttft_later_turns_ms),
                percent(t.and_then(|t| t.cache_hit_ratio)),
                percent(t.and_then(|t| t.server_cache_hit_ratio)),
                percent(t.and_then(|t| t.kv_usage_max)),
            ]
        })
        .collect();
    Some(Table { headers, rows })
}

/// One row per conversation cell and turn: turns sent and answered, median history and
/// prompt tokens, TTFT and prefill speed (p50 / p90), cache hit. `None` without
/// conversation cells.
pub(crate) fn turn_table(s: &Scoring) -> Option<Table> {
    let cells = cells(s);
    if cells.is_empty() {
        return None;
    }
    let headers = [
        "Sessions",
        "Turn",
        "Answered",
        "History tokens",
        "Prompt tokens",
        "TTFT ms",
        "Prefill tok/s",
        "Cache hit",
    ]
    .map(str::to_string)
    .to_vec();
    let mut rows = Vec::new();
    for c in cells {
        let Some(t) = talk_of(c) else {
            continue;
        };
        for r in &t.by_turn {
            rows.push(vec![
                c.concurrency.to_string(),
                r.turn.to_string(),
                format!("{} of {}", r.answered, r.sent),
                opt(r.history_tokens, |x| thousands(x.round() as i64)),
                opt(r.prompt_tokens, |x| thousands(x.round() as i64)),
                p50_p90(&r.ttft_ms, 0),
                p50_p90(&r.prefill_tok_s, 0),
                percent(r.cache_hit_ratio),
            ]);
        }
    }
    Some(Table { headers, rows })
}
