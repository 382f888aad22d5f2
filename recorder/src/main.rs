//! `tokentrace-record`: the slim recording binary for the GPU box.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "tokentrace-record {}: the matrix runner is not built yet; this binary writes nothing.",
        tokentrace_recorder::schemas::TOOL_VERSION
    );
    ExitCode::from(2)
}
