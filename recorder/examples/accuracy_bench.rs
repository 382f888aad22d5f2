//! Accuracy benchmark: how late does the recorder see what the simulator sent? Records one
//! decode cell per concurrency against the simulator (TTFT 50 ms, 10 ms steps, one token
//! per chunk, 100 tokens per request) with ground truth on, then compares the recorder's
//! arrival times with the simulator's socket write times (both CLOCK_MONOTONIC):
//! - TTFT error: first token's arrival − its write;
//! - inter-token error: |(arrival_i − arrival_i−1) − (write_i − write_i−1)| per event;
//! - and per event, arrival − write, and the recorder's own queueing delay.
//!
//! usage: accuracy_bench [WINDOW_SECONDS=5] [CONCURRENCY...=1 10 100 500 1000]
//! (run with `--release`; the figures go to BENCHMARKS.md)

#[path = "common/loopback.rs"]
mod loopback;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use tokentrace_recorder::store::cell::{self, CellPlan};
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{ChunkKind, Chunks, Requests};
use tokentrace_schemas::{CellKey, Phase};
use tokentrace_sim::truth::{TruthChunks, TruthRequests};
use tokentrace_sim::{Profile, SimOptions, SimServer, Tokenizer};

/// `streams` sequences at once, 10 ms steps, TTFT 50 ms.
fn profile(streams: u32) -> Result<Profile, String> {
    loopback::roomy_profile(streams, 10.0, 40.0)
}

async fn one(streams: u32, window: Duration) -> Result<String, String> {
    let base = std::env::temp_dir().join(format!(
        "tokentrace-accuracy-{}-{streams}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&base);
    let truth = base.join("truth");
    let run = base.join("run");
    std::fs::create_dir_all(&run).map_err(|e| e.to_string())?;
    let addr: SocketAddr = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
    let sim = SimServer::start_with(
        profile(streams)?,
        addr,
        SimOptions {
            truth_dir: Some(truth.clone()),
            replay: None,
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let clock = RunClock::start();
    let ctx = loopback::run_ctx(&sim.url(), clock)?;
    let prompt = Tokenizer::new().prompt_of(64, 1);
    let body = |n: u32| {
        json!({"prompt": prompt, "max_tokens": n, "stream": true, "ignore_eos": true, "return_token_ids": true,
               "stream_options": {"include_usage": true}})
        .to_string()
    };
    let key = CellKey::new(Phase::Decode, 64, streams);
    let plan = CellPlan {
        key,
        body: body(100).into(),
        scout_body: body(100).into(),
        prime_body: body(16).into(),
        solo_first_prime: false,
        prompt_tokens: 64,
        max_tokens: 100,
        window,
        first_request_id: 1,
        preamble: Vec::new(),
        replay: None,
        conversation: None,
        variants: None,
        requests: 0,
        rate: None,
    };
    cell::record_decode(&ctx, &plan, &run)
        .await
        .map_err(|e| e.to_string())?;
    let (stats, dropped) = sim.stop().ok_or("no ground truth")?;
    stats.map_err(|e| e.to_string())?;

    let truth_requests = read_table::<TruthRequests>(&truth.join("truth_requests.parquet"))
        .map_err(|e| e.to_string())?;
    let truth_chunks = read_table::<TruthChunks>(&truth.join("truth_chunks.parquet"))
        .map_err(|e| e.to_string())?;
    let sim_id: HashMap<&str, i64> = truth_requests
        .iter()
        .map(|r| (r.server_request_id.as_str(), r.request_id))
        .collect();
    let written: HashMap<(i64, i32), i64> = truth_chunks
        .iter()
        .map(|c| ((c.request_id, c.seq), c.written_ns))
        .collect();
    let dir = key.dir(&run);
    let requests =
        read_table::<Requests>(&dir.join("requests.parquet")).map_err(|e| e.to_string())?;
    let chunks = read_table::<Chunks>(&dir.join("chunks.parquet")).map_err(|e| e.to_string())?;
    let rec_to_sim: HashMap<i64, i64> = requests
        .iter()
        .filter_map(|r| Some((r.request_id, *sim_id.get(r.server_request_id.as_deref()?)?)))
        .collect();
    let zero = clock.monotonic_at_zero();
    let mut delay: Vec<i64> = Vec::new();
    let mut first: Vec<i64> = Vec::new();
    let mut gap_err: Vec<i64> = Vec::new();
    let mut queue: Vec<i64> = Vec::new();
    let mut by_request: HashMap<i64, Vec<(i32, i64, i64)>> = HashMap::new();
    for c in chunks.iter().filter(|c| c.kind == ChunkKind::Data) {
        let Some(sid) = rec_to_sim.get(&c.request_id) else {
            continue;
        };
        let Some(w) = written.get(&(*sid, c.seq)) else {
            continue;
        };
        let w = w - zero;
        delay.push(c.arrival_ns - w);
        by_request
            .entry(c.request_id)
            .or_default()
            .push((c.seq, c.arrival_ns, w));
        if let Some(q) = c.queue_delay_ns {
            queue.push(q);
        }
    }
    for events in by_request.values_mut() {
        events.sort_unstable();
        if let Some((_, a, w)) = events.first() {
            first.push(a - w);
        }
        for pair in events.windows(2) {
            let ((_, a0, w0), (_, a1, w1)) = (pair[0], pair[1]);
            gap_err.push(((a1 - a0) - (w1 - w0)).abs());
        }
    }
    for v in [&mut delay, &mut first, &mut gap_err, &mut queue] {
        v.sort_unstable();
    }
    let _ = std::fs::remove_dir_all(&base);
    let events_per_s = delay.len() as f64 / window.as_secs_f64();
    Ok(format!(
        "| {streams} | {} | {events_per_s:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {dropped} |",
        delay.len(),
        loopback::pct(&first, 0.5),
        loopback::pct(&first, 0.99),
        loopback::pct(&first, 1.0),
        loopback::pct(&gap_err, 0.5),
        loopback::pct(&gap_err, 0.99),
        loopback::pct(&gap_err, 1.0),
        loopback::pct(&delay, 0.5),
        loopback::pct(&delay, 0.99),
        loopback::pct(&queue, 0.99),
    ))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let window = args.first().map_or(Ok(5.0), |a| {
        a.parse::<f64>().map_err(|e| format!("`{a}`: {e}"))
    })?;
    let levels: Vec<u32> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|a| a.parse().map_err(|e| format!("`{a}`: {e}")))
            .collect::<Result<_, _>>()?
    } else {
        vec![1, 10, 100, 500, 1000]
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    println!(
        "window {window} s, TTFT 50 ms, 10 ms steps, one token per chunk, 100 tokens per request; times in ms"
    );
    println!(
        "| streams | events | events/s | TTFT error p50 | p99 | max | inter-token error p50 | p99 | max | arrival − write p50 | p99 | queue delay p99 | truth rows dropped |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in levels {
        println!("{}", rt.block_on(one(n, Duration::from_secs_f64(window)))?);
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accuracy_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
