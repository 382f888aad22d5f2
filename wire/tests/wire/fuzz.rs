//! Property tests (proptest) of every decoder of a server's bytes: SSE framing gives the
//! same events under any split of the same bytes; event parsing and chunk assembly never
//! panic on any input and give the same rows under any split. Inputs are random bytes,
//! SSE-shaped lines, and captured streams with bytes flipped, cut or spliced. Cases:
//! `PROPTEST_CASES` (proptest's default, 256, in CI; `bench/fuzz.sh` runs 10 million);
//! a failing case is kept in `proptest-regressions/` and replayed first from then on.

use std::borrow::Cow;

use proptest::prelude::*;
use tokentrace_schemas::manifest::TokenCounting;
use tokentrace_schemas::tables::{ChunkRow, Endpoint, RequestRow, Role};
use tokentrace_wire::sse::{SseEvent, SseFramer};
use tokentrace_wire::{Assembler, Counting, End};

use crate::fixture;

const CAPTURES: [&str; 5] = [
    "llamacpp-chat.sse",
    "llamacpp-completions.sse",
    "sim-chat-reasoning.sse",
    "sim-malformed-ping.sse",
    "sim-error-event.sse",
];

/// One SSE-shaped line: fields real servers send, odd ones, and line endings of each
/// kind.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let body = prop_oneof![
        Just(b"data: [DONE]".to_vec()),
        Just(b": ping".to_vec()),
        Just(b"event: error".to_vec()),
        Just(Vec::new()),
        "[ -~]{0,40}".prop_map(|s| format!("data: {s}").into_bytes()),
        r#"\{"choices":\[\{"delta":\{"content":"[a-z ]{0,8}"\},"finish_reason":(null|"stop")\}\],"usage":\{"completion_tokens":[0-9]{1,3}\}\}"#
            .prop_map(|s| format!("data: {s}").into_bytes()),
        prop::collection::vec(any::<u8>(), 0..24),
    ];
    let end = prop_oneof![Just(&b"\n"[..]), Just(&b"\r\n"[..]), Just(&b"\r"[..])];
    (body, end).prop_map(|(mut b, e)| {
        b.extend_from_slice(e);
        b
    })
}

/// A captured stream with a few bytes flipped, removed or inserted.
fn mutated_capture() -> impl Strategy<Value = Vec<u8>> {
    (
        0..CAPTURES.len(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 0..6),
    )
        .prop_map(|(i, edits)| {
            let mut b = fixture(CAPTURES[i]);
            for (at, byte, kind) in edits {
                if b.is_empty() {
                    break;
                }
                let at = at.index(b.len());
                match kind {
                    0 => b[at] ^= byte | 1,
                    1 => {
                        b.remove(at);
                    }
                    _ => b.insert(at, byte),
                }
            }
            b
        })
}

/// Bytes a server might send: random, SSE-shaped, or a damaged capture.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        prop::collection::vec(line(), 0..24).prop_map(|ls| ls.concat()),
        mutated_capture(),
    ]
}

/// `bytes` cut at the given places (sorted, deduplicated, in range).
fn pieces(bytes: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for a in at {
        out.push(bytes[from..a].to_vec());
        from = a;
    }
    out.push(bytes[from..].to_vec());
    out
}

fn frame(reads: &[Vec<u8>]) -> (Vec<SseEvent<'static>>, usize) {
    let mut f = SseFramer::new();
    let mut events = Vec::new();
    for r in reads {
        events.extend(f.push(r, 0).expect("far below the event bound"));
    }
    (events, f.leftover())
}

fn row() -> RequestRow {
    RequestRow {
        sent_ns: Some(20),
        ..RequestRow::unsent(42, Role::Measured, Endpoint::Chat, 10)
    }
}

/// Rows of `reads` with the times a split changes taken out.
fn assemble(reads: &[Vec<u8>], counting: Counting) -> (Vec<ChunkRow>, RequestRow) {
    let mut a = Assembler::new(counting, row());
    a.status(200);
    let mut out = Vec::new();
    let mut stamp = || 0;
    for r in reads {
        if a.read(100, r, &mut stamp, &mut out).is_err() {
            break;
        }
    }
    let req = a.finish(End::Clean, 5_000, &mut out);
    let rows = out
        .into_iter()
        .map(|r| ChunkRow {
            arrival_ns: 0,
            queue_delay_ns: None,
            ..r
        })
        .collect();
    (rows, req)
}

proptest! {
    /// Any split of the same bytes frames the same events with the same wire lengths,
    /// and leaves the same unfinished tail.
    #[test]
    fn framing_is_the_same_under_any_split(
        bytes in stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let whole = frame(std::slice::from_ref(&bytes));
        let split = frame(&pieces(&bytes, &cuts));
        prop_assert_eq!(&split, &whole);
        // Every byte is accounted for: in an event, in the tail, or in blank lines.
        let framed: usize = whole.0.iter().map(|e| e.wire_bytes).sum();
        prop_assert!(framed + whole.1 <= bytes.len());
    }

    /// Parsing any event text gives a result, never a panic; its fields are bounded by
    /// the text.
    #[test]
    fn event_parsing_takes_any_text(
        data in prop_oneof![
            any::<String>(),
            r#"\{"choices":\[\{"delta":\{"content":".{0,6}","reasoning_content":".{0,6}"\},"text":".{0,4}","token_ids":\[[0-9,-]{0,12}\]\}\],"usage":\{"completion_tokens":-?[0-9]{1,12},"prompt_tokens":[0-9e.+-]{1,8}\},"error":\{"message":".{0,8}"\}\}"#,
        ],
        event in proptest::option::of("[a-z]{0,8}"),
    ) {
        let ev = SseEvent {
            arrival_ns: 0,
            wire_bytes: data.len() + 8,
            data: Some(Cow::Borrowed(data.as_str())),
            event: event.as_deref().map(Cow::Borrowed),
            comment: None,
        };
        let p = tokentrace_wire::event::parse(&ev);
        prop_assert!(p.content.as_deref().is_none_or(|c| c.len() <= data.len()));
    }

    /// A request's rows are the same under any split of its body, whatever the body,
    /// under every token-counting policy.
    #[test]
    fn assembly_is_the_same_under_any_split(
        bytes in stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        counting in prop_oneof![
            Just(Counting::Auto),
            Just(Counting::Policy(TokenCounting::Usage)),
            Just(Counting::Policy(TokenCounting::TokenIds)),
            Just(Counting::Policy(TokenCounting::OnePerChunk)),
        ],
    ) {
        let whole = assemble(std::slice::from_ref(&bytes), counting);
        let split = assemble(&pieces(&bytes, &cuts), counting);
        prop_assert_eq!(split.0, whole.0);
        prop_assert_eq!(split.1.end_reason, whole.1.end_reason);
        prop_assert_eq!(split.1.completion_tokens_server, whole.1.completion_tokens_server);
        prop_assert_eq!(split.1.error, whole.1.error);
    }
}
