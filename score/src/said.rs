//! What the text rules read of one request's answer (the loop search's repetitions, the
//! script mix, the tail of an answer that stopped early), taken from its whole text at
//! once: as its last row is read when scoring, so the text can then be dropped.

use tokentrace_schemas::tables::{EndReason, Role};
use unicode_script::{Script, UnicodeScript};

use crate::data::{RequestInfo, Said, TokenAgg};
use crate::loops::{self, Repetition};
use crate::rules::{Channel, RuleSet};

/// Characters of an excerpt.
const EXCERPT_CHARS: usize = 60;

/// Earlier copies of a k-gram compared per position in the search beyond the cycle cap.
const BEYOND_CAP_NEAREST: usize = 4;

/// What the text rules find in `info`'s text (`content`, `reasoning`); `tokens` are its
/// token aggregates as recorded (counted here as the rule set says).
pub fn said(
    info: &RequestInfo,
    tokens: &TokenAgg,
    content: &str,
    reasoning: &str,
    rules: &RuleSet,
) -> Said {
    let channel_text = |c: Channel| match c {
        Channel::Content => content,
        Channel::Reasoning => reasoning,
    };
    let mut out = Said::default();
    let l = &rules.looped;
    let searched = match info.role {
        Role::Measured => true,
        Role::Warmup => l.include_warmup,
        _ => false,
    };
    if searched {
        let mut channels = l.channels.clone();
        channels.sort();
        channels.dedup();
        for channel in channels {
            let found = search(channel_text(channel), rules);
            if !found.is_empty() {
                out.repeats.push((channel, found));
            }
        }
    }
    let c = &rules.content;
    if let Some(max_share) = c.script_mix_max_share {
        let allowed = c.scripts().unwrap_or_default();
        for channel in [Channel::Content, Channel::Reasoning] {
            let t = channel_text(channel);
            let m = mix(t, &allowed);
            if m.letters < c.script_mix_min_letters as usize || m.letters == 0 {
                continue;
            }
            let share = m.foreign as f64 / m.letters as f64;
            if share > max_share {
                out.script_mix.push((
                    channel,
                    format!(
                        "{}% of {} letters {} (limit {}%)",
                        crate::numbers::fixed(share * 100.0, 1),
                        m.letters,
                        m.script.map_or("foreign", |s| s.full_name()),
                        crate::numbers::fixed(max_share * 100.0, 1)
                    ),
                    excerpt(t, m.first.unwrap_or(0)),
                ));
            }
        }
    }
    if stopped_early(info, tokens.counted(rules.tokens.count).0.tokens) {
        out.tail = Some(tail(if content.is_empty() {
            reasoning
        } else {
            content
        }));
    }
    out
}

/// Whether a request stopped before its `max_tokens` with `tokens` (as counted) streamed.
pub fn stopped_early(info: &RequestInfo, tokens: i64) -> bool {
    info.end_reason == EndReason::FinishedStop
        && tokens > 0
        && info.max_tokens.is_some_and(|m| tokens < i64::from(m))
}

/// The repetitions of one channel's text the loop rules look at: within the cycle cap,
/// then beyond it (nothing for a text of fewer bytes than the shorter span needs
/// characters).
pub fn search(text: &str, rules: &RuleSet) -> Vec<Repetition> {
    let l = &rules.looped;
    let min_span = l.min_span_chars.min(l.suspect_min_span_chars) as usize;
    if text.len() < min_span {
        return Vec::new();
    }
    let started = std::time::Instant::now();
    let chars = loops::chars(text, l.normalize_digits);
    let mut found = loops::repetitions(
        &chars,
        loops::Search {
            min_cycle: 1,
            max_cycle: l.max_cycle_chars as usize,
            nearest: 0,
            min_span,
            ignore_whitespace: l.ignore_whitespace_cycles,
        },
    );
    if l.beyond_cap_suspect_min_cycles > 0 {
        // Cycles longer than the cap: only the nearest earlier copies of each k-gram
        // are compared, so the search stays linear without a cap.
        found.extend(loops::repetitions(
            &chars,
            loops::Search {
                min_cycle: l.max_cycle_chars as usize + 1,
                max_cycle: usize::MAX,
                nearest: BEYOND_CAP_NEAREST,
                min_span: l.suspect_min_span_chars as usize,
                ignore_whitespace: l.ignore_whitespace_cycles,
            },
        ));
    }
    crate::stages::add_time(crate::stages::Stage::Loops, started);
    found
}

