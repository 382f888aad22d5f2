//! What the benchmark examples share: the simulator's profile with room to spare, the run
//! context of a recording against it on loopback (completions, token ids counted, metrics
//! every second), and a percentile of nanoseconds in ms.

use std::time::Duration;

use tokentrace_recorder::schemas::manifest::TokenCounting;
use tokentrace_recorder::store::cell::RunCtx;
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::tables::Endpoint;

/// The context of cells recorded from the server at `url` on `clock`.
pub fn run_ctx(url: &str, clock: RunClock) -> Result<RunCtx, String> {
    Ok(RunCtx {
        client: reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| e.to_string())?,
        clock,
        transport: std::sync::Arc::new(
            tokentrace_recorder::send::http::Transport::new(&format!("{url}/v1/completions"), &[])
                .map_err(|e| e.to_string())?,
        ),
        endpoint: Endpoint::Completions,
        metrics_url: Some(format!("{url}/metrics")),
        scrape_interval: Duration::from_secs(1),
        stall_timeout: Duration::from_secs(60),
        warmup_timeout: Duration::from_secs(120),
        drain_timeout: Duration::from_secs(60),
        counting: TokenCounting::TokenIds,
        tokens: Default::default(),
        writers: Default::default(),
        gpus: None,
        steer: Default::default(),
        feed: Default::default(),
    })
}

/// The tiny profile with `seqs` sequences at once, KV cache and batch room for all,
/// `step_ms` per decode step and `prefill_ms` per prefill step (prompt processing
/// itself instant).
pub fn roomy_profile(
    seqs: u32,
    step_ms: f64,
    prefill_ms: f64,
) -> Result<tokentrace_sim::Profile, String> {
    use tokentrace_sim::profile::Curve;
    let mut p = tokentrace_sim::Profile::load("tiny").map_err(|e| e.to_string())?;
    p.max_num_seqs = seqs;
    p.kv_cache_tokens = 1 << 40;
    p.max_num_batched_tokens = 1 << 24;
    p.max_model_len = 1 << 20;
    p.step_ms = Curve::try_from(vec![[1.0, step_ms]])?;
    p.prefill_tokens_per_s = Curve::try_from(vec![[1.0, 1e9]])?;
    p.prefill_overhead_ms = prefill_ms;
    Ok(p)
}

/// The `q` quantile (nearest rank) of sorted nanoseconds, in ms; NaN when empty.
pub fn pct(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e6
}
