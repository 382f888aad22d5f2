//! One recorded request against the simulator over loopback: token counts, lifecycle
//! times, raw bytes, and the end reason of every fault.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tokentrace_recorder::client::{self, Record, RequestSpec, TokenCounting};
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::tables::{ChunkKind, ChunkRow, EndReason, Endpoint, RequestRow, Role};
use tokentrace_sim::{Profile, SimServer};
use tokio::sync::{mpsc, watch};

struct Recorded {
    chunks: Vec<ChunkRow>,
    raw: Vec<u8>,
    request: RequestRow,
}

async fn sim() -> SimServer {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim")
}

fn spec(sim: &SimServer, body: serde_json::Value) -> RequestSpec {
    RequestSpec {
        request_id: 7,
        slot: Some(0),
        role: Role::Measured,
        endpoint: Endpoint::Completions,
        url: format!("{}/v1/completions", sim.url()),
        body: body.to_string().into(),
        prompt_tokens_requested: 3,
        max_tokens: body["max_tokens"].as_i64().map(|v| v as i32),
    }
}

async fn record(
    spec: RequestSpec,
    counting: TokenCounting,
    fault: Option<&str>,
    stall: Duration,
    cancel_after: Option<Duration>,
) -> Recorded {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(f) = fault {
        headers.insert("x-sim-fault", f.parse().expect("header"));
    }
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client");
    let clock = RunClock::start();
    let (tx, mut rx) = mpsc::channel(64);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    if let Some(after) = cancel_after {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = cancel_tx.send(true);
        });
    } else {
        std::mem::forget(cancel_tx);
    }
    let ctl = client::RunCtl {
        counting,
        stall_timeout: stall,
        cancel: cancel_rx,
        first_token: None,
    };
    let task = tokio::spawn(async move { client::run(&client, &spec, ctl, &clock, &tx).await });
    let mut chunks = Vec::new();
    let mut raw = Vec::new();
    let mut request = None;
    while let Some(r) = rx.recv().await {
        match r {
            Record::Chunk(c) => chunks.push(c),
            Record::Raw { bytes, .. } => raw.extend_from_slice(&bytes),
            Record::Request(q) => request = Some(q),
            Record::Metrics(_) | Record::Event(_) | Record::Commit => {
                panic!("a request sends no metrics, events or commits")
            }
        }
    }
    task.await.expect("no panic");
    Recorded {
        chunks,
        raw,
        request: request.expect("a request row, always"),
    }
}

fn body(max_tokens: u32) -> serde_json::Value {
    json!({"prompt": " hello there", "max_tokens": max_tokens, "stream": true, "ignore_eos": true,
           "return_token_ids": true,
           "stream_options": {"include_usage": true, "continuous_usage_stats": true}})
}

