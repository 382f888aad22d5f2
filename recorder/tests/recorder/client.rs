//! One recorded request against the simulator over loopback: token counts, lifecycle
//! times, raw bytes, and the end reason of every fault.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use std::sync::Arc;

use tokentrace_recorder::schemas::manifest::TokenCounting;
use tokentrace_recorder::send::client::{self, Lane};
use tokentrace_recorder::send::http::Transport;
use tokentrace_recorder::send::request::RequestSpec;
use tokentrace_recorder::store::queue::Record;
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::tables::{ChunkKind, ChunkRow, EndReason, Endpoint, RequestRow, Role};
use tokentrace_sim::keepalive::{CloseStyle, KeepAlive};
use tokentrace_sim::{Profile, SimServer};
use tokio::sync::watch;

struct Recorded {
    chunks: Vec<ChunkRow>,
    raw: Vec<u8>,
    request: RequestRow,
    /// Notes the request left (retries).
    notes: Vec<String>,
}

async fn sim() -> SimServer {
    sim_with(KeepAlive::default()).await
}

async fn sim_with(keepalive: KeepAlive) -> SimServer {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let mut profile = Profile::load("tiny").expect("tiny");
    profile.keepalive = keepalive;
    SimServer::start(profile, addr).await.expect("sim")
}

fn spec(body: serde_json::Value) -> RequestSpec {
    RequestSpec {
        request_id: 7,
        slot: Some(0),
        role: Role::Measured,
        endpoint: Endpoint::Completions,
        body: body.to_string().into(),
        prompt_tokens_requested: 3,
        max_tokens: body["max_tokens"].as_i64().map(|v| v as i32),
        scheduled_ns: None,
    }
}

fn lane(url: &str, fault: Option<&str>) -> Lane {
    let headers: Vec<(String, String)> = fault
        .map(|f| ("x-sim-fault".to_string(), f.to_string()))
        .into_iter()
        .collect();
    Lane::new(Arc::new(Transport::new(url, &headers).expect("transport")))
}

fn completions(sim: &SimServer) -> String {
    format!("{}/v1/completions", sim.url())
}

async fn record(
    url: &str,
    spec: RequestSpec,
    counting: TokenCounting,
    fault: Option<&str>,
    stall: Duration,
    cancel_after: Option<Duration>,
) -> Recorded {
    record_on(&mut lane(url, fault), spec, counting, stall, cancel_after).await
}

async fn record_on(
    lane: &mut Lane,
    spec: RequestSpec,
    counting: TokenCounting,
    stall: Duration,
    cancel_after: Option<Duration>,
) -> Recorded {
    let clock = RunClock::start();
    let (tx, mut rx) = tokentrace_recorder::store::queue::queue(64, 1 << 20);
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
        counting: counting.into(),
        stall_timeout: stall,
        cancel: cancel_rx,
        first_token: None,
        keep_text: false,
    };
    let collect = async {
        let mut chunks = Vec::new();
        let mut raw = Vec::new();
        let mut notes = Vec::new();
        let mut request = None;
        while let Some(r) = rx.recv().await {
            match r {
                Record::Read {
                    bytes, chunks: c, ..
                } => {
                    raw.extend_from_slice(&bytes);
                    chunks.extend(c);
                }
                Record::Request(q) => request = Some(*q),
                Record::Event(e) => notes.extend(e.detail),
                Record::Metrics(_)
                | Record::Gpu(_)
                | Record::Replay(_)
                | Record::Turn(_)
                | Record::Commit => {
                    panic!(
                        "a request sends no metrics, GPU samples, replay or turn rows, or commits"
                    )
                }
            }
        }
        Recorded {
            chunks,
            raw,
            request: request.expect("a request row, always"),
            notes,
        }
    };
    let (recorded, ()) = tokio::join!(collect, async move {
        client::run(lane, &spec, ctl, &clock, &tx).await;
    });
    recorded
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
        let r = record(
            &completions(&sim),
            spec(body(40)),
            counting,
            None,
            STALL,
            None,
        )
        .await;
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
            &completions(&sim),
            spec(body(20)),
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
        &completions(&sim),
        spec(body(20)),
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
        &completions(&sim),
        spec(body(20)),
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
        &completions(&sim),
        spec(body(20)),
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
        &completions(&sim),
        spec(body(10_000)),
        TokenCounting::TokenIds,
        None,
        STALL,
        Some(Duration::from_millis(200)),
    )
    .await;
    assert_eq!(r.request.end_reason, EndReason::Cancelled);
    let streamed: i32 = r.chunks.iter().filter_map(|c| c.tokens).sum();
    assert!(streamed > 0 && streamed < 10_000);
    // The server saw the connection close and dropped the request: nothing runs (as in
    // vLLM 0.32, the request is not counted as finished for reason `abort`).
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
        let idle = text.lines().any(|l| {
            l.starts_with("vllm:num_requests_running")
                && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) == Some(0.0)
        });
        if idle {
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
        body: "{}".into(),
        prompt_tokens_requested: 0,
        max_tokens: None,
        scheduled_ns: None,
    };
    let r = record(
        "http://127.0.0.1:9/v1/completions",
        spec,
        TokenCounting::OnePerChunk,
        None,
        STALL,
        None,
    )
    .await;
    assert_eq!(r.request.end_reason, EndReason::Disconnect);
    assert!(
        r.request
            .error
            .as_deref()
            .is_some_and(|e| e.contains("request failed"))
    );
    assert!(r.chunks.is_empty());
}

