//! Replay-schedule benchmark: how closely does a replay cell follow its trace? Writes a
//! Mooncake trace of Poisson arrivals at each rate (256-token prompts of 8 blocks of 32
//! tokens, the first block shared by every request, 16 output tokens), replays it
//! against the simulator (fast steps, room for every request at once, so the server
//! never holds the client back) with ground truth on, then compares, request by
//! request, the trace's offset with
//! - the recorder's send time (`sent_ns − scheduled_ns`: the lag the analyzer reports),
//! - the simulator's read of the request (`read_ns − scheduled_ns`: the lag the server
//!   saw, the truth), and the difference between the two;
//! - and the server's cached tokens against the trace's sharing.
//!
//! usage: replay_lag_bench [REQUESTS=2000] [RATES...=100 1000 5000]
//! (run with `--release`; the figures go to BENCHMARKS.md)

#[path = "common/loopback.rs"]
mod loopback;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokentrace_recorder::send::replay::{self, Prompts, ReplayOptions};
use tokentrace_recorder::store::cell::{self, CellPlan, ReplayPlan};
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::schedule::{Arrival, Schedule};
use tokentrace_schemas::tables::{Replay, Requests, Role};
use tokentrace_schemas::{CellKey, Rate};
use tokentrace_sim::truth::TruthRequests;
use tokentrace_sim::{SimOptions, SimServer, Tokenizer};

/// Blocks of a prompt, and tokens per block.
const BLOCKS: u64 = 8;
const BLOCK_TOKENS: u32 = 32;

/// A Mooncake trace of `requests` Poisson arrivals at `rate`.
fn trace(rate: Rate, requests: u32) -> String {
    Schedule::new(rate, Arrival::Poisson, 1, Some(u64::from(requests)), None)
        .enumerate()
        .map(|(i, at)| {
            let ids: Vec<String> = std::iter::once(0)
                .chain((1..BLOCKS).map(|k| 1_000 + i as u64 * BLOCKS + k))
                .map(|h| h.to_string())
                .collect();
            format!(
                "{{\"timestamp\": {:.6}, \"input_length\": {}, \"output_length\": 16, \"hash_ids\": [{}]}}\n",
                at as f64 / 1e6,
                BLOCKS * u64::from(BLOCK_TOKENS),
                ids.join(", ")
            )
        })
        .collect()
}

