//! `tokentrace-record`: the slim recording binary for the GPU box (no analyzer).

use std::process::ExitCode;

use clap::Parser;
use tokentrace_recorder::cli::{self, Outcome, RecordArgs};

/// tokentrace-record: record an LLM server's speed-test matrix to a run folder.
#[derive(Debug, Parser)]
#[command(name = "tokentrace-record", version = tokentrace_schemas::build::RECORDER_VERSION, about)]
struct Cli {
    #[command(flatten)]
    args: RecordArgs,
}

fn main() -> ExitCode {
    // Before any thread starts (heap.rs).
    tokentrace_recorder::run::heap::prepare();
    let cli = Cli::parse();
    match cli.args.check() {
        Ok(notes) => notes.iter().for_each(|n| eprintln!("{n}")),
        Err(e) => {
            eprintln!("tokentrace-record: {e}");
            return ExitCode::from(2);
        }
    }
    let rt = match tokentrace_recorder::run::heap::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokentrace-record: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = cli::run(&cli.args, &rt);
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    match outcome {
        Ok(Outcome::Done(m)) => {
            eprintln!("run {} recorded in {}", m.run_id, cli.args.out.display());
            let (code, line) = cli::finished(&m);
            line.iter().for_each(|l| eprintln!("{l}"));
            ExitCode::from(code)
        }
        Ok(Outcome::Planned(m)) => {
            for l in cli::plan_lines(&m) {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Ok(Outcome::Interrupted(lines)) => {
            for l in &lines {
                eprintln!("interrupted: {l}");
            }
            eprintln!("interrupted: finish the run with --resume");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("tokentrace-record: {e}");
            ExitCode::FAILURE
        }
    }
}
