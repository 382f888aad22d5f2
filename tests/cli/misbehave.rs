//! A server that misbehaves, end to end: `/metrics` slow (answers after the scrape
//! interval), huge (100,000 series a scrape) or garbage, and a server process that dies
//! mid-cell and comes back on the same port. The recorder finishes the matrix, says in
//! the trace what went wrong, and never hangs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{EventKind, Events, Metrics};

const TINY: &str = include_str!("../../sim/profiles/tiny.toml");

fn profile(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("profile.toml");
    std::fs::write(&p, format!("{TINY}\n{extra}\n")).expect("profile");
    p
}

pub(crate) fn record(out: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tokentrace"));
    c.args(["record", "--out"])
        .arg(out)
        .args([
            "--contexts",
            "512",
            "--metrics-interval",
            "200ms",
            "--gpu-telemetry",
            "off",
        ])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Runs to the end (at most `limit`); the exit code and stderr.
pub(crate) fn finish(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            s.push_str(&l);
            s.push('\n');
        }
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the recorder hung");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code(), reader.join().expect("stderr"))
}

fn faults(run: &Path) -> Vec<String> {
    list_cells(run)
        .expect("cells")
        .iter()
        .flat_map(|(_, d)| read_table::<Events>(&d.join("events.parquet")).expect("events"))
        .filter(|e| e.kind == EventKind::Fault)
        .filter_map(|e| e.detail)
        .collect()
}

fn metric_rows(run: &Path) -> usize {
    list_cells(run)
        .expect("cells")
        .iter()
        .map(|(_, d)| {
            read_table::<Metrics>(&d.join("metrics.parquet"))
                .expect("metrics")
                .len()
        })
        .sum()
}

fn all_complete(run: &Path) -> Manifest {
    let m = Manifest::read(run).expect("manifest");
    assert!(
        m.cells.iter().all(|c| c.status == CellStatus::Complete),
        "{:?}",
        m.cells
    );
    m
}

/// Records the tiny profile plus `extra` into `dir/name` (contexts 512, streams 1 and
/// 3, 800 ms windows); the exit code and stderr.
fn record_misbehaving(dir: &Path, name: &str, extra: &str) -> (PathBuf, Option<i32>, String) {
    let out = dir.join(name);
    let args = [
        "--concurrency",
        "1,3",
        "--duration",
        "800ms",
        "--max-tokens",
        "100",
    ];
    let (code, log) = record_sim(dir, &out, extra, &args);
    (out, code, log)
}

/// Records the tiny profile plus `extra` (written in `dir`) into `out` with `args`; the
/// exit code and stderr (a recorder still going after 240 s fails the test as hung).
fn record_sim(dir: &Path, out: &Path, extra: &str, args: &[&str]) -> (Option<i32>, String) {
    let p = profile(dir, extra);
    let mut all = vec!["--sim-profile", p.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    finish(
        record(out, &all).spawn().expect("record"),
        Duration::from_secs(240),
    )
}

/// Every request row of the run's committed cells.
fn requests_of(run: &Path) -> Vec<tokentrace_schemas::tables::RequestRow> {
    list_cells(run)
        .expect("cells")
        .iter()
        .flat_map(|(_, d)| {
            read_table::<tokentrace_schemas::tables::Requests>(&d.join("requests.parquet"))
                .expect("requests")
        })
        .collect()
}

#[test]
fn slow_huge_and_garbage_metrics_do_not_stop_the_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Slow: each scrape answers after 1.5 s, far past the 200 ms interval.
    let (slow, code, log) = record_misbehaving(
        tmp.path(),
        "slow",
        "[metrics]
delay_seconds = 1.5",
    );
    assert_eq!(code, Some(0), "{log}");
    all_complete(&slow);
    assert!(metric_rows(&slow) > 0, "slow scrapes still land");

    // Huge: 100,000 series a scrape, every one kept.
    let (huge, code, log) = record_misbehaving(
        tmp.path(),
        "huge",
        "[metrics]
extra_series = 100000",
    );
    assert_eq!(code, Some(0), "{log}");
    all_complete(&huge);
    assert!(metric_rows(&huge) > 300_000, "{} rows", metric_rows(&huge));

    // Garbage: the probe finds no readable metrics, records it, and the run goes on with
    // client-side evidence; the report says so.
    let (garbage, code, log) = record_misbehaving(
        tmp.path(),
        "garbage",
        "[metrics]
garbage = true",
    );
    assert_eq!(code, Some(0), "{log}");
    let m = all_complete(&garbage);
    assert_eq!(m.capabilities.metrics, Some(false));
    let report = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .arg("report")
        .arg(&garbage)
        .output()
        .expect("report");
    assert!(
        String::from_utf8_lossy(&report.stdout).contains("no (client-side evidence only)"),
        "the report says the metrics were unreadable"
    );
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub fn sim(listen: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["sim", "--profile", "tiny", "--listen", listen])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sim")
}

