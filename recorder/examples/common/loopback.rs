//! What the benchmark examples share: the run context of a recording against a
//! simulator on loopback (completions, token ids counted, metrics every second).

use std::time::Duration;

use tokentrace_recorder::cell::RunCtx;
use tokentrace_recorder::client::TokenCounting;
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
            tokentrace_recorder::http::Transport::new(&format!("{url}/v1/completions"), &[])
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
    })
}
