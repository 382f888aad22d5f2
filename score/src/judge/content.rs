//! The content rules: what the server answered, not how fast. A script foreign to the
//! prompts, an empty answer, a stop before `max_tokens` under `ignore_eos`: each check
//! gives the requests it found with an excerpt; warnings and verdicts report them.

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::tables::EndReason;
use unicode_script::{Script, UnicodeScript};

use super::view::{DecodeView, Stream};
use crate::contract::{ContentFinding, ContentFindings};
use crate::rules::{Channel, RuleSet};

/// Requests listed per check; the rest are counted.
pub const LISTED: usize = 10;

/// Characters of an excerpt.
const EXCERPT_CHARS: usize = 60;

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

/// What the content checks found in the cell, computed on the first call and kept in
/// the view for the others (figures, warnings, verdicts).
pub fn found<'v>(v: &'v DecodeView, rules: &RuleSet) -> &'v [ContentFindings] {
    v.content.get_or_init(|| checks(v, rules))
}

/// Every content check the rule set turns on, over the cell's requests in scope, each
/// with what it found (checks that found nothing are left out).
fn checks(v: &DecodeView, rules: &RuleSet) -> Vec<ContentFindings> {
    let c = &rules.content;
    let streams: Vec<&Stream> = v.in_scope(rules).collect();
    let mut out = Vec::new();
    let mut push = |check: &str, found: Vec<ContentFinding>| {
        if !found.is_empty() {
            let more = found.len().saturating_sub(LISTED);
            out.push(ContentFindings {
                check: check.to_string(),
                findings: found.into_iter().take(LISTED).collect(),
                more,
                of: streams.len(),
            });
        }
    };
    let finding = |s: &Stream, channel, detail, excerpt| ContentFinding {
        request_id: s.info.request_id,
        role: s.info.role.as_str().to_string(),
        channel,
        detail,
        excerpt,
    };
    let text = |s: &Stream| v.texts.get(&s.info.request_id);
    if let Some(max_share) = c.script_mix_max_share {
        let allowed = c.scripts().unwrap_or_default();
        let mut found = Vec::new();
        for s in &streams {
            let Some((content, reasoning)) = text(s) else {
                continue;
            };
            for (channel, t) in [(Channel::Content, content), (Channel::Reasoning, reasoning)] {
                let m = mix(t, &allowed);
                if m.letters < c.script_mix_min_letters as usize || m.letters == 0 {
                    continue;
                }
                let share = m.foreign as f64 / m.letters as f64;
                if share > max_share {
                    found.push(finding(
                        s,
                        Some(channel),
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
        push("script_mix", found);
    }
    let finished = |s: &Stream| {
        matches!(
            s.info.end_reason,
            EndReason::FinishedStop | EndReason::FinishedLength | EndReason::FinishedOther
        )
    };
    if c.empty_output {
        let found = streams
            .iter()
            .filter(|s| finished(s) && s.tokens.tokens == 0)
            .map(|s| {
                finding(
                    s,
                    None,
                    format!("0 tokens, {}", s.info.end_reason.as_str()),
                    String::new(),
                )
            })
            .collect();
        push("empty_output", found);
    }
    if c.stop_early {
        let found = streams
            .iter()
            .filter(|s| {
                s.info.end_reason == EndReason::FinishedStop
                    && s.tokens.tokens > 0
                    && s.info.max_tokens.is_some_and(|m| s.tokens.tokens < m)
            })
            .map(|s| {
                let (content, reasoning) = text(s).map_or(("", ""), |(c, r)| (c, r));
                finding(
                    s,
                    None,
                    format!(
                        "stop after {} of {} tokens",
                        s.tokens.tokens,
                        s.info.max_tokens.unwrap_or(0)
                    ),
                    tail(if content.is_empty() {
                        reasoning
                    } else {
                        content
                    }),
                )
            })
            .collect();
        push("stop_early", found);
    }
    out
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
