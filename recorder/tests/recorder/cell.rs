//! Whole cells recorded against the simulator and read back from their committed files.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tokentrace_recorder::schemas::manifest::TokenCounting;
use tokentrace_recorder::send::http::Transport;
use tokentrace_recorder::store::cell::{
    self, CLIENT_CPU_METRIC, CLIENT_LAG_METRIC, CellPlan, RunCtx,
};
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::protocol::Drain;
use tokentrace_schemas::protocol::{LATE_TICK_MS, LagStat};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{
    Chunks, EndReason, Endpoint, EventKind, Events, Metrics, Requests, Role,
};
use tokentrace_schemas::{CellKey, Phase};
use tokentrace_sim::{Profile, SimServer, Tokenizer};

async fn sim() -> SimServer {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim")
}

fn ctx(sim: &SimServer) -> RunCtx {
    RunCtx {
        client: reqwest::Client::new(),
        clock: RunClock::start(),
        transport: std::sync::Arc::new(
            Transport::new(&format!("{}/v1/completions", sim.url()), &[]).expect("transport"),
        ),
        endpoint: Endpoint::Completions,
        metrics_url: Some(format!("{}/metrics", sim.url())),
        scrape_interval: Duration::from_millis(100),
        stall_timeout: Duration::from_secs(30),
        warmup_timeout: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(30),
        counting: TokenCounting::TokenIds,
        tokens: Default::default(),
        writers: Default::default(),
        gpus: None,
        steer: Default::default(),
        feed: Default::default(),
    }
}

