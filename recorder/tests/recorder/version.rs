//! `tokentrace-record --version` names the version, the commit and the recorder's features.

use std::process::Command;

use tokentrace_schemas::build;

#[test]
fn version_names_the_commit_and_the_recorders_features() {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace-record"))
        .arg("--version")
        .output()
        .expect("run tokentrace-record");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let first = format!(
        "tokentrace-record {} (commit {}, {}, {})",
        env!("CARGO_PKG_VERSION"),
        build::COMMIT,
        build::TARGET,
        build::PROFILE
    );
    let features = format!("features: {}", build::RECORDER_FEATURES.join(", "));
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [first, features],
        "{text}"
    );
}
