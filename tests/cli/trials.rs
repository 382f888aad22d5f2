//! Crash trials: the recorder (the `tokentrace record` process, against the built-in
//! simulator) is killed with SIGKILL at seeded random moments of five kinds — during
//! the probe, during a prefill scout, mid-window, late in a decode cell (window close,
//! cancel, drain, commit), and right after a commit — then resumed. Each trial checks
//! that every file committed before the kill is byte-identical afterwards, the run ends
//! complete, `check` and `report` pass, and no staging folder is left. Ctrl-C trials
//! send SIGINT at a random moment: exit 130 (or 0 when the run had just ended) and a
//! manifest that matches the disk, then resume. `TOKENTRACE_TRIALS` trials of each
//! kind (5 by default, as in CI; 100 for the long campaign), seeds from
//! `TOKENTRACE_TRIALS_SEED` (printed on failure).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_schemas::rng::Rng;

use crate::record::{assert_manifest_matches_disk, files_of, tokentrace_ok};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moment {
    Probe,
    Scout,
    MidWindow,
    LateInCell,
    AfterCommit,
}

fn record(out: &Path, resume: bool) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokentrace"));
    cmd.args(["record", "--out"])
        .arg(out)
        .args([
            "--sim-profile",
            "tiny",
            "--contexts",
            "512",
            "--concurrency",
            "1,3",
            "--duration",
            "500ms",
            "--max-tokens",
            "120",
            "--metrics-interval",
            "100ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if resume {
        cmd.arg("--resume");
    }
    cmd
}

/// The recorder's progress lines, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(err) = child.stderr.take() {
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// Waits for a progress line containing all of `words` (false if the run ended first).
fn wait_for(rx: &mpsc::Receiver<String>, words: &[&str]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) if words.iter().all(|w| l.contains(w)) => return true,
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return false,
        }
    }
    false
}

fn ms(rng: &mut Rng, from: u64, to: u64) -> Duration {
    Duration::from_millis(from + rng.next_u64() % (to - from).max(1))
}

/// Runs the recorder until the moment, then kills it; returns whether the kill came
/// before the run ended.
fn kill_at(out: &Path, moment: Moment, rng: &mut Rng) -> bool {
    let mut child = record(out, false).spawn().expect("recorder");
    let rx = lines_of(&mut child);
    let reached = match moment {
        Moment::Probe => {
            std::thread::sleep(ms(rng, 0, 60));
            true
        }
        Moment::Scout => {
            let ok = wait_for(&rx, &["prefill", "recording"]);
            std::thread::sleep(ms(rng, 0, 40));
            ok
        }
        Moment::MidWindow => {
            let nth = 1 + rng.next_u64() % 2;
            let ok = (0..nth).all(|_| wait_for(&rx, &["decode", "recording"]));
            std::thread::sleep(ms(rng, 150, 650));
            ok
        }
        Moment::LateInCell => {
            let ok = wait_for(&rx, &["decode", "recording"]);
            std::thread::sleep(ms(rng, 600, 1100));
            ok
        }
        Moment::AfterCommit => {
            let nth = 1 + rng.next_u64() % 2;
            (0..nth).all(|_| wait_for(&rx, &["committed"]))
        }
    };
    let ended = child.try_wait().expect("wait").is_some();
    let _ = child.kill();
    let _ = child.wait();
    reached && !ended
}

/// Resumes the run and checks it: committed files unchanged, complete, sound.
fn resume_and_check(out: &Path, before: &std::collections::BTreeMap<String, Vec<u8>>, what: &str) {
    let status = record(out, true)
        .stderr(Stdio::null())
        .status()
        .expect("resume");
    assert!(status.success(), "{what}: resume ended {status}");
    let m = Manifest::read(out).expect("manifest");
    assert!(
        m.cells.iter().all(|c| c.status == CellStatus::Complete),
        "{what}: {:?}",
        m.cells
    );
    assert_eq!(list_cells(out).expect("cells").len(), 3, "{what}");
    let after = files_of(out);
    for (path, bytes) in before {
        assert!(
            after.get(path) == Some(bytes),
            "{what}: {path} changed on resume"
        );
    }
    assert!(
        !out.join(".staging").exists(),
        "{what}: a staging folder is left"
    );
    tokentrace_ok(&["check"], out);
    tokentrace_ok(&["report"], out);
}

fn trials() -> u64 {
    std::env::var("TOKENTRACE_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5)
}

fn seed() -> u64 {
    std::env::var("TOKENTRACE_TRIALS_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20261201)
}

#[test]
fn sigkill_at_any_moment_loses_nothing_committed() {
    let mut counts = Vec::new();
    for (k, moment) in [
        Moment::Probe,
        Moment::Scout,
        Moment::MidWindow,
        Moment::LateInCell,
        Moment::AfterCommit,
    ]
    .into_iter()
    .enumerate()
    {
        let mut killed = 0;
        for t in 0..trials() {
            let trial_seed = seed() ^ ((k as u64) << 32 | t);
            let mut rng = Rng::new(trial_seed);
            let dir = tempfile::tempdir().expect("tempdir");
            let out = dir.path().join("run");
            killed += u64::from(kill_at(&out, moment, &mut rng));
            let before = if out.exists() {
                files_of(&out)
            } else {
                Default::default()
            };
            resume_and_check(
                &out,
                &before,
                &format!(
                    "{moment:?} trial {t} (TOKENTRACE_TRIALS_SEED={}, seed {trial_seed})",
                    seed()
                ),
            );
        }
        counts.push((moment, killed));
    }
    eprintln!(
        "SIGKILL trials (killed before the run ended / trials): {counts:?} of {}",
        trials()
    );
    // Most trials of every kind hit the run while it was still going.
    for (moment, killed) in counts {
        assert!(
            killed * 2 >= trials(),
            "{moment:?}: only {killed} kills landed mid-run"
        );
    }
}

#[test]
fn ctrl_c_at_any_moment_exits_130_with_a_true_manifest() {
    let mut interrupted = 0;
    for t in 0..trials() {
        let trial_seed = seed() ^ (0xC7 << 32 | t);
        let mut rng = Rng::new(trial_seed);
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("run");
        let mut child = record(&out, false)
            .stderr(Stdio::null())
            .spawn()
            .expect("recorder");
        // The whole run takes about 1.5 s here: most signals land inside it.
        std::thread::sleep(ms(&mut rng, 50, 1300));
        let sent = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill -INT");
        assert!(sent.success());
        let status = child.wait().expect("wait");
        let what = format!("Ctrl-C trial {t} (seed {trial_seed})");
        match status.code() {
            Some(130) => interrupted += 1,
            Some(0) => {}
            other => panic!("{what}: exit {other:?}"),
        }
        if out.join("manifest.json").exists() {
            assert_manifest_matches_disk(&out);
        }
        let before = if out.exists() {
            files_of(&out)
        } else {
            Default::default()
        };
        resume_and_check(&out, &before, &what);
    }
    eprintln!(
        "Ctrl-C trials: {interrupted} of {} interrupted mid-run",
        trials()
    );
    assert!(
        interrupted * 2 >= trials(),
        "only {interrupted} interrupts landed mid-run"
    );
}
