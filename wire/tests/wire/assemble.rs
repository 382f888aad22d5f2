//! A request's body reads into `chunks` rows and `requests` fields.

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::manifest::TokenCounting;
use tokentrace_schemas::tables::{ChunkKind, ChunkRow, EndReason, Endpoint, RequestRow, Role};
use tokentrace_wire::{Assembler, Counting, End, MAX_ERROR_BODY, Seen};

use crate::fixture;

fn row() -> RequestRow {
    RequestRow {
        slot: Some(1),
        prompt_tokens_requested: 37,
        max_tokens: Some(64),
        sent_ns: Some(20),
        headers_ns: Some(30),
        ..RequestRow::unsent(42, Role::Measured, Endpoint::Chat, 10)
    }
}

/// Feeds `bytes` in reads of `piece` bytes (read i arrives at 100 + i) and ends `end`.
fn assemble(
    bytes: &[u8],
    piece: usize,
    counting: impl Into<Counting>,
    status: u16,
    end: End,
) -> (Vec<ChunkRow>, RequestRow) {
    let mut a = Assembler::new(counting, row());
    a.status(status);
    let mut out = Vec::new();
    let mut now = 1_000_000;
    let mut stamp = || {
        now += 1;
        now
    };
    for (i, read) in bytes.chunks(piece).enumerate() {
        if a.read(100 + i as i64, read, &mut stamp, &mut out).is_err() {
            break;
        }
    }
    let row = a.finish(end, 5_000, &mut out);
    (out, row)
}

fn tokens(rows: &[ChunkRow]) -> i32 {
    rows.iter().filter_map(|r| r.tokens).sum()
}

#[test]
fn llamacpp_chat_counted_one_per_chunk_matches_usage() {
    let bytes = fixture("llamacpp-chat.sse");
    let (rows, req) = assemble(
        &bytes,
        bytes.len(),
        TokenCounting::OnePerChunk,
        200,
        End::Clean,
    );
    // 32 text events, and the EOS of the `stop` stream settled from the final usage.
    assert_eq!(tokens(&rows), 33);
    assert_eq!(req.completion_tokens_server, Some(33));
    assert_eq!(req.prompt_tokens_server, Some(37));
    assert_eq!(req.end_reason, EndReason::FinishedStop);
    assert_eq!(req.finish_reason.as_deref(), Some("stop"));
    assert_eq!(req.end_ns, Some(5_000));
    assert_eq!(
        req.server_request_id.as_deref(),
        Some("chatcmpl-YpAwrnpG3x4SZ6Gr0z9Yv5aBMTMvAJK4")
    );
    let seqs: Vec<i32> = rows.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (0..rows.len() as i32).collect::<Vec<_>>());
    assert_eq!(
        rows.iter().map(|r| r.bytes as usize).sum::<usize>(),
        bytes.len(),
        "every byte belongs to a row"
    );
    assert_eq!(rows.last().map(|r| r.kind), Some(ChunkKind::Done));
    assert!(rows.iter().all(|r| r.queue_delay_ns.is_some_and(|d| d > 0)));
}

#[test]
fn simulator_stream_under_each_policy() {
    let bytes = fixture("sim-completions-usage-ids.sse");
    for counting in [
        Counting::Policy(TokenCounting::TokenIds),
        Counting::Policy(TokenCounting::Usage),
        Counting::Auto,
    ] {
        let (rows, req) = assemble(&bytes, 64, counting, 200, End::Clean);
        assert_eq!(tokens(&rows), 8, "{counting:?}");
        assert_eq!(req.completion_tokens_server, Some(8));
        assert!(req.first_token_ns.is_some() && req.last_token_ns >= req.first_token_ns);
    }
}

#[test]
fn any_read_split_gives_the_same_rows_but_arrival() {
    for name in [
        "llamacpp-chat.sse",
        "llamacpp-completions.sse",
        "sim-chat-reasoning.sse",
        "sim-malformed-ping.sse",
        "sim-error-event.sse",
    ] {
        let bytes = fixture(name);
        let strip = |(rows, req): (Vec<ChunkRow>, RequestRow)| {
            let rows: Vec<ChunkRow> = rows
                .into_iter()
                .map(|r| ChunkRow {
                    arrival_ns: 0,
                    queue_delay_ns: None,
                    ..r
                })
                .collect();
            let req = RequestRow {
                first_chunk_ns: None,
                first_token_ns: None,
                last_token_ns: None,
                ..req
            };
            (rows, req)
        };
        let whole = strip(assemble(
            &bytes,
            bytes.len(),
            TokenCounting::OnePerChunk,
            200,
            End::Clean,
        ));
        for piece in [1, 3, 17, 256] {
            let split = strip(assemble(
                &bytes,
                piece,
                TokenCounting::OnePerChunk,
                200,
                End::Clean,
            ));
            assert_eq!(split, whole, "{name} in reads of {piece}");
        }
    }
}

