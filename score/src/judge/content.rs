//! The content rules: what the server answered, not how fast. A script foreign to the
//! prompts, an empty answer, a stop before `max_tokens` under `ignore_eos`: each check
//! gives the requests it found with an excerpt; warnings and verdicts report them.

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::tables::EndReason;

use super::view::{DecodeView, Stream};
use crate::contract::{ContentFinding, ContentFindings};
use crate::rules::RuleSet;

/// Requests listed per check; the rest are counted.
pub const LISTED: usize = 10;

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
    let said = |s: &Stream| v.said.get(&s.info.request_id);
    if c.script_mix_max_share.is_some() {
        let mut found = Vec::new();
        for s in &streams {
            for (channel, detail, excerpt) in said(s).map_or(&[][..], |x| &x.script_mix[..]) {
                found.push(finding(s, Some(*channel), detail.clone(), excerpt.clone()));
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
            .filter(|s| finished(s) && s.tokens().tokens == 0)
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
            .filter(|s| crate::said::stopped_early(s.info, s.tokens().tokens))
            .map(|s| {
                finding(
                    s,
                    None,
                    format!(
                        "stop after {} of {} tokens",
                        s.tokens().tokens,
                        s.info.max_tokens.unwrap_or(0)
                    ),
                    said(s).and_then(|x| x.tail.clone()).unwrap_or_default(),
                )
            })
            .collect();
        push("stop_early", found);
    }
    out
}