pub fn wait_listening(listen: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(Instant::now() < deadline, "the simulator did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_server_that_dies_mid_cell_and_comes_back_is_survived() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("run");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = sim(&listen);
    wait_listening(&listen);
    let target = format!("http://{listen}");
    let child = record(
        &out,
        &[
            "--target",
            &target,
            "--concurrency",
            "1,2,3",
            "--duration",
            "2s",
            "--stall-timeout",
            "3s",
            "--max-tokens",
            "100",
        ],
    )
    .spawn()
    .expect("record");
    // Kill the server in the middle of the second decode cell, bring it back 2 s later.
    let deadline = Instant::now() + Duration::from_secs(60);
    while list_cells(&out).map(|c| c.len()).unwrap_or(0) < 2 {
        assert!(Instant::now() < deadline, "no cells committed");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(900));
    let _ = server.kill();
    let _ = server.wait();
    std::thread::sleep(Duration::from_secs(2));
    let mut server = sim(&listen);
    wait_listening(&listen);
    let (code, log) = finish(child, Duration::from_secs(240));
    let _ = server.kill();
    let _ = server.wait();
    // It ends on its own: every cell complete or failed with a reason, the cells after
    // the outage recorded, and the run sound.
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}\n{log}");
    let m = Manifest::read(&out).expect("manifest");
    for c in &m.cells {
        match c.status {
            CellStatus::Complete => {}
            CellStatus::Failed => assert!(c.reason.is_some(), "{c:?}"),
            other => panic!("{}: {other:?}\n{log}", c.key()),
        }
    }
    let last = m.cells.last().expect("cells");
    assert_eq!(
        last.status,
        CellStatus::Complete,
        "the matrix carried on\n{log}"
    );
    let said = faults(&out).join("\n") + &log;
    assert!(
        m.cells.iter().any(|c| c.status == CellStatus::Failed)
            || said.contains("refused")
            || said.contains("connect")
            || said.contains("fault"),
        "the outage left a trace\n{log}"
    );
    crate::record::tokentrace_ok(&["check"], &out);
    eprintln!("{log}");
}

/// A body that trickles in one byte at a time is recorded whole; an event of 100 MB
/// ends its request with the reason, within the framer's bound, and the run goes on.
#[test]
fn trickling_bodies_and_huge_events_end_with_a_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let trickle = tmp.path().join("trickle");
    let (code, log) = record_sim(
        tmp.path(),
        &trickle,
        "[faults]\ntrickle = 1.0",
        &[
            "--concurrency",
            "1",
            "--duration",
            "1s",
            "--max-tokens",
            "8",
        ],
    );
    assert_eq!(code, Some(0), "{log}");
    all_complete(&trickle);
    let finished = requests_of(&trickle)
        .into_iter()
        .filter(|r| r.end_reason == tokentrace_schemas::tables::EndReason::FinishedLength)
        .count();
    assert!(finished > 0, "trickled requests finish\n{log}");

    let huge = tmp.path().join("huge");
    let (code, log) = record_sim(
        tmp.path(),
        &huge,
        "[faults]\nhuge_event = 1.0",
        &[
            "--concurrency",
            "1",
            "--duration",
            "1s",
            "--max-tokens",
            "100",
        ],
    );
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}\n{log}");
    let requests = requests_of(&huge);
    let too_long = requests
        .iter()
        .filter(|r| {
            r.error
                .as_deref()
                .is_some_and(|e| e.contains("exceeded 16777216 bytes"))
        })
        .count();
    assert!(too_long > 0, "{requests:?}\n{log}");
}

/// Response heads that stop part-way and never finish: each such request ends at the
/// stall timeout, saying how much of the head came; the probe obeys the same timeout,
/// and the matrix finishes.
#[test]
fn response_heads_that_never_finish_end_at_the_stall_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("run");
    // The server holds a cut head for 60 s; the recorder waits 1 s for a byte.
    let t = Instant::now();
    let (code, log) = record_sim(
        tmp.path(),
        &out,
        "[faults]\npartial_headers = 0.3\nstall_seconds = 60.0",
        &[
            "--concurrency",
            "1,2",
            "--duration",
            "2s",
            "--stall-timeout",
            "1s",
            "--max-tokens",
            "16",
        ],
    );
    assert_eq!(code, Some(0), "{log}");
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "nothing waited for the server's 60 s hold: {:?}",
        t.elapsed()
    );
    all_complete(&out);
    let requests = requests_of(&out);
    let cut: Vec<_> = requests
        .iter()
        .filter(|r| r.end_reason == tokentrace_schemas::tables::EndReason::StallTimeout)
        .collect();
    assert!(!cut.is_empty(), "{requests:?}");
    for r in &cut {
        assert_eq!(r.http_status, None, "no head was complete: {r:?}");
        let e = r.error.as_deref().unwrap_or_default();
        assert!(
            e.contains("the response head stopped after 40 bytes"),
            "the reason says where: {r:?}"
        );
    }
    assert!(
        requests
            .iter()
            .any(|r| r.end_reason == tokentrace_schemas::tables::EndReason::FinishedLength),
        "the others finish"
    );
}

/// When no head ever finishes, each cell gives up after its run of unanswered requests,
/// with the reason, and the recorder ends instead of waiting out the warm-up timeout.
#[test]
fn every_head_cut_fails_the_cell_with_the_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("run");
    let t = Instant::now();
    let (code, log) = record_sim(
        tmp.path(),
        &out,
        "[faults]\npartial_headers = 1.0\nstall_seconds = 600.0",
        &[
            "--prefill-mode",
            "warmup",
            "--concurrency",
            "2",
            "--duration",
            "2s",
            "--stall-timeout",
            "300ms",
        ],
    );
    let m = Manifest::read(&out).unwrap_or_else(|e| panic!("{e}\n{log}"));
    assert_eq!(m.cells.len(), 1, "{log}");
    let cell = &m.cells[0];
    assert_eq!(cell.status, CellStatus::Failed, "{log}");
    let reason = cell.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("left unanswered 16 requests in a row")
            && reason.contains("the response head stopped after 40 bytes"),
        "{reason}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(200),
        "ended long before the 10 min warm-up timeout: {:?}",
        t.elapsed()
    );
    assert_eq!(code, Some(1), "a failed cell fails the run\n{log}");
}
