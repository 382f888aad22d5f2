//! The `tokentrace` command line: subcommands over run folders. Everything here is
//! library code so tests call [`run`] in-process with `Cli::parse_from`.

pub mod analyze;
pub mod catalog;
pub mod check;
pub mod import;
pub mod remote;
pub mod reparse;
pub mod sim;
pub mod site;
pub mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// tokentrace: record LLM-serving speed-test matrices to Parquet, analyze them offline.
#[derive(Debug, Parser)]
#[command(name = "tokentrace", version = tokentrace_schemas::build::CLI_VERSION, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Verify a run folder: manifest, every cell's commit mark, each file's size and
    /// SHA-256, every row of every table and every raw frame, and the run's digest. Exits
    /// 0 when sound (cells written before checksums say "not verified"), 1 when any cell
    /// is incomplete, damaged or missing, 2 when the folder is not a readable run.
    Check(check::CheckArgs),
    /// Record a context × concurrency matrix (the built-in simulator when no --target is
    /// given), then verify the run folder. Exits 0 when every cell is complete, 1 when a
    /// cell failed (or the folder is unsound), 2 on a bad command line, 3 when cells were
    /// skipped, 130 on Ctrl-C.
    Record(Box<RecordCmd>),
    /// Score a run folder under a rule set and print the speed-test matrix (Markdown in
    /// the reference layout, JSON or CSV). Exits 1 when a cell folder could not be scored.
    Report(analyze::ReportArgs),
    /// Score run folders under a rule set and write RUN/results/<name>@<version>.json;
    /// the trace is never touched.
    Rescore(analyze::RescoreArgs),
    /// Compare two scorings (or runs) cell by cell: changed verdicts, figure changes,
    /// cells present in one only.
    Diff(analyze::DiffArgs),
    /// Score every run under folders or object-store prefixes under one rule set into
    /// one Parquet table (one row per run × cell: the run's facts, every figure and
    /// verdict), for DuckDB, Spark or polars. Exits 1 when a run could not be scored.
    Catalog(catalog::CatalogArgs),
    /// Bring another tool's results in: a results file of llm-inference-bench (0.4.x to
    /// 0.6.x) becomes a run folder whose cells hold that tool's figures and verdicts, for
    /// `report`, `diff` and `catalog` beside recorded runs (not re-scorable). Exits 2
    /// when the file is not a results file.
    Import(import::ImportArgs),
    /// Publish runs (folders or object-store prefixes) as a static website of plain
    /// files: an index (sortable, filterable), each run's HTML report, and a page per
    /// model × hardware comparing its runs over time. Run again to update: only changed
    /// runs are re-rendered. Exits 1 when a run could not be published.
    Site(site::SiteArgs),
    /// Re-derive a run's `chunks` and `requests` from its raw capture into a new run
    /// folder, under the recorded token-counting policy or another (the original is only
    /// read). For a parser fix or a policy change, without a GPU.
    Reparse(reparse::ReparseArgs),
    /// Serve the simulated inference engine (OpenAI-compatible, vLLM metrics) until Ctrl-C.
    Sim(sim::SimArgs),
    /// Follow a run being recorded elsewhere (a folder or the `s3://` prefix its recorder
    /// uploads to) in the recorder's live view, read-only, until it is complete or `q`.
    Watch(watch::WatchArgs),
}

/// `tokentrace record`: the recorder's options, and the built-in simulator to record
/// when no --target is given.
#[derive(Debug, clap::Args)]
pub struct RecordCmd {
    #[command(flatten)]
    pub args: tokentrace_recorder::cli::RecordArgs,
    /// Profile of the built-in simulator (used without --target): a built-in name
    /// (reference-h200x4, tiny, vllm-cpu-smollm2) or a TOML file.
    #[arg(long, default_value = "reference-h200x4")]
    pub sim_profile: String,
}

