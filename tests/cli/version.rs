//! What a build says it is: `tokentrace --version` names the version, the git commit
//! and the features, and a run it records keeps the same in its manifest and `check` line.

use std::path::Path;
use std::process::Command;

use tokentrace_schemas::build;
use tokentrace_schemas::manifest::Manifest;

/// The commit git gives for this checkout, when it is one.
fn git_head() -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn version_names_the_commit_and_features_and_the_manifest_keeps_them() {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .arg("--version")
        .output()
        .expect("run tokentrace");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let first = format!(
        "tokentrace {} (commit {}, {}, {})",
        env!("CARGO_PKG_VERSION"),
        build::COMMIT,
        build::TARGET,
        build::PROFILE
    );
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            first.as_str(),
            "features: recorder, s3, rustls, nvml-at-run-time, analyzer, simulator"
        ],
        "{text}"
    );
    if let Some(head) = git_head() {
        assert_eq!(build::COMMIT, head, "the build's commit is the checkout's");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    let rec = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["record", "--out"])
        .arg(&run)
        .args([
            "--sim-profile",
            "tiny",
            "--contexts",
            "512",
            "--concurrency",
            "1",
        ])
        .args(["--duration", "300ms", "--max-tokens", "40"])
        .output()
        .expect("record");
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let m = Manifest::read(&run).expect("manifest");
    assert_eq!(m.tool.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(m.tool.commit.as_deref(), build::commit());
    assert_eq!(m.tool.features, build::RECORDER_FEATURES);
    let check = check_line(&run);
    let written_by = match build::commit() {
        Some(c) => format!("written by tokentrace {} ({c})", env!("CARGO_PKG_VERSION")),
        None => format!("written by tokentrace {} ·", env!("CARGO_PKG_VERSION")),
    };
    assert!(check.contains(&written_by), "{check}");
}

fn check_line(run: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .arg("check")
        .arg(run)
        .output()
        .expect("check");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}