/// `n` finished requests on one lane against a simulator with `keepalive`: their rows
/// and the notes they left.
async fn in_a_row(keepalive: KeepAlive, n: usize) -> (Vec<RequestRow>, Vec<String>) {
    let sim = sim_with(keepalive).await;
    let mut lane = lane(&completions(&sim), None);
    let (mut rows, mut notes) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let r = record_on(
            &mut lane,
            spec(body(5)),
            TokenCounting::TokenIds,
            STALL,
            None,
        )
        .await;
        assert_eq!(
            r.request.end_reason,
            EndReason::FinishedLength,
            "{:?}",
            r.request
        );
        notes.extend(r.notes);
        rows.push(r.request);
    }
    sim.stop();
    (rows, notes)
}

/// Requests of one lane share a connection while the server keeps it open; connecting
/// is recorded on its own and lies before the send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_keeps_its_connection_alive() {
    let (rows, notes) = in_a_row(KeepAlive::default(), 4).await;
    assert!(notes.is_empty());
    let first = &rows[0];
    let (start, conn, sent) = (
        first.connect_start_ns.expect("a new connection"),
        first.connection_ns.expect("connected"),
        first.sent_ns.expect("sent"),
    );
    assert!(first.scheduled_ns <= start && start <= conn && conn <= sent);
    for r in &rows[1..] {
        assert_eq!(r.connection_id, first.connection_id, "reused: {r:?}");
        assert_eq!(r.connect_start_ns, None);
        assert!(r.connection_ns.is_some_and(|c| c <= r.sent_ns.unwrap_or(0)));
        assert_eq!(r.retries, Some(0));
    }
}

/// A server that closes after its limit and says so: the lane opens a new connection
/// for the next request, no retry needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polite_keepalive_limit_means_a_new_connection() {
    let limit = KeepAlive {
        max_requests: 2,
        close: CloseStyle::Polite,
    };
    let (rows, notes) = in_a_row(limit, 5).await;
    assert!(notes.is_empty());
    assert!(rows.iter().all(|r| r.retries == Some(0)));
    let ids: Vec<i64> = rows.iter().filter_map(|r| r.connection_id).collect();
    assert_eq!(
        ids,
        vec![ids[0], ids[0], ids[0] + 1, ids[0] + 1, ids[0] + 2]
    );
}

/// A server whose close races the next request (the request is written, then dropped
/// unread): it is sent again once on a new connection, and the retry is recorded, not a
/// false disconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_under_a_request_is_retried_once_and_recorded() {
    let limit = KeepAlive {
        max_requests: 2,
        close: CloseStyle::Race,
    };
    let (rows, notes) = in_a_row(limit, 5).await;
    let retries: Vec<i32> = rows.iter().map(|r| r.retries.unwrap_or(-1)).collect();
    assert_eq!(retries, vec![0, 0, 1, 0, 1]);
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].starts_with("retry: request 7 found kept-alive connection"),
        "{notes:?}"
    );
    // The retried request connected anew, and its send followed the new connection.
    let r = &rows[2];
    assert_ne!(r.connection_id, rows[1].connection_id);
    assert!(r.connect_start_ns.is_some());
    assert!(r.connection_ns.unwrap_or(i64::MAX) <= r.sent_ns.unwrap_or(0));
}

/// A server that closes every connection right after a streamed response without a word
/// (llama.cpp): each request gets a new connection, found closed before use or retried,
/// and none of them ends as a disconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_closing_after_every_stream_costs_reconnects_not_requests() {
    let limit = KeepAlive {
        max_requests: 1,
        close: CloseStyle::Abrupt,
    };
    let (rows, notes) = in_a_row(limit, 6).await;
    for w in rows.windows(2) {
        assert_ne!(w[0].connection_id, w[1].connection_id);
        assert!(w[1].connect_start_ns.is_some());
    }
    let retried: i32 = rows.iter().filter_map(|r| r.retries).sum();
    assert_eq!(retried as usize, notes.len(), "each retry has its note");
}