/// The letters of a text (characters of a script, not Common or Inherited), those in a
/// script outside `allowed`, the most frequent such script, and where the first of them
/// is (its character index).
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    pub letters: usize,
    pub foreign: usize,
    pub script: Option<Script>,
    pub first: Option<usize>,
}

pub fn mix(text: &str, allowed: &[Script]) -> Mix {
    let mut m = Mix {
        letters: 0,
        foreign: 0,
        script: None,
        first: None,
    };
    let mut counts: Vec<(Script, usize)> = Vec::new();
    for (i, c) in text.chars().enumerate() {
        // ASCII by hand (Unicode's Scripts.txt: the ASCII letters are Latin, every other
        // ASCII character Common); the table lookup cost a sixth of a report's time.
        let s = if c.is_ascii() {
            if c.is_ascii_alphabetic() {
                Script::Latin
            } else {
                continue;
            }
        } else {
            c.script()
        };
        if matches!(s, Script::Common | Script::Inherited | Script::Unknown) {
            continue;
        }
        m.letters += 1;
        if allowed.contains(&s) {
            continue;
        }
        m.foreign += 1;
        m.first.get_or_insert(i);
        match counts.iter_mut().find(|(x, _)| *x == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s, 1)),
        }
    }
    // The most frequent; the first seen on a tie.
    m.script = counts
        .iter()
        .fold(None::<(Script, usize)>, |best, &(s, n)| match best {
            Some((_, b)) if b >= n => best,
            _ => Some((s, n)),
        })
        .map(|(s, _)| s);
    m
}

/// `EXCERPT_CHARS` characters of `text` starting a little before character `at`, on one
/// line.
fn excerpt(text: &str, at: usize) -> String {
    let from = at.saturating_sub(EXCERPT_CHARS / 4);
    text.chars()
        .skip(from)
        .take(EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The last `EXCERPT_CHARS` characters of `text`, on one line.
fn tail(text: &str) -> String {
    let n = text.chars().count();
    excerpt(text, n.saturating_sub(EXCERPT_CHARS) + EXCERPT_CHARS / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_counts_letters_of_other_scripts_only() {
        let latin = [Script::Latin];
        let m = mix("queue 42, batch: 的是了", &latin);
        assert_eq!((m.letters, m.foreign), (13, 3));
        assert_eq!(m.script, Some(Script::Han));
        assert_eq!(m.first, Some(17));
        // Digits, punctuation and spaces are nobody's letters.
        assert_eq!(mix("12 + 3 = 15!", &latin).letters, 0);
        assert_eq!(mix("résumé", &latin).foreign, 0);
        assert_eq!(mix("кошка cat", &latin).script, Some(Script::Cyrillic));
    }

    #[test]
    fn the_ascii_shortcut_agrees_with_the_script_table() {
        for c in (0u8..128).map(char::from) {
            let m = mix(&c.to_string(), &[]);
            let script = c.script();
            let letter = !matches!(script, Script::Common | Script::Inherited | Script::Unknown);
            assert_eq!(m.letters, usize::from(letter), "{c:?}");
            assert_eq!(m.script, letter.then_some(script), "{c:?}");
        }
    }

    #[test]
    fn excerpts_start_before_the_find_and_stay_on_one_line() {
        let text = format!("{}的是\nx", "a".repeat(100));
        let e = excerpt(&text, 100);
        assert!(e.starts_with(&"a".repeat(15)), "{e}");
        assert!(e.contains("的是 x"), "{e}");
        assert_eq!(tail("short"), "short");
    }
}