const STALL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_counts_agree_with_usage_in_every_mode() {
    let sim = sim().await;
    for counting in [
        TokenCounting::TokenIds,
        TokenCounting::Usage,
        TokenCounting::OnePerChunk,
    ] {
        let r = record(spec(&sim, body(40)), counting, None, STALL, None).await;
        let q = &r.request;
        assert_eq!(q.end_reason, EndReason::FinishedLength, "{counting:?}");
        assert_eq!(q.completion_tokens_server, Some(40));
        let streamed: i32 = r.chunks.iter().filter_map(|c| c.tokens).sum();
        assert_eq!(streamed, 40, "{counting:?}");
        assert_eq!(q.http_status, Some(200));
        let (sent, first, last, end) = (
            q.sent_ns.expect("sent"),
            q.first_token_ns.expect("first"),
            q.last_token_ns.expect("last"),
            q.end_ns.expect("end"),
        );
        assert!(q.scheduled_ns <= sent && sent <= first && first <= last && last <= end);
        assert!(r.chunks.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
        assert!(
            r.chunks
                .iter()
                .all(|c| c.queue_delay_ns.is_some_and(|d| d >= 0))
        );
        let wire: i32 = r.chunks.iter().map(|c| c.bytes).sum();
        assert_eq!(
            wire as usize,
            r.raw.len(),
            "every raw byte is in some event"
        );
        assert_eq!(r.chunks.last().map(|c| c.kind), Some(ChunkKind::Done));
        assert!(
            q.server_request_id
                .as_deref()
                .is_some_and(|id| id.starts_with("cmpl-"))
        );
    }
    sim.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_end_with_their_reason() {
    let sim = sim().await;
    let short = Duration::from_millis(300);
    let cases: [(&str, Duration, EndReason); 4] = [
        ("http_503", STALL, EndReason::HttpError),
        ("reset;after=3", STALL, EndReason::Disconnect),
        ("error_event;after=2", STALL, EndReason::StreamError),
        ("stall;after=2;seconds=2", short, EndReason::StallTimeout),
    ];
    for (fault, stall, reason) in cases {
        let r = record(
            spec(&sim, body(20)),
            TokenCounting::TokenIds,
            Some(fault),
            stall,
            None,
        )
        .await;
        assert_eq!(r.request.end_reason, reason, "{fault}: {:?}", r.request);
        if reason != EndReason::StallTimeout {
            assert!(r.request.error.is_some(), "{fault}: the error is kept");
        }
    }
    let r = record(
        spec(&sim, body(20)),
        TokenCounting::TokenIds,
        Some("http_503"),
        STALL,
        None,
    )
    .await;
    assert_eq!(r.request.http_status, Some(503));
    assert!(
        r.request
            .error
            .as_deref()
            .is_some_and(|e| e.contains("ServiceUnavailableError"))
    );

    // A malformed chunk is recorded with its reason and the stream goes on.
    let r = record(
        spec(&sim, body(20)),
        TokenCounting::TokenIds,
        Some("malformed;after=2"),
        STALL,
        None,
    )
    .await;
    assert_eq!(r.request.end_reason, EndReason::FinishedLength);
    let bad: Vec<&ChunkRow> = r.chunks.iter().filter(|c| c.error.is_some()).collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(r.chunks.iter().filter_map(|c| c.tokens).sum::<i32>(), 20);

    // Pings are comment rows.
    let r = record(
        spec(&sim, body(20)),
        TokenCounting::TokenIds,
        Some("ping;seconds=0.0005"),
        STALL,
        None,
    )
    .await;
    assert!(r.chunks.iter().any(|c| c.kind == ChunkKind::Comment));
    sim.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_closes_the_stream_and_the_server_aborts() {
    let sim = sim().await;
    let r = record(
        spec(&sim, body(10_000)),
        TokenCounting::TokenIds,
        None,
        STALL,
        Some(Duration::from_millis(200)),
    )
    .await;
    assert_eq!(r.request.end_reason, EndReason::Cancelled);
    let streamed: i32 = r.chunks.iter().filter_map(|c| c.tokens).sum();
    assert!(streamed > 0 && streamed < 10_000);
    // The server saw the connection close and aborted the request.
    let client = reqwest::Client::new();
    let mut aborted = false;
    for _ in 0..100 {
        let text = client
            .get(format!("{}/metrics", sim.url()))
            .send()
            .await
            .expect("get")
            .text()
            .await
            .expect("text");
        if text.contains("finished_reason=\"abort\"} 1.0") {
            aborted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(aborted);
    sim.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_request_row_not_a_panic() {
    let spec = RequestSpec {
        request_id: 1,
        slot: None,
        role: Role::Probe,
        endpoint: Endpoint::Completions,
        url: "http://127.0.0.1:9/v1/completions".to_string(),
        body: "{}".into(),
        prompt_tokens_requested: 0,
        max_tokens: None,
    };
    let r = record(spec, TokenCounting::OnePerChunk, None, STALL, None).await;
    assert_eq!(r.request.end_reason, EndReason::Disconnect);
    assert!(
        r.request
            .error
            .as_deref()
            .is_some_and(|e| e.contains("request failed"))
    );
    assert!(r.chunks.is_empty());
}