fn plan(key: CellKey, max_tokens: i32) -> CellPlan {
    let prompt = Tokenizer::new().prompt_of(key.context as usize, u64::from(key.context));
    let body = |n: i32| {
        json!({"prompt": prompt, "max_tokens": n, "stream": true, "ignore_eos": true, "return_token_ids": true,
               "stream_options": {"include_usage": true, "continuous_usage_stats": true}})
        .to_string()
        .into()
    };
    CellPlan {
        key,
        body: body(max_tokens),
        scout_body: body(16),
        prime_body: body(16),
        solo_first_prime: false,
        prompt_tokens: key.context as i32,
        max_tokens,
        window: Duration::from_millis(600),
        first_request_id: 1_000_000,
        preamble: Vec::new(),
        variants: None,
        requests: 0,
        rate: None,
        replay: None,
        conversation: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_cell_is_recorded_whole() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let key = CellKey::new(Phase::Decode, 300, 2);
    let done = cell::record_decode(&ctx(&sim), &plan(key, 100), dir.path())
        .await
        .expect("cell");
    assert!(done.meta.complete);
    let d = key.dir(dir.path());
    let requests = read_table::<Requests>(&d.join("requests.parquet")).expect("requests");
    // The progress line's counts are the table's.
    assert_eq!(done.tally.requests as usize, requests.len());
    assert_eq!((done.tally.refused, done.tally.failed), (0, 0));
    assert!(
        done.tally
            .requests_line()
            .ends_with("requests, none failed"),
        "{}",
        done.tally.requests_line()
    );
    let chunks = read_table::<Chunks>(&d.join("chunks.parquet")).expect("chunks");
    let events = read_table::<Events>(&d.join("events.parquet")).expect("events");
    let metrics = read_table::<Metrics>(&d.join("metrics.parquet")).expect("metrics");

    // Closed loop: 2 warm-up requests, then measured ones; the last are cancelled at close.
    assert_eq!(
        requests.iter().filter(|r| r.role == Role::Warmup).count(),
        2
    );
    assert!(
        requests.iter().any(|r| r.role == Role::Measured),
        "finished streams restart"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.end_reason == EndReason::FinishedLength)
    );
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.end_reason == EndReason::Cancelled)
            .count(),
        2
    );
    for r in &requests {
        let streamed: i32 = chunks
            .iter()
            .filter(|c| c.request_id == r.request_id)
            .filter_map(|c| c.tokens)
            .sum();
        if r.end_reason == EndReason::FinishedLength {
            assert_eq!(Some(streamed), r.completion_tokens_server);
            // Priming requests ask for 16 tokens; the streams for 100.
            let want = if r.role == Role::Prime { 16 } else { 100 };
            assert_eq!(streamed, want);
        }
        assert!(r.request_id >= 1_000_000);
    }
    let kinds: Vec<EventKind> = events
        .iter()
        .map(|e| e.kind)
        .filter(|k| *k != EventKind::Fault && *k != EventKind::Note)
        .collect();
    // One note per priming round: the first may be cold (no scout ran before it).
    let primes = events
        .iter()
        .filter(|e| {
            e.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("prime: round"))
        })
        .count();
    assert!((1..=3).contains(&primes), "{primes} priming rounds");
    assert_eq!(
        kinds,
        vec![
            EventKind::CellStart,
            EventKind::WarmupStart,
            EventKind::WarmupEnd,
            EventKind::WindowOpen,
            EventKind::WindowClose,
            EventKind::DrainStart,
            EventKind::DrainEnd,
            EventKind::CellEnd,
        ]
    );
    let drain = events
        .iter()
        .find(|e| e.kind == EventKind::DrainEnd)
        .and_then(|e| e.detail.clone());
    assert_eq!(
        drain.as_deref().and_then(Drain::from_detail),
        Some(Drain::Drained)
    );
    assert!(
        metrics
            .iter()
            .any(|m| m.name == "vllm:num_requests_running" && m.value == 2.0)
    );
    assert!(metrics.iter().any(|m| m.name == CLIENT_LAG_METRIC));
    // Each lag summary carries its tick count and the late ticks over every threshold,
    // never more late ticks than ticks, fewer over a higher threshold.
    let lag = |stat: LagStat| -> Vec<f64> {
        metrics
            .iter()
            .filter(|m| m.name == CLIENT_LAG_METRIC && m.labels == stat.labels())
            .map(|m| m.value)
            .collect()
    };
    let ticks = lag(LagStat::Ticks);
    assert!(
        !ticks.is_empty() && ticks.iter().sum::<f64>() > 10.0,
        "{ticks:?}"
    );
    let over: Vec<Vec<f64>> = (0..LATE_TICK_MS.len())
        .map(|i| lag(LagStat::Over(i)))
        .collect();
    for (i, o) in over.iter().enumerate() {
        assert_eq!(o.len(), ticks.len(), "over_{}ms", LATE_TICK_MS[i]);
        for (k, v) in o.iter().enumerate() {
            assert!(
                *v <= ticks[k],
                "over_{}ms {v} > ticks {}",
                LATE_TICK_MS[i],
                ticks[k]
            );
            if i > 0 {
                assert!(*v <= over[i - 1][k], "over_{}ms", LATE_TICK_MS[i]);
            }
        }
    }
    // The recorder's own CPU time, a counter that never goes back.
    let cpu: Vec<f64> = metrics
        .iter()
        .filter(|m| m.name == CLIENT_CPU_METRIC)
        .map(|m| m.value)
        .collect();
    assert!(!cpu.is_empty() && cpu[0] > 0.0, "{cpu:?}");
    assert!(cpu.windows(2).all(|w| w[0] <= w[1]), "{cpu:?}");
    sim.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_cell_is_one_scout() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let key = CellKey::new(Phase::Prefill, 1000, 1);
    cell::record_prefill(&ctx(&sim), &plan(key, 100), dir.path())
        .await
        .expect("cell");
    let requests =
        read_table::<Requests>(&key.dir(dir.path()).join("requests.parquet")).expect("requests");
    assert_eq!(requests.len(), 1);
    let scout = &requests[0];
    assert_eq!(
        (scout.role, scout.end_reason),
        (Role::Scout, EndReason::FinishedLength)
    );
    assert_eq!(scout.prompt_tokens_server, Some(1000));
    assert_eq!(scout.cached_tokens_server, Some(0), "the scout is cold");
    assert!(scout.first_token_ns > scout.sent_ns);
    sim.stop();
}
