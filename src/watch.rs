//! `tokentrace watch RUN_OR_URL`: the recorder's live view, read-only, for a run being
//! recorded elsewhere (a folder, or the `s3://` prefix its recorder uploads to).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tokentrace_recorder::store::bucket::{RunStore, is_url};
use tokentrace_recorder::view::{self, DisplayMode, watch};

/// Follow a run as it records: the prefill table, the decode matrix and the open-loop
/// cells filling in as cells commit, each scored live; the plan and ETA from its manifest.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The run: a folder the recorder writes, or the object-store URL it uploads to
    /// (`s3://bucket/prefix`, `file:///path`; credentials from the AWS_* environment).
    pub run: PathBuf,
    /// `screen` (full screen; q quits) or `plain` (a line per cell) [default: screen on a
    /// terminal, plain off one].
    #[arg(long, value_enum)]
    pub display: Option<DisplayMode>,
    /// How often to look for newly committed cells.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub every: Duration,
}

/// Watches until the run is complete (exit 0) or the user quits (exit 0 too: the
/// recording goes on).
pub fn run(args: &WatchArgs) -> anyhow::Result<ExitCode> {
    let (mode, note) = view::choose(args.display);
    if let Some(n) = note {
        eprintln!("{n}");
    }
    let shown = args.run.display().to_string();
    let mut copy = None;
    let source = if is_url(&shown) {
        let store = RunStore::open(&shown).with_context(|| format!("{shown}: cannot open"))?;
        let dir = tempfile::tempdir().context("a temporary folder for the run's copy")?;
        let local = dir.path().to_path_buf();
        copy = Some(dir);
        watch::Source::Store(store, local)
    } else {
        watch::Source::Folder(args.run.clone())
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let ended = rt
        .block_on(watch::watch(source, mode, args.every))
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    drop(copy);
    eprintln!(
        "{shown}: {}",
        match ended {
            watch::Ended::Complete => "the run is complete",
            watch::Ended::Quit => "stopped watching",
        }
    );
    Ok(ExitCode::SUCCESS)
}
