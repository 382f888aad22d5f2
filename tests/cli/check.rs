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

/// A `warmup_end` whose detail no reader form matches is named by `check` (the run is
/// still sound) and warned of by the report; an older recorder's text and the JSON form
/// read as before, with no such line or warning.
#[test]
fn an_unreadable_event_detail_is_named() {
    use tokentrace_analyzer::contract::Warning;
    use tokentrace_schemas::protocol::{Drain, Readiness};
    use tokentrace_schemas::tables::EventKind;
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path();
    let [odd, plain] = [keys()[0], keys()[1]];
    let mut spec = synth::DecodeSpec::new(odd, 3_000);
    spec.details = vec![
        (
            EventKind::WarmupEnd,
            "warm-up gave up; window opened".into(),
        ),
        (EventKind::DrainEnd, "drained: 0 running, 0 waiting".into()),
    ];
    synth::write_decode_cell(run, &spec).expect("cell");
    let mut spec = synth::DecodeSpec::new(plain, 3_000);
    spec.details = vec![
        (EventKind::WarmupEnd, Readiness::Ready.to_detail()),
        (EventKind::DrainEnd, Drain::Drained.to_detail()),
    ];
    synth::write_decode_cell(run, &spec).expect("cell");
    synth::manifest("e2e", &keys())
        .write(run)
        .expect("manifest");

    let (summary, out) = check_in_process(run);
    assert!(summary.sound(), "not damage: {out}");
    let notes: Vec<&str> = out.lines().filter(|l| l.starts_with("note")).collect();
    assert_eq!(
        notes,
        [
            "note    decode context=512 concurrency=1: its warmup_end event at 0 ns says `warm-up gave up; window opened`, which no reader form matches: the report reads it as saying nothing, and warns"
        ],
        "{out}"
    );

    let s = tokentrace_analyzer::score_dir(
        run,
        &tokentrace_analyzer::RuleSet::builtin("default").expect("rules"),
    )
    .expect("scored");
    let unread = |key: CellKey| -> Vec<Warning> {
        s.cells
            .iter()
            .find(|c| c.key() == key)
            .expect("cell")
            .warnings
            .iter()
            .filter(|w| w.kind() == "unread_event_detail")
            .cloned()
            .collect()
    };
    assert_eq!(
        unread(odd),
        [Warning::UnreadEventDetail {
            event: "warmup_end".into(),
            time_ns: 0,
            detail: "warm-up gave up; window opened".into(),
        }]
    );
    assert_eq!(unread(plain), []);
    let md = tokentrace_analyzer::report::render(&s, tokentrace_analyzer::report::Format::Markdown);
    assert!(
        md.contains("the `warmup_end` event at 0 s says `warm-up gave up; window opened`, which this reader cannot read: its warm-up check was not read"),
        "{md}"
    );
}
