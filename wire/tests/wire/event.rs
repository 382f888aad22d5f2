//! Reading captured streams into chunk fields.

use tokentrace_schemas::tables::ChunkKind;
use tokentrace_wire::event::{Parsed, parse, parse_value};
use tokentrace_wire::sse::SseFramer;

use crate::fixture;

fn parsed(name: &str) -> Vec<Parsed<'static>> {
    let mut f = SseFramer::new();
    f.push(&fixture(name), 0)
        .expect("frames")
        .iter()
        .map(|e| parse(e).into_owned())
        .collect()
}

#[test]
fn llamacpp_chat() {
    let p = parsed("llamacpp-chat.sse");
    assert_eq!(
        p[0].content, None,
        "the role-only first delta has content: null"
    );
    assert!(!p[0].has_text());
    let usage = p.iter().rev().find_map(|x| x.usage).expect("usage chunk");
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens
        ),
        (Some(37), Some(33), Some(0))
    );
    // One token per chunk, and the EOS token that ends a `stop` stream counts in usage
    // but streams no text (the finishing chunk has an empty delta).
    let with_text = p.iter().filter(|x| x.has_text()).count();
    assert_eq!(with_text, 32);
    let finish = p
        .iter()
        .find(|x| x.finish_reason.is_some())
        .expect("finish chunk");
    assert!(!finish.has_text());
    assert_eq!(
        p.iter()
            .filter_map(|x| x.finish_reason.as_deref())
            .collect::<Vec<_>>(),
        vec!["stop"]
    );
    assert_eq!(p.last().map(Parsed::kind), Some(ChunkKind::Done));
    assert!(p.iter().all(|x| x.error.is_none()));
    assert!(
        p.iter()
            .filter(|x| x.kind() == ChunkKind::Data)
            .all(|x| x.server_id.as_deref() == Some("chatcmpl-YpAwrnpG3x4SZ6Gr0z9Yv5aBMTMvAJK4"))
    );
}

#[test]
fn llamacpp_completions() {
    let p = parsed("llamacpp-completions.sse");
    let usage = p.iter().rev().find_map(|x| x.usage).expect("usage chunk");
    let completion = usage.completion_tokens.expect("completion tokens");
    assert!(completion > 0);
    // One token per text chunk; the `length` finish chunk has empty text and no token.
    assert_eq!(p.iter().filter(|x| x.has_text()).count() as i32, completion);
    let finish = p
        .iter()
        .find(|x| x.finish_reason.is_some())
        .expect("finish chunk");
    assert_eq!(
        (finish.finish_reason.as_deref(), finish.content.as_deref()),
        (Some("length"), Some(""))
    );
    assert_eq!(p.last().map(Parsed::kind), Some(ChunkKind::Done));
}

#[test]
fn simulator_token_ids_and_continuous_usage_agree() {
    let p = parsed("sim-completions-usage-ids.sse");
    let mut ids = 0;
    for x in p.iter().filter(|x| x.token_ids.is_some()) {
        ids += x.token_ids.unwrap_or(0);
        assert_eq!(x.usage.and_then(|u| u.completion_tokens), Some(ids));
    }
    assert_eq!(ids, 8);
    assert_eq!(
        p.iter()
            .rev()
            .find_map(|x| x.usage)
            .and_then(|u| u.completion_tokens),
        Some(8)
    );
}

#[test]
fn simulator_reasoning_comes_first() {
    let p = parsed("sim-chat-reasoning.sse");
    let first_content = p
        .iter()
        .position(|x| x.content.as_deref().is_some_and(|c| !c.is_empty()))
        .expect("content");
    let reasoning: Vec<usize> = p
        .iter()
        .enumerate()
        .filter(|(_, x)| x.reasoning.is_some())
        .map(|(i, _)| i)
        .collect();
    assert!(!reasoning.is_empty());
    assert!(reasoning.iter().all(|&i| i <= first_content));
}

