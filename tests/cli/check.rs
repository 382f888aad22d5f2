//! `tokentrace check` against run folders written by the real writer.

use std::process::Command;

use clap::Parser;
use tokentrace::{Cli, Command as Sub, check};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_testkit::synth;

fn keys() -> Vec<CellKey> {
    vec![
        CellKey::new(Phase::Decode, 512, 1),
        CellKey::new(Phase::Decode, 512, 4),
    ]
}

fn check_in_process(run: &std::path::Path) -> (check::CheckSummary, String) {
    let cli = Cli::parse_from(["tokentrace", "check", run.to_str().expect("utf-8 path")]);
    let Sub::Check(args) = cli.command else {
        panic!("parsed as another command");
    };
    let mut out = Vec::new();
    let summary = check::run(&args, &mut out).expect("check runs");
    (summary, String::from_utf8(out).expect("utf-8"))
}

#[test]
fn sound_run_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    synth::write_run(dir.path(), "e2e", &keys(), 3_000).expect("run");
    let (summary, out) = check_in_process(dir.path());
    assert!(summary.sound(), "{out}");
    assert_eq!(summary.cells, 2);
    assert!(
        out.contains("ok      decode context=512 concurrency=4: chunks.parquet "),
        "{out}"
    );
}

#[test]
fn damage_is_named_and_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    synth::write_run(run, "e2e", &keys(), 3_000).expect("run");
    // Damage one file, remove another cell entirely.
    let chunks = keys()[0].dir(run).join("chunks.parquet");
    let bytes = std::fs::read(&chunks).expect("read");
    std::fs::write(&chunks, &bytes[..bytes.len() - 100]).expect("truncate");
    std::fs::remove_dir_all(keys()[1].dir(run)).expect("remove");
    let (summary, out) = check_in_process(run);
    assert_eq!(
        summary,
        check::CheckSummary {
            cells: 1,
            damaged: 1,
            missing: 1,
            unverified: 0,
        },
        "{out}"
    );
    assert!(
        out.contains(&chunks.display().to_string()),
        "names the file: {out}"
    );
    assert!(
        out.contains("MISSING decode context=512 concurrency=4"),
        "{out}"
    );

    let status = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["check", run.to_str().expect("utf-8")])
        .output()
        .expect("spawn");
    assert_eq!(status.status.code(), Some(1));
}

#[test]
fn missing_manifest_is_an_error_naming_it_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["check", dir.path().to_str().expect("utf-8")])
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("manifest.json"), "{stderr}");
    assert!(out.stdout.is_empty());
}
