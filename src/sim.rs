//! `tokentrace sim`: serves the simulated engine over HTTP until Ctrl-C, so any client
//! (tokentrace's recorder, curl, another benchmark tool) can be pointed at it; with
//! `--replay RUN`, serves a recorded run back instead.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokentrace_sim::replay::Recording;
use tokentrace_sim::{Profile, SimOptions, SimServer};

/// Arguments of `tokentrace sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Engine profile: a built-in name (reference-h200x4, tiny, vllm-cpu-smollm2) or a TOML file.
    #[arg(long, default_value = "reference-h200x4")]
    pub profile: String,
    /// Address to listen on; port 0 picks a free port. Loopback unless you say otherwise.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Write the ground truth (every event sent, with its schedule and write time on
    /// CLOCK_MONOTONIC) to this folder as Parquet; finished on Ctrl-C.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub ground_truth: Option<std::path::PathBuf>,
    /// Serve a recorded run back: each generation request is answered by the recorded
    /// request it matches (by order within its prompt length and max_tokens) with the
    /// captured bytes at their captured gaps, and /metrics replays the recorded scrapes.
    /// Requests of a prompt length the run never sent go to the engine profile.
    #[arg(long, value_name = "RUN")]
    pub replay: Option<std::path::PathBuf>,
}

/// Starts the simulator; the first line on stdout is `listening on http://ADDR`.
pub fn run(args: &SimArgs) -> anyhow::Result<()> {
    let mut profile = Profile::load(&args.profile).context("cannot load the simulator profile")?;
    let replay = match &args.replay {
        Some(run) => {
            let rec = Recording::load(run)
                .with_context(|| format!("cannot serve {} back", run.display()))?;
            // The engine answers what the recording cannot, under the recording's name
            // and limit, so a client sees one server.
            profile.model = rec.model.clone();
            if let Some(n) = rec.max_model_len {
                profile.max_model_len = n;
                profile.listed_max_model_len = None;
            }
            eprintln!(
                "replaying {}: {} recorded requests in {} cells, {} prompt lengths; other requests go to the {} profile",
                run.display(),
                rec.requests,
                rec.cells(),
                rec.prompt_lengths(),
                args.profile
            );
            Some(Arc::new(rec))
        }
        None => None,
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async {
        let options = SimOptions {
            truth_dir: args.ground_truth.clone(),
            replay: replay.clone(),
        };
        let sim = SimServer::start_with(profile, args.listen, options)
            .await
            .with_context(|| format!("cannot start the simulator on {}", args.listen))?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening on {}", sim.url())?;
            out.flush()?;
        }
        tokio::signal::ctrl_c()
            .await
            .context("cannot wait for Ctrl-C")?;
        if let Some(rec) = &replay {
            let s = rec.stats();
            eprintln!(
                "replay: {} requests answered from the recording, {} reused a recorded request, {} went to the engine",
                s.matched, s.reused, s.unmatched
            );
        }
        if let Some((stats, dropped)) = sim.stop() {
            let stats = stats.context("cannot finish the ground-truth files")?;
            eprintln!(
                "ground truth: {} events, {} requests ({dropped} rows dropped)",
                stats.chunks, stats.requests
            );
        }
        Ok(())
    })
}