async fn one(rate: Rate, requests: u32) -> Result<String, String> {
    let base = std::env::temp_dir().join(format!(
        "tokentrace-replay-lag-{}-{rate}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&base);
    let (truth, run) = (base.join("truth"), base.join("run"));
    std::fs::create_dir_all(&run).map_err(|e| e.to_string())?;
    let file = base.join("trace.jsonl");
    std::fs::write(&file, trace(rate, requests)).map_err(|e| e.to_string())?;
    let opts = ReplayOptions {
        from: file,
        format: None,
        time_scale: 1.0,
        window: (None, None),
        max_requests: None,
        max_concurrency: None,
        block_tokens: BLOCK_TOKENS,
    };
    let workload = replay::load(&opts, &mut |_| {}).map_err(|e| e.to_string())?;
    let items = workload
        .cells
        .first()
        .map(|c| c.items.clone())
        .ok_or("no cell")?;
    let addr: SocketAddr = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
    let profile = loopback::roomy_profile(100_000, 5.0, 1.0)?;
    let model = profile.model.clone();
    let sim = SimServer::start_with(
        profile,
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
    let prompts = Arc::new(Prompts::new(
        Tokenizer::new().prompt_of(1024, 1),
        "bench",
        BLOCK_TOKENS,
    ));
    let plan_replay = Arc::new(ReplayPlan {
        items,
        prompts,
        model,
        max_concurrency: None,
    });
    let prime = plan_replay.body(&replay::Item {
        source_row: 0,
        trace_ns: 0,
        offset_ns: 0,
        input_tokens: 64,
        output_tokens: 16,
        blocks: vec![u64::MAX],
        expected_cached: 0,
        skipped: None,
    });
    let key = CellKey::replay(0, 1);
    let plan = CellPlan {
        key,
        body: prime.clone(),
        scout_body: prime.clone(),
        prime_body: prime,
        solo_first_prime: false,
        prompt_tokens: 64,
        max_tokens: 16,
        window: Duration::ZERO,
        first_request_id: 1,
        preamble: Vec::new(),
        replay: Some(plan_replay),
        conversation: None,
        variants: None,
        requests: 0,
        rate: None,
    };
    cell::record_replay(&ctx, &plan, &run)
        .await
        .map_err(|e| e.to_string())?;
    let (stats, dropped) = sim.stop().ok_or("no ground truth")?;
    stats.map_err(|e| e.to_string())?;

    let truth_requests = read_table::<TruthRequests>(&truth.join("truth_requests.parquet"))
        .map_err(|e| e.to_string())?;
    let zero = clock.monotonic_at_zero();
    let read: HashMap<&str, i64> = truth_requests
        .iter()
        .map(|r| {
            (
                r.server_request_id.as_str(),
                r.read_ns.unwrap_or(r.arrived_ns) - zero,
            )
        })
        .collect();
    let dir = key.dir(&run);
    let requests =
        read_table::<Requests>(&dir.join("requests.parquet")).map_err(|e| e.to_string())?;
    let rows = read_table::<Replay>(&dir.join("replay.parquet")).map_err(|e| e.to_string())?;
    let expected: HashMap<i64, i32> = rows
        .iter()
        .map(|r| (r.request_id, r.expected_cached_tokens))
        .collect();
    let (mut sent, mut seen, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cached, mut want, mut off) = (0i64, 0i64, 0usize);
    for r in requests.iter().filter(|r| r.role == Role::Measured) {
        let (Some(s), Some(at)) = (
            r.sent_ns,
            r.server_request_id.as_deref().and_then(|id| read.get(id)),
        ) else {
            continue;
        };
        sent.push(s - r.scheduled_ns);
        seen.push(at - r.scheduled_ns);
        diff.push((s - at).abs());
        let (c, e) = (
            i64::from(r.cached_tokens_server.unwrap_or(0)),
            i64::from(expected.get(&r.request_id).copied().unwrap_or(0)),
        );
        cached += c;
        want += e;
        off += usize::from((c - e).abs() > i64::from(BLOCK_TOKENS));
    }
    for v in [&mut sent, &mut seen, &mut diff] {
        v.sort_unstable();
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(format!(
        "| {rate} | {} | {:.3} / {:.3} / {:.3} | {:.3} / {:.3} / {:.3} | {:.3} / {:.3} | {cached} / {want} ({off} off by more than a block) | {dropped} |",
        sent.len(),
        loopback::pct(&sent, 0.5),
        loopback::pct(&sent, 0.99),
        loopback::pct(&sent, 1.0),
        loopback::pct(&seen, 0.5),
        loopback::pct(&seen, 0.99),
        loopback::pct(&seen, 1.0),
        loopback::pct(&diff, 0.5),
        loopback::pct(&diff, 0.99),
    ))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let requests = args.first().map_or(Ok(2000), |a| {
        a.parse::<u32>().map_err(|e| format!("`{a}`: {e}"))
    })?;
    let mut rates: Vec<Rate> = args
        .iter()
        .skip(1)
        .map(|r| Rate::parse(r).ok_or(format!("`{r}` is not a rate")))
        .collect::<Result<_, _>>()?;
    if rates.is_empty() {
        rates = ["100", "1000", "5000"]
            .iter()
            .filter_map(|r| Rate::parse(r))
            .collect();
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    println!(
        "## {} vCPU; {requests} requests per rate replayed from a Mooncake trace (Poisson arrivals), 256-token prompts in 8 blocks of 32 (the first shared), 16 output tokens",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    println!(
        "| rate req/s | requests | recorder lag (sent − scheduled) ms p50 / p99 / max | server-seen lag (read − scheduled) ms p50 / p99 / max | |sent − read| ms p50 / p99 | cached / expected tokens | truth rows dropped |"
    );
    println!("|---:|---:|---|---|---|---|---:|");
    for rate in rates {
        println!("{}", rt.block_on(one(rate, requests))?);
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay_lag_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
