//! `tokentrace sim`: serves the simulated engine over HTTP until Ctrl-C, so any client
//! (tokentrace's recorder, curl, another benchmark tool) can be pointed at it.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use tokentrace_sim::{Profile, SimOptions, SimServer};

/// Arguments of `tokentrace sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Engine profile: a built-in name (reference-h200x4, tiny) or a TOML file.
    #[arg(long, default_value = "reference-h200x4")]
    pub profile: String,
    /// Address to listen on; port 0 picks a free port. Loopback unless you say otherwise.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// Write the ground truth (every event sent, with its schedule and write time on
    /// CLOCK_MONOTONIC) to this folder as Parquet; finished on Ctrl-C.
    #[arg(long, value_name = "DIR")]
    pub ground_truth: Option<std::path::PathBuf>,
}

/// Starts the simulator; the first line on stdout is `listening on http://ADDR`.
pub fn run(args: &SimArgs) -> anyhow::Result<()> {
    let profile = Profile::load(&args.profile).context("cannot load the simulator profile")?;
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async {
        let options = SimOptions {
            truth_dir: args.ground_truth.clone(),
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
