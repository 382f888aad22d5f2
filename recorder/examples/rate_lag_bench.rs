//! Rate-schedule benchmark: how closely does a rate cell follow its arrival schedule?
//! Records one rate cell per rate against the simulator (fast steps, room for every
//! request at once, so the server never holds the client back) with ground truth on,
//! then compares, request by request, the schedule with
//! - the recorder's send time (`sent_ns − scheduled_ns`: the lag the analyzer reports),
//! - the simulator's read of the request (`read_ns − scheduled_ns`: the lag the server
//!   saw, the truth), and the difference between the two;
//! - and the span of the arrivals as the server saw them against the schedule's span.
//!
//! usage: rate_lag_bench [REQUESTS=2000] [RATES...=10 100 1000] [ARRIVAL=poisson]
//! (run with `--release`; the figures go to BENCHMARKS.md)

#[path = "common/loopback.rs"]
mod loopback;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use tokentrace_recorder::send::prompt::Variants;
use tokentrace_recorder::store::cell::{self, CellPlan};
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::manifest::RateConfig;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::schedule::Arrival;
use tokentrace_schemas::tables::{Endpoint, Requests, Role};
use tokentrace_schemas::{CellKey, Rate};
use tokentrace_sim::truth::TruthRequests;
use tokentrace_sim::{Profile, SimOptions, SimServer, Tokenizer};

/// Room for every request at once: 5 ms steps, prefill in 1 ms.
fn profile() -> Result<Profile, String> {
    loopback::roomy_profile(100_000, 5.0, 1.0)
}

async fn one(rate: Rate, requests: u32, arrival: Arrival) -> Result<String, String> {
    let base =
        std::env::temp_dir().join(format!("tokentrace-rate-lag-{}-{rate}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let truth = base.join("truth");
    let run = base.join("run");
    std::fs::create_dir_all(&run).map_err(|e| e.to_string())?;
    let addr: SocketAddr = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
    let sim = SimServer::start_with(
        profile()?,
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
    let prompt = Tokenizer::new().prompt_of(256, 1);
    let json = |n: u32| {
        json!({"prompt": prompt, "max_tokens": n, "stream": true, "ignore_eos": true, "return_token_ids": true,
               "stream_options": {"include_usage": true}})
    };
    let body = |n: u32| json(n).to_string();
    // Each measured request its own prompt, as a recorded rate cell sends them.
    let variants = Variants::new(&json(16), Endpoint::Completions).map(std::sync::Arc::new);
    let key = CellKey::rate(256, rate);
    let plan = CellPlan {
        key,
        body: body(16).into(),
        scout_body: body(16).into(),
        prime_body: body(16).into(),
        solo_first_prime: false,
        prompt_tokens: 256,
        max_tokens: 16,
        window: Duration::ZERO,
        first_request_id: 1,
        preamble: Vec::new(),
        replay: None,
        conversation: None,
        variants,
        requests: 0,
        rate: Some(RateConfig {
            rates: vec![rate],
            arrival,
            seed: 1,
            requests: Some(requests),
            duration_ns: None,
            max_concurrency: None,
        }),
    };
    cell::record_rate(&ctx, &plan, &run)
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
    let requests = read_table::<Requests>(&key.dir(&run).join("requests.parquet"))
        .map_err(|e| e.to_string())?;
    let (mut sent, mut seen, mut diff, mut arrivals, mut due) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
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
        arrivals.push(*at);
        due.push(r.scheduled_ns);
    }
    for v in [&mut sent, &mut seen, &mut diff] {
        v.sort_unstable();
    }
    let span =
        |v: &[i64]| v.iter().max().zip(v.iter().min()).map_or(0, |(a, b)| a - b) as f64 / 1e6;
    let (seen_span, due_span) = (span(&arrivals), span(&due));
    let gap_ms = 1e3 / rate.per_second();
    let _ = std::fs::remove_dir_all(&base);
    Ok(format!(
        "| {rate} | {} | {:.3} / {:.3} / {:.3} | {:.3} / {:.3} / {:.3} | {:.3} / {:.3} | {:.3}% | {:.1} vs {:.1} ({:.4}%) | {dropped} |",
        sent.len(),
        loopback::pct(&sent, 0.5),
        loopback::pct(&sent, 0.99),
        loopback::pct(&sent, 1.0),
        loopback::pct(&seen, 0.5),
        loopback::pct(&seen, 0.99),
        loopback::pct(&seen, 1.0),
        loopback::pct(&diff, 0.5),
        loopback::pct(&diff, 0.99),
        100.0 * loopback::pct(&diff, 0.5) / gap_ms,
        seen_span,
        due_span,
        100.0 * (seen_span - due_span).abs() / due_span.max(1e-9),
    ))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let requests = args.first().map_or(Ok(2000), |a| {
        a.parse::<u32>().map_err(|e| format!("`{a}`: {e}"))
    })?;
    let mut arrival = Arrival::Poisson;
    let mut rates = Vec::new();
    for a in args.iter().skip(1) {
        match a.as_str() {
            "poisson" => arrival = Arrival::Poisson,
            "constant" => arrival = Arrival::Constant,
            r => rates.push(Rate::parse(r).ok_or(format!("`{r}` is not a rate"))?),
        }
    }
    if rates.is_empty() {
        rates = ["10", "100", "1000"]
            .iter()
            .filter_map(|r| Rate::parse(r))
            .collect();
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    println!(
        "## {} vCPU; {requests} requests per rate, {} arrivals, 256-token prompts, 16 output tokens",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        match arrival {
            Arrival::Poisson => "poisson",
            Arrival::Constant => "constant",
        }
    );
    println!(
        "| rate req/s | requests | recorder lag (sent − scheduled) ms p50 / p99 / max | server-seen lag (read − scheduled) ms p50 / p99 / max | |sent − read| ms p50 / p99 | p50 of that / mean gap | arrival span at the server vs scheduled, ms | truth rows dropped |"
    );
    println!("|---:|---:|---|---|---|---:|---|---:|");
    for rate in rates {
        println!("{}", rt.block_on(one(rate, requests, arrival))?);
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rate_lag_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