/// Runs a parsed command line; the exit code says whether the run folder is sound. A
/// command line that cannot run is an `Err` holding a
/// [`UsageError`](tokentrace_recorder::cli::UsageError): exit code 2.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // Every command but `record` and `sim` reads run folders.
    if !matches!(cli.command, Command::Record(_) | Command::Sim(_)) {
        tokentrace_recorder::run::heap::prepare_analysis();
    }
    match cli.command {
        Command::Check(args) => {
            let run = remote::local(&args.run)?;
            let local = check::CheckArgs {
                run: run.dir().to_path_buf(),
            };
            // Exit 2: not a run folder (no manifest, or one that does not decode).
            match check::run(&local, &mut std::io::stdout().lock()) {
                Ok(summary) => Ok(summary.exit_code()),
                Err(e) => {
                    eprintln!("tokentrace: {}: {e:#}", args.run.display());
                    Ok(ExitCode::from(2))
                }
            }
        }
        Command::Sim(args) => sim::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Catalog(args) => args
            .timings
            .around(|| catalog::run(&args, &mut std::io::stdout().lock())),
        Command::Record(args) => record(&args),
        Command::Report(args) => args.timings.around(|| analyze::report(&args)),
        Command::Rescore(args) => args
            .timings
            .around(|| analyze::rescore(&args, &mut std::io::stdout().lock())),
        Command::Diff(args) => args
            .timings
            .around(|| analyze::diff(&args, &mut std::io::stdout().lock())),
        Command::Reparse(args) => reparse::run(&args, &mut std::io::stdout().lock()),
        Command::Import(args) => import::run(&args, &mut std::io::stdout().lock()),
        Command::Site(args) => site::run(&args, &mut std::io::stdout().lock()),
        Command::Watch(args) => watch::run(&args),
    }
}

fn record(cmd: &RecordCmd) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use tokentrace_recorder::cli::{self, Outcome};
    let args = &cmd.args;
    // Every option is checked before the simulator starts or a file is written.
    for note in args.check()? {
        eprintln!("{note}");
    }
    // Against a server of its own, the process is a recorder only: its heap is readied
    // as `tokentrace-record`'s is (before the runtime's threads start). With the built-in
    // simulator, glibc's defaults stay.
    if args.target.is_some() {
        tokentrace_recorder::run::heap::prepare();
    }
    let rt = tokentrace_recorder::run::heap::runtime().context("cannot start the async runtime")?;
    let outcome = match &args.target {
        Some(t) => cli::run_at(args, t, None, &rt),
        None => {
            let profile = tokentrace_sim::Profile::load(&cmd.sim_profile)
                .with_context(|| format!("simulator profile `{}`", cmd.sim_profile))?;
            // The simulated box's GPUs, when its profile names them.
            let gpus = profile.gpus.as_ref().map(|g| {
                tokentrace_recorder::run::session::GpuChoice::Given(std::sync::Arc::new(
                    tokentrace_recorder::observe::gpu::SimulatedGpus::new(
                        g.count,
                        &g.name,
                        u64::from(g.memory_gib) << 30,
                        g.idle_w,
                        g.busy_w,
                    ),
                ))
            });
            let addr = "127.0.0.1:0".parse().context("loopback address")?;
            let sim = rt
                .block_on(tokentrace_sim::SimServer::start(profile, addr))
                .context("cannot start the built-in simulator")?;
            eprintln!(
                "no --target: recording the built-in simulator ({}) at {}",
                cmd.sim_profile,
                sim.url()
            );
            let outcome = cli::run_at(args, &sim.url(), gpus, &rt);
            sim.stop();
            outcome
        }
    };
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    match outcome
        .map_err(anyhow::Error::msg)
        .context("recording failed")?
    {
        Outcome::Interrupted(lines) => {
            for l in &lines {
                eprintln!("interrupted: {l}");
            }
            eprintln!("interrupted: finish the run with --resume");
            Ok(ExitCode::from(130))
        }
        Outcome::Planned(m) => {
            for l in cli::plan_lines(&m) {
                println!("{l}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Done(m) => {
            eprintln!("run {} recorded in {}", m.run_id, args.out.display());
            let check = check::CheckArgs {
                run: args.out.clone(),
            };
            let sound = check::run(&check, &mut std::io::stdout().lock())?;
            if !sound.sound() {
                return Ok(sound.exit_code());
            }
            let (code, line) = cli::finished(&m);
            line.iter().for_each(|l| eprintln!("{l}"));
            Ok(ExitCode::from(code))
        }
    }
}
