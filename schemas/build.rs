//! Build script: the git commit, target and profile this build was made from, for every
//! binary's `--version` and the manifest's `tool` (schemas/src/build.rs reads them).
//! `TOKENTRACE_COMMIT` in the environment wins (a build from a source archive has no git).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=TOKENTRACE_COMMIT");
    let commit = std::env::var("TOKENTRACE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=TOKENTRACE_COMMIT={}", commit.trim());
    for (from, to) in [
        ("TARGET", "TOKENTRACE_TARGET"),
        ("PROFILE", "TOKENTRACE_PROFILE"),
    ] {
        let value = std::env::var(from).unwrap_or_else(|_| "unknown".to_string());
        println!("cargo:rustc-env={to}={value}");
    }
}

/// `git rev-parse --short=12 HEAD` in this crate's folder, and a rerun whenever HEAD moves
/// (a commit, a checkout): HEAD itself, the branch it names, and packed refs.
fn git_commit() -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]) else {
            continue;
        };
        // A path that does not exist would make cargo rerun this script on every build.
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}