#[test]
fn errors_malformed_chunks_and_pings() {
    let p = parsed("sim-error-event.sse");
    let err = p
        .iter()
        .find(|x| x.kind() == ChunkKind::Error)
        .expect("error event");
    assert!(
        err.error
            .as_deref()
            .is_some_and(|m| m.contains("Internal server error"))
    );
    assert_eq!(p.last().map(Parsed::kind), Some(ChunkKind::Done));

    let p = parsed("sim-malformed-ping.sse");
    let bad: Vec<&Parsed> = p.iter().filter(|x| x.error.is_some()).collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].kind(), ChunkKind::Data);
    assert!(
        bad[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("unreadable JSON"))
    );
    assert!(p.iter().any(|x| x.kind() == ChunkKind::Comment));
    assert_eq!(
        p.iter().filter(|x| x.has_text()).count(),
        4,
        "the stream goes on after the broken chunk"
    );
}

#[test]
fn llamacpp_ignores_continuous_usage_and_honours_ignore_eos() {
    // Asked for `continuous_usage_stats` and `ignore_eos`: usage comes once, at the end,
    // in a `choices: []` event that also carries `timings`; the stream ends on length.
    let p = parsed("llamacpp-chat-ignore-eos.sse");
    let with_usage: Vec<_> = p.iter().filter(|x| x.usage.is_some()).collect();
    assert_eq!(with_usage.len(), 1);
    assert_eq!(
        with_usage[0].usage.and_then(|u| u.completion_tokens),
        Some(6)
    );
    assert!(!with_usage[0].has_text());
    assert_eq!(p.iter().filter(|x| x.has_text()).count(), 6);
    assert!(
        p.iter()
            .any(|x| x.finish_reason.as_deref() == Some("length"))
    );
    assert_eq!(p.last().map(Parsed::kind), Some(ChunkKind::Done));
}

/// The typed reader (the hot path) and the `Value` reader agree on every event of every
/// captured stream, and on odd shapes that the typed reader hands over.
#[test]
fn typed_and_value_readers_agree() {
    let mut events: Vec<String> = Vec::new();
    for name in [
        "llamacpp-chat.sse",
        "llamacpp-completions.sse",
        "llamacpp-chat-ignore-eos.sse",
        "sim-completions-usage-ids.sse",
        "sim-chat-reasoning.sse",
        "sim-error-event.sse",
        "sim-malformed-ping.sse",
    ] {
        let mut f = SseFramer::new();
        for e in f.push(&fixture(name), 0).expect("frames") {
            if let Some(d) = e.data.as_deref().filter(|d| d.trim() != "[DONE]") {
                events.push(d.to_string());
            }
        }
    }
    for odd in [
        r#"{"choices":[{"delta":null,"text":"x"}]}"#,
        r#"{"choices":[{"delta":{"content":5},"text":"x"}]}"#,
        r#"{"choices":[{"text":"a\nb\u00e9","finish_reason":null,"token_ids":[1,2,3]}]}"#,
        r#"{"choices":[{"text":"a","token_ids":"no"}]}"#,
        r#"{"choices":[{"text":"a","token_ids":null}]}"#,
        r#"{"choices":null,"usage":null}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3.0,"completion_tokens":2}}"#,
        r#"{"choices":[null]}"#,
        r#"{"choices":[{"text":"a"},{"text":"b"}],"id":7}"#,
        r#"{"choices":[{"text":"a","text":"b"}]}"#,
        r#"{"usage":{"completion_tokens":99999999999}}"#,
        r#"{"usage":{"prompt_tokens_details":{"cached_tokens":4},"prompt_tokens":9}}"#,
        r#"{"usage":"lots"}"#,
        r#"{"error":null,"choices":[{"text":"ok"}]}"#,
        r#"{"error":{"message":"boom"},"id":"x"}"#,
        r#"{"error":"plain"}"#,
        r#"[1,2]"#,
        r#""text""#,
        r#"{"choices":[{"delta":{"reasoning":"r","reasoning_content":"rc"}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"r"}}]}"#,
        r#"{not json"#,
    ] {
        events.push(odd.to_string());
    }
    assert!(events.len() > 100, "{} events", events.len());
    for data in &events {
        let ev = tokentrace_wire::sse::SseEvent {
            arrival_ns: 0,
            wire_bytes: 0,
            data: Some(data.as_str().into()),
            event: None,
            comment: None,
        };
        assert_eq!(parse(&ev).into_owned(), parse_value(data), "{data}");
    }
}