#[test]
fn an_event_arrives_with_the_read_that_completed_it() {
    let bytes = fixture("sim-completions-usage-ids.sse");
    let (rows, req) = assemble(&bytes, 5, TokenCounting::TokenIds, 200, End::Clean);
    let mut end = 0usize;
    for r in &rows {
        end += r.bytes as usize;
        // The read that holds the event's last byte is read (end - 1) / 5.
        assert_eq!(r.arrival_ns, 100 + ((end - 1) / 5) as i64, "seq {}", r.seq);
    }
    assert_eq!(req.first_chunk_ns, Some(rows[0].arrival_ns));
}

#[test]
fn every_end() {
    let bytes = fixture("sim-completions-usage-ids.sse");
    let half = &bytes[..bytes.len() / 2];
    let (_, r) = assemble(half, 64, TokenCounting::TokenIds, 200, End::Cancelled);
    assert_eq!(r.end_reason, EndReason::Cancelled);
    let (_, r) = assemble(half, 64, TokenCounting::TokenIds, 200, End::Stalled(None));
    assert_eq!((r.end_reason, r.error), (EndReason::StallTimeout, None));
    let why = "the stream stopped: no byte for 1s";
    let (_, r) = assemble(
        half,
        64,
        TokenCounting::TokenIds,
        200,
        End::Stalled(Some(why.into())),
    );
    assert_eq!(
        (r.end_reason, r.error.as_deref()),
        (EndReason::StallTimeout, Some(why))
    );
    let (_, r) = assemble(
        half,
        64,
        TokenCounting::TokenIds,
        200,
        End::Failed("reset".into()),
    );
    assert_eq!(
        (r.end_reason, r.error.as_deref()),
        (EndReason::Disconnect, Some("reset"))
    );
    // A clean end without a finish reason is a disconnect; one inside an event says so.
    let (_, r) = assemble(half, 64, TokenCounting::TokenIds, 200, End::Clean);
    assert_eq!(r.end_reason, EndReason::Disconnect);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.starts_with("the stream ended inside an event")),
        "{r:?}"
    );
    // An error event wins over the end.
    let err = fixture("sim-error-event.sse");
    let (rows, r) = assemble(&err, 64, TokenCounting::TokenIds, 200, End::Clean);
    assert_eq!(r.end_reason, EndReason::StreamError);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("Internal server error"))
    );
    assert!(rows.iter().any(|c| c.kind == ChunkKind::Error));
}

#[test]
fn an_http_error_keeps_its_body_as_the_error_bounded() {
    let body =
        br#"{"error":{"message":"the request exceeds the available context size","code":400}}"#;
    let (rows, r) = assemble(body, 7, TokenCounting::TokenIds, 400, End::Clean);
    assert!(rows.is_empty());
    assert_eq!(
        (r.end_reason, r.http_status),
        (EndReason::HttpError, Some(400))
    );
    assert_eq!(r.error.as_deref().map(str::as_bytes), Some(&body[..]));
    let big = vec![b'x'; MAX_ERROR_BODY * 3];
    let (_, r) = assemble(
        &big,
        4096,
        TokenCounting::TokenIds,
        503,
        End::Failed("cut".into()),
    );
    assert_eq!(r.end_reason, EndReason::HttpError);
    assert_eq!(r.error.map(|e| e.len()), Some(MAX_ERROR_BODY));
}

#[test]
fn policy_names_round_trip() {
    for c in [
        TokenCounting::TokenIds,
        TokenCounting::Usage,
        TokenCounting::OnePerChunk,
    ] {
        assert_eq!(TokenCounting::parse(c.as_str()), Some(c));
        assert_ne!(c.describe(), "");
    }
    assert_eq!(TokenCounting::parse("bytes"), None);
}

#[test]
fn the_assembler_reports_what_text_events_carried() {
    let seen = |name: &str| {
        let bytes = fixture(name);
        let mut a = Assembler::new(Counting::Auto, row());
        a.status(200);
        let mut out = Vec::new();
        a.read(100, &bytes, &mut || 1, &mut out).expect("read");
        a.seen()
    };
    assert_eq!(
        seen("sim-completions-usage-ids.sse"),
        Seen {
            token_ids: true,
            continuous_usage: true,
            reasoning: false
        }
    );
    assert_eq!(seen("llamacpp-completions.sse"), Seen::default());
    let reasoning = seen("sim-chat-reasoning.sse");
    assert!(reasoning.reasoning, "{reasoning:?}");
}
