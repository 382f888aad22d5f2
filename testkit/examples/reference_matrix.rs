//! Writes a synthetic run the size of the reference report's matrix through the real
//! writers (9 prefill cells, 72 decode cells, ~3.5 M output tokens; SCALE times that in
//! the decode cells), for the re-scoring and scale benchmarks (bench/rescore.sh,
//! bench/scale.sh), and prints what it wrote.
//!
//! usage: reference_matrix OUT_DIR [SCALE]

use std::process::ExitCode;

use tokentrace_testkit::synth;

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: reference_matrix OUT_DIR [SCALE]")?;
    let scale: u64 = match args.next() {
        Some(s) => s
            .parse()
            .ok()
            .filter(|s| *s >= 1)
            .ok_or_else(|| format!("SCALE `{s}`: expected a whole number of at least 1"))?,
        None => 1,
    };
    let out = std::path::Path::new(&out);
    if out.exists() {
        return Err(format!(
            "{}: already exists; give a new folder",
            out.display()
        ));
    }
    let started = std::time::Instant::now();
    let m = synth::write_reference_matrix_scaled(out, "reference-matrix", scale)
        .map_err(|e| e.to_string())?;
    let tokens: u64 = synth::REFERENCE_TOKENS.iter().sum::<u64>()
        * scale
        * synth::REFERENCE_CONTEXTS.len() as u64;
    println!(
        "{}: {} cells, {tokens} decode tokens, written in {:.1} s",
        out.display(),
        m.cells.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reference_matrix: {e}");
            ExitCode::FAILURE
        }
    }
}
