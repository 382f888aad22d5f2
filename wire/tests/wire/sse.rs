//! SSE framing.

use tokentrace_wire::sse::{EventTooLong, MAX_EVENT_BYTES, SseEvent, SseFramer};

use crate::fixture;

fn frame_in_pieces(bytes: &[u8], piece: usize) -> Vec<SseEvent<'static>> {
    let mut f = SseFramer::new();
    let mut out = Vec::new();
    for (i, part) in bytes.chunks(piece).enumerate() {
        out.extend(f.push(part, i as i64).expect("frames"));
    }
    assert_eq!(f.leftover(), 0);
    out
}

#[test]
fn any_read_split_gives_the_same_events() {
    for name in [
        "llamacpp-chat.sse",
        "llamacpp-completions.sse",
        "sim-malformed-ping.sse",
    ] {
        let bytes = fixture(name);
        let whole = frame_in_pieces(&bytes, bytes.len());
        let blocks = String::from_utf8_lossy(&bytes).matches("\n\n").count();
        assert_eq!(whole.len(), blocks, "{name}");
        assert_eq!(
            whole.iter().map(|e| e.wire_bytes).sum::<usize>(),
            bytes.len(),
            "{name}: every byte in an event"
        );
        for piece in [1, 2, 7, 64, 1000] {
            let split = frame_in_pieces(&bytes, piece);
            let strip = |v: &[SseEvent]| -> Vec<(usize, Option<String>, Option<String>)> {
                v.iter()
                    .map(|e| {
                        let own =
                            |c: &Option<std::borrow::Cow<'_, str>>| c.as_deref().map(String::from);
                        (e.wire_bytes, own(&e.data), own(&e.comment))
                    })
                    .collect()
            };
            assert_eq!(strip(&split), strip(&whole), "{name} in pieces of {piece}");
        }
    }
}

#[test]
fn an_event_arrives_with_the_read_that_completed_it() {
    let mut f = SseFramer::new();
    assert!(f.push(b"data: {\"a\":", 100).expect("ok").is_empty());
    let evs = f.push(b"1}\n\ndata: [DO", 200).expect("ok");
    assert_eq!(evs.len(), 1);
    assert_eq!((evs[0].arrival_ns, evs[0].wire_bytes), (200, 15));
    assert_eq!(evs[0].data.as_deref(), Some("{\"a\":1}"));
    let evs = f.push(b"NE]\n\n", 300).expect("ok");
    assert_eq!(
        (evs[0].arrival_ns, evs[0].data.as_deref()),
        (300, Some("[DONE]"))
    );
}

#[test]
fn line_endings_fields_and_comments() {
    let mut f = SseFramer::new();
    let evs = f
        .push(b"data: a\r\n\r\ndata: b\r\rdata:c\ndata:  d\n\nevent: error\ndata: {\"x\":1}\n\n: ping\n\n\n\n", 1)
        .expect("ok");
    let data: Vec<Option<&str>> = evs.iter().map(|e| e.data.as_deref()).collect();
    assert_eq!(
        data,
        vec![Some("a"), Some("b"), Some("c\n d"), Some("{\"x\":1}"), None]
    );
    assert_eq!(evs[0].wire_bytes, 11);
    assert_eq!(evs[1].wire_bytes, 9);
    assert_eq!(evs[3].event.as_deref(), Some("error"));
    assert_eq!(evs[4].comment.as_deref(), Some("ping"));
    // A CRLF split across two reads is one line break.
    let mut f = SseFramer::new();
    assert!(f.push(b"data: x\r", 1).expect("ok").is_empty());
    let evs = f.push(b"\n\r\n", 2).expect("ok");
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].data.as_deref(), Some("x"));
}

#[test]
fn endless_event_is_an_error_not_unbounded_memory() {
    let mut f = SseFramer::new();
    let big = vec![b'x'; MAX_EVENT_BYTES / 4];
    let mut result = Ok(Vec::new());
    for _ in 0..5 {
        result = f.push(&big, 1);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(EventTooLong));
}

#[test]
fn a_stream_cut_mid_event_leaves_leftover_bytes() {
    let mut f = SseFramer::new();
    let evs = f.push(b"data: {\"a\":1}\n\ndata: {\"b\"", 1).expect("ok");
    assert_eq!(evs.len(), 1);
    assert_eq!(f.leftover(), 10);
}
