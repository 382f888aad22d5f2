//! Every input is checked before any request or file: a bad command line gets one line
//! naming the option, exit code 2, and no folder; a matrix the server cannot hold still
//! leaves a run folder that `check` and `report` accept and that says why.

use std::path::Path;
use std::process::{Command, Output};

fn record(out: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["record", "--out"])
        .arg(out)
        .args(["--sim-profile", "tiny"])
        .args(args)
        .output()
        .expect("run tokentrace")
}

#[test]
fn bad_command_lines_exit_2_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let cases: [(&[&str], &str); 26] = [
        (&["--duration", "0s"], "--duration 0s"),
        (&["--max-tokens", "0"], "--max-tokens 0"),
        (&["--stall-timeout", "0s"], "--stall-timeout 0s"),
        (&["--contexts", ""], "--contexts is empty"),
        (&["--concurrency", ","], "--concurrency is empty"),
        (&["--contexts", "8Q"], "not a token count"),
        (&["--target", "ftp://127.0.0.1:9"], "scheme `ftp`"),
        (&["--target", "http://"], "--target"),
        (
            &["--mode", "sweep"],
            "expected matrix, burst, rate, replay or conversation",
        ),
        (
            &["--mode", "conversation"],
            "--mode conversation needs --conversations",
        ),
        (
            &["--mode", "matrix", "--conversations", "4"],
            "--mode has no `conversation`",
        ),
        (
            &["--conversations", "4", "--turns", "5..3"],
            "the fewest turns",
        ),
        (&["--conversations", "4", "--turns", "0"], "above 0"),
        (
            &["--conversations", "4", "--message-tokens", "8"],
            "at least 32",
        ),
        (
            &["--conversations", "4", "--answer-tokens", "0"],
            "--answer-tokens 0",
        ),
        (
            &["--conversations", "4", "--think-time", "gamma"],
            "fixed or exponential",
        ),
        (
            &["--conversations", "4", "--tool-tokens", "8"],
            "--tool-tokens: 0, or at least 32",
        ),
        (
            &["--conversations-from", "sessions.json"],
            "--conversations-from needs --conversations",
        ),
        (
            &[
                "--conversations",
                "4",
                "--conversations-from",
                "/no/such/sessions.json",
            ],
            "--conversations-from /no/such/sessions.json:",
        ),
        (&["--mode", "rate"], "--mode rate needs --rates"),
        (&["--rates", "1,0"], "`0` is not a request rate"),
        (&["--rates", "1.2345"], "not a request rate"),
        (&["--rates", "4,inf"], "give --rate-requests"),
        (&["--mode", "burst", "--rates", "4"], "--mode has no `rate`"),
        (&["--mode", "burst", "--requests", "0"], "--requests 0"),
        (
            &["--rates", "4", "--max-concurrency", "0"],
            "--max-concurrency 0",
        ),
    ];
    for (args, says) in cases {
        let o = record(&out, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?}: nothing written");
    }
    // An existing --out is refused before the simulator starts or anything is probed.
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(out.join("keep.txt"), "mine").expect("write");
    let o = record(&out, &["--contexts", "1K", "--concurrency", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("already exists") && err.contains("--resume"),
        "{err}"
    );
    assert!(
        !err.contains("simulator"),
        "refused before the simulator started: {err}"
    );
    let names: Vec<_> = std::fs::read_dir(&out)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["keep.txt"]);
}

#[test]
fn a_run_with_every_cell_skipped_is_a_valid_folder_that_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    // The tiny profile serves 16,384 tokens: 64K does not fit.
    let o = record(&out, &["--contexts", "64K", "--concurrency", "1,2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "skipped cells exit 3: {err}");
    assert!(err.contains("3 of 3 cells skipped"), "{err}");
    let bin = env!("CARGO_BIN_EXE_tokentrace");
    let check = Command::new(bin)
        .arg("check")
        .arg(&out)
        .output()
        .expect("check");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{text}");
    assert!(
        text.contains("skipped") && text.contains("max_model_len 16384"),
        "{text}"
    );
    let report = Command::new(bin)
        .arg("report")
        .arg(&out)
        .output()
        .expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{text}");
    assert!(text.contains("Nothing was measured"), "{text}");
    assert!(
        text.contains("exceeds the server's max_model_len 16384"),
        "{text}"
    );
}
