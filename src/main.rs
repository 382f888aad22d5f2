//! `tokentrace`: the laptop CLI. Thin: parse, then hand over to the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tokentrace::Cli::parse();
    match tokentrace::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tokentrace: {e:#}");
            ExitCode::FAILURE
        }
    }
}
