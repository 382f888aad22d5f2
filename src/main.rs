//! `tokentrace`: the laptop CLI. Thin: parse, then hand over to the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tokentrace::Cli::parse();
    match tokentrace::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tokentrace: {e:#}");
            if e.downcast_ref::<tokentrace_recorder::cli::UsageError>()
                .is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
