//! Recording against the simulator, end to end: the trace agrees with the simulator's
//! ground truth, a killed run resumes to completion, and the API key reaches no file.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokentrace_recorder::run::runner;
use tokentrace_recorder::run::session::{self, RecordOptions};
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_schemas::raw::RawReader;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Chunks, EndReason, Endpoint, Requests};
use tokentrace_sim::truth::{TruthChunks, TruthRequests};
use tokentrace_sim::{Profile, SimOptions, SimServer};

/// Every cell of the run is complete.
fn assert_complete(m: &Manifest) {
    assert!(
        m.cells.iter().all(|c| c.status == CellStatus::Complete),
        "{:?}",
        m.cells
    );
}

pub fn options(target: &str, out: &Path) -> RecordOptions {
    RecordOptions {
        target: target.to_string(),
        out: out.to_path_buf(),
        model: None,
        endpoint: Endpoint::Completions,
        contexts: vec![512],
        concurrency: vec![1, 3],
        window: Duration::from_millis(800),
        max_tokens: 120,
        metrics_url: None,
        scrape_interval: Duration::from_millis(200),
        stall_timeout: Duration::from_secs(30),
        warmup_timeout: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(30),
        prompt_tolerance: 0,
        resume: false,
        describe: vec![("hardware".to_string(), "loopback".to_string())],
        launch_command: Some("vllm serve m --api-key sk-123 --port 8000".to_string()),
        api_key: None,
        prefill_mode: tokentrace_schemas::manifest::PrefillMode::Scout,
        progress: Default::default(),
        writers: Default::default(),
        steer: Default::default(),
        feed: Default::default(),
        retry_skipped: false,
        gpus: Default::default(),
        upload: None,
        skip_over_capacity: false,
        modes: vec![session::Mode::Matrix],
        burst_requests: session::DEFAULT_BURST_REQUESTS,
        rate: None,
        plan_only: false,
        replay: None,
        conversation: None,
        conversation_scripts: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_agrees_with_the_simulators_ground_truth() {
    let truth_dir = tempfile::tempdir().expect("tempdir");
    let run_dir = tempfile::tempdir().expect("tempdir");
    let out = run_dir.path().join("run");
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start_with(
        Profile::load("tiny").expect("tiny"),
        addr,
        SimOptions {
            truth_dir: Some(truth_dir.path().to_path_buf()),
            replay: None,
        },
    )
    .await
    .expect("sim");
    let manifest = runner::record(&options(&sim.url(), &out), |_| {})
        .await
        .expect("recorded");
    let (stats, dropped) = sim.stop().expect("truth on");
    stats.expect("truth written");
    assert_eq!(dropped, 0);
    assert_complete(&manifest);
    assert_eq!(
        manifest.launch_command.as_deref(),
        Some("vllm serve m --api-key <redacted> --port 8000")
    );
    let mono_zero = manifest.clock.monotonic_at_zero_ns.expect("clock anchor");

    let truth_chunks =
        read_table::<TruthChunks>(&truth_dir.path().join("truth_chunks.parquet")).expect("truth");
    let truth_requests =
        read_table::<TruthRequests>(&truth_dir.path().join("truth_requests.parquet"))
            .expect("truth");
    let by_server_id: BTreeMap<&str, i64> = truth_requests
        .iter()
        .map(|r| (r.server_request_id.as_str(), r.request_id))
        .collect();
    let mut sent: BTreeMap<i64, Vec<(i32, Option<i32>, i64)>> = BTreeMap::new();
    for c in &truth_chunks {
        sent.entry(c.request_id)
            .or_default()
            .push((c.seq, c.tokens, c.written_ns));
    }
    let mut compared = 0;
    let mut delays = Vec::new();
    for (_, dir) in list_cells(&out).expect("cells") {
        let requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
        let chunks = read_table::<Chunks>(&dir.join("chunks.parquet")).expect("chunks");
        for r in &requests {
            let in_trace = chunks.iter().any(|c| c.request_id == r.request_id);
            let Some(sid) = r.server_request_id.as_deref() else {
                // Cancelled at window close before the response began: nothing to compare.
                assert!(r.end_reason == EndReason::Cancelled && !in_trace, "{r:?}");
                continue;
            };
            let sim_id = by_server_id
                .get(sid)
                .expect("the simulator logged the request");
            // A request cancelled before its first event was written has no events.
            let mut truth = sent.remove(sim_id).unwrap_or_default();
            truth.sort_unstable();
            let mut mine: Vec<_> = chunks
                .iter()
                .filter(|c| c.request_id == r.request_id)
                .collect();
            mine.sort_by_key(|c| c.seq);
            if matches!(r.end_reason, EndReason::FinishedLength) {
                assert_eq!(
                    mine.len(),
                    truth.len(),
                    "{sid}: every event the simulator sent was recorded"
                );
            } else {
                assert_eq!(r.end_reason, EndReason::Cancelled);
                assert!(mine.len() <= truth.len());
            }
            for (c, (seq, tokens, written)) in mine.iter().zip(&truth) {
                assert_eq!(c.seq, *seq);
                assert_eq!(
                    c.tokens.unwrap_or(0),
                    tokens.unwrap_or(0),
                    "{sid} seq {seq}"
                );
                let delay = c.arrival_ns - (written - mono_zero);
                assert!(
                    delay >= -50_000,
                    "{sid} seq {seq}: arrival before write by {delay} ns"
                );
                delays.push(delay);
                compared += 1;
            }
        }
    }
    assert!(
        sent.is_empty(),
        "requests the simulator served but the trace lacks: {}",
        sent.len()
    );
    // The capability probe is among them, recorded in the first cell.
    let first_cell = &list_cells(&out).expect("cells")[0].1;
    let probes = read_table::<Requests>(&first_cell.join("requests.parquet"))
        .expect("requests")
        .into_iter()
        .filter(|r| r.role == tokentrace_schemas::tables::Role::Probe)
        .count();
    assert_eq!(probes, 1);
    assert!(compared > 200, "{compared}");
    delays.sort_unstable();
    eprintln!(
        "arrival − write over {} events: p50 {} µs, p99 {} µs, max {} µs",
        delays.len(),
        delays[delays.len() / 2] / 1000,
        delays[delays.len() * 99 / 100] / 1000,
        delays[delays.len() - 1] / 1000
    );
}

/// The committed cells' files, by path relative to the run folder (so a copy of the run
/// compares equal).
pub(crate) fn files_of(run: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for (_, dir) in list_cells(run).expect("cells") {
        for entry in std::fs::read_dir(&dir).expect("dir") {
            let p = entry.expect("entry").path();
            let rel = p.strip_prefix(run).expect("inside the run");
            out.insert(rel.display().to_string(), std::fs::read(&p).expect("read"));
        }
    }
    out
}

/// Runs `tokentrace ARGS RUN` and asserts it succeeds, showing what it printed if not.
pub(crate) fn tokentrace_ok(args: &[&str], run: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(args)
        .arg(run)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn record_cmd(out: &Path, resume: bool) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokentrace"));
    cmd.args(["record", "--out"])
        .arg(out)
        .args([
            "--sim-profile",
            "tiny",
            "--contexts",
            "512,1K",
            "--concurrency",
            "1,2,3",
            "--duration",
            "700ms",
            "--max-tokens",
            "150",
        ])
        .env("OPENAI_API_KEY", "sk-tokentrace-test-secret-4242")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if resume {
        cmd.arg("--resume");
    }
    cmd
}

#[test]
fn a_killed_run_resumes_to_complete_and_keeps_committed_cells() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut child = record_cmd(&out, false).spawn().expect("spawn");
    // Kill it once two cells are committed (a moment that varies with the machine).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let committed = list_cells(&out).map(|c| c.len()).unwrap_or(0);
        if committed >= 2 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    let before = files_of(&out);
    assert!(!before.is_empty(), "cells were committed before the kill");
    let status = record_cmd(&out, true).status().expect("resume");
    assert!(status.success(), "resume ends the run");
    let m = Manifest::read(&out).expect("manifest");
    assert_complete(&m);
    assert_eq!(list_cells(&out).expect("cells").len(), 8);
    let after = files_of(&out);
    for (path, bytes) in &before {
        assert_eq!(after.get(path), Some(bytes), "{path} changed on resume");
    }

    // The API key was sent on every request; its bytes are in no file of the run.
    let secret = b"sk-tokentrace-test-secret-4242";
    let mut all: Vec<(String, Vec<u8>)> = after.into_iter().collect();
    all.push((
        "manifest.json".to_string(),
        std::fs::read(out.join("manifest.json")).expect("manifest"),
    ));
    for (_, dir) in list_cells(&out).expect("cells") {
        let mut raw = Vec::new();
        for f in RawReader::open(&dir.join("raw.sse.zst")).expect("raw") {
            raw.extend(f.expect("frame").bytes);
        }
        all.push((format!("{} (decompressed)", dir.display()), raw));
    }
    for (name, bytes) in &all {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret),
            "the API key is in {name}"
        );
    }
    let mut check = Command::new(env!("CARGO_BIN_EXE_tokentrace"));
    let mut child = check
        .arg("check")
        .arg(&out)
        .stdout(Stdio::piped())
        .spawn()
        .expect("check");
    let mut text = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut text)
        .expect("read");
    assert!(child.wait().expect("wait").success(), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_simulator_fault_is_recorded_with_its_end_reason() {
    let mut profile = Profile::load("tiny").expect("tiny");
    profile.faults.reset = 0.12;
    profile.faults.http_500 = 0.06;
    profile.faults.http_429 = 0.06;
    profile.faults.http_503 = 0.06;
    profile.faults.error_event = 0.15;
    profile.faults.malformed = 0.12;
    profile.faults.stall = 0.15;
    profile.faults.stall_seconds = 1.0;
    profile.faults.ping_seconds = 0.002;
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(profile, addr).await.expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&sim.url(), &out);
    opts.concurrency = vec![4];
    // Faults are drawn per simulator request id (deterministic); a few dozen requests
    // give every kind several times over.
    opts.window = Duration::from_secs(3);
    opts.stall_timeout = Duration::from_millis(400);
    // The probe itself may draw a fault; the run must go on regardless.
    let manifest = runner::record(&opts, |_| {})
        .await
        .expect("the run survives every fault");
    sim.stop();
    assert_complete(&manifest);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut statuses = std::collections::BTreeSet::new();
    let mut malformed = 0;
    let mut pings = 0;
    for (_, dir) in list_cells(&out).expect("cells") {
        for r in read_table::<Requests>(&dir.join("requests.parquet")).expect("requests") {
            *reasons.entry(r.end_reason.to_string()).or_default() += 1;
            if r.end_reason == EndReason::HttpError {
                statuses.insert(r.http_status.expect("status"));
                assert!(r.error.is_some());
            }
        }
        let chunks = read_table::<Chunks>(&dir.join("chunks.parquet")).expect("chunks");
        malformed += chunks
            .iter()
            .filter(|c| {
                c.error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("unreadable JSON"))
            })
            .count();
        pings += chunks
            .iter()
            .filter(|c| c.kind == tokentrace_schemas::tables::ChunkKind::Comment)
            .count();
    }
    eprintln!("end reasons: {reasons:?}");
    for reason in [
        "http_error",
        "disconnect",
        "stream_error",
        "stall_timeout",
        "finished_length",
        "cancelled",
    ] {
        assert!(
            reasons.contains_key(reason),
            "no `{reason}` among {reasons:?}"
        );
    }
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        vec![429, 500, 503]
    );
    assert!(
        malformed > 0 && pings > 0,
        "malformed {malformed}, pings {pings}"
    );
}

#[test]
fn ctrl_c_stops_cleanly_and_resume_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut child = record_cmd(&out, false).spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(120);
    while list_cells(&out).map(|c| c.len()).unwrap_or(0) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    let sent = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let status = child.wait().expect("wait");
    eprintln!("record after SIGINT: {status:?}");
    // Exit 130 when the signal came mid-run (or 0 if the run had just finished).
    let m = Manifest::read(&out).expect("manifest");
    if status.code() == Some(130) {
        let interrupted: Vec<_> = m
            .cells
            .iter()
            .filter(|c| c.status == CellStatus::Interrupted)
            .collect();
        assert!(interrupted.len() <= 1, "{:?}", m.cells);
        for c in interrupted {
            assert!(
                !c.key().dir(&out).exists(),
                "an interrupted cell is not under cells/"
            );
        }
    } else {
        assert_eq!(status.code(), Some(0));
    }
    assert!(record_cmd(&out, true).status().expect("resume").success());
    let m = Manifest::read(&out).expect("manifest");
    assert_complete(&m);
    assert!(!out.join(".staging").exists(), "no staging folder left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_or_unknown_model_stops_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let err = runner::record(&options("http://127.0.0.1:9", &out), |_| {})
        .await
        .expect_err("unreachable");
    assert!(
        err.to_string().contains("cannot reach") && err.to_string().contains("--target"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");

    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let mut opts = options(&sim.url(), &out);
    opts.model = Some("no-such-model".to_string());
    let err = runner::record(&opts, |_| {})
        .await
        .expect_err("unknown model");
    assert!(
        err.to_string().contains("sim-tiny") && err.to_string().contains("--model"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
    sim.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_prompts_are_exact_and_oversized_cells_are_skipped() {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&sim.url(), &out);
    opts.endpoint = Endpoint::Chat;
    opts.contexts = vec![700, 16_300];
    opts.concurrency = vec![2];
    opts.window = Duration::from_millis(400);
    let m = runner::record(&opts, |_| {}).await.expect("recorded");
    sim.stop();
    let statuses: Vec<(u32, CellStatus)> = m.cells.iter().map(|c| (c.context, c.status)).collect();
    assert_eq!(
        statuses,
        vec![
            (700, CellStatus::Complete),
            (700, CellStatus::Complete),
            (16_300, CellStatus::Skipped),
            (16_300, CellStatus::Skipped)
        ]
    );
    assert!(
        m.cells[2]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("max_model_len 16384"))
    );
    let mut with_usage = 0;
    for (_, dir) in list_cells(&out).expect("cells") {
        for r in read_table::<Requests>(&dir.join("requests.parquet")).expect("requests") {
            assert_eq!(r.endpoint, Endpoint::Chat);
            if r.role == tokentrace_schemas::tables::Role::Probe {
                continue;
            }
            assert_eq!(r.prompt_tokens_requested, 700);
            // A request cancelled before its first event has no usage to compare.
            if let Some(server) = r.prompt_tokens_server {
                assert_eq!(server, 700, "exact chat prompt");
                with_usage += 1;
            }
        }
    }
    assert!(with_usage >= 3, "{with_usage} requests reported usage");
}

/// Every `.staging/**/cell.json` under `run` (a commit between its mark and its rename).
fn staged_marks(run: &Path) -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.file_name().is_some_and(|n| n == "cell.json") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&run.join(".staging"), &mut out);
    out
}

/// The manifest says what is on disk: a cell is complete exactly when its folder holds
/// a commit mark, and no staging folder is left.
pub(crate) fn assert_manifest_matches_disk(run: &Path) {
    let m = Manifest::read(run).expect("manifest");
    for c in &m.cells {
        let on_disk = c.key().dir(run).join("cell.json").exists();
        assert_eq!(
            c.status == CellStatus::Complete,
            on_disk,
            "{}: manifest says {:?}, folder committed: {on_disk}",
            c.key(),
            c.status
        );
    }
    assert!(!run.join(".staging").exists(), "no staging folder left");
}

#[test]
fn ctrl_c_during_a_commit_lets_it_finish_and_the_manifest_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    // Each commit holds 1.5 s between its mark and its rename: the signal lands inside.
    let mut child = record_cmd(&out, false)
        .env("TOKENTRACE_TEST_COMMIT_DELAY_MS", "1500")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(120);
    while staged_marks(&out).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        !staged_marks(&out).is_empty(),
        "a commit was seen under way"
    );
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let status = child.wait().expect("wait");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("its commit finished before the stop; kept"),
        "{err}"
    );
    assert_manifest_matches_disk(&out);
    let m = Manifest::read(&out).expect("manifest");
    assert!(
        m.cells.iter().any(|c| c.status == CellStatus::Complete),
        "{:?}",
        m.cells
    );
    assert!(record_cmd(&out, true).status().expect("resume").success());
    assert_complete(&Manifest::read(&out).expect("manifest"));
    assert_manifest_matches_disk(&out);
}

#[test]
fn resume_of_a_folder_killed_before_its_manifest_starts_afresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    // What a kill -9 leaves before the manifest: the folder, and empty staging folders.
    std::fs::create_dir_all(out.join(".staging/phase=decode/context=512")).expect("mkdir");
    assert!(record_cmd(&out, true).status().expect("resume").success());
    assert_complete(&Manifest::read(&out).expect("manifest"));
    assert_manifest_matches_disk(&out);
}

/// With `--skip-over-capacity`, a cell whose prompts take more KV cache than the engine
/// reports (tiny: 20,000 tokens) is skipped before any request, the reason in the
/// manifest; the others run. Without the flag the same cell runs.
#[test]
fn cells_over_the_kv_budget_are_skipped_when_asked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (name, skip) in [("skip", true), ("run", false)] {
        let out = tmp.path().join(name);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokentrace"));
        cmd.args(["record", "--out"]).arg(&out).args([
            "--sim-profile",
            "tiny",
            "--contexts",
            "512,1K",
            "--concurrency",
            "1,20",
            "--duration",
            "300ms",
            "--max-tokens",
            "20",
            "--gpu-telemetry",
            "off",
        ]);
        if skip {
            cmd.arg("--skip-over-capacity");
        }
        let done = cmd.output().expect("record");
        // A run with skipped cells ends with exit code 3.
        assert_eq!(
            done.status.code(),
            Some(if skip { 3 } else { 0 }),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
        let m = Manifest::read(&out).expect("manifest");
        let over = m
            .cells
            .iter()
            .find(|c| c.context == 1024 && c.concurrency == 20)
            .expect("the 1K × 20 cell");
        let others_complete = m
            .cells
            .iter()
            .filter(|c| !(c.context == 1024 && c.concurrency == 20))
            .all(|c| c.status == CellStatus::Complete);
        assert!(others_complete, "{:?}", m.cells);
        if skip {
            assert_eq!(over.status, CellStatus::Skipped);
            assert_eq!(
                over.reason.as_deref(),
                Some(
                    "context 1024 × 20 streams needs 20480 tokens of KV cache; the server has \
                     20000 (metrics vllm:cache_config_info) and --skip-over-capacity is set"
                )
            );
        } else {
            assert_eq!(over.status, CellStatus::Complete, "{over:?}");
        }
    }
}

/// `--plan` probes the server and prints what the command line would record and skip,
/// with the reason, and writes nothing: the KV-capacity plan before any GPU time.
#[test]
fn a_plan_lists_the_cells_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("planned");
    let done = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["record", "--out"])
        .arg(&out)
        .args([
            "--sim-profile",
            "tiny",
            "--contexts",
            "512,1K",
            "--concurrency",
            "1,20",
            "--max-tokens",
            "20",
            "--mode",
            "matrix,burst",
            "--gpu-telemetry",
            "off",
            "--skip-over-capacity",
            "--plan",
        ])
        .output()
        .expect("record --plan");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(!out.exists(), "--plan wrote {}", out.display());
    let said = String::from_utf8_lossy(&done.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 11, "{said}");
    assert!(
        lines.contains(&"record  prefill context=512 concurrency=1"),
        "{said}"
    );
    assert!(
        lines.contains(&"record  burst context=1024 concurrency=1"),
        "{said}"
    );
    for phase in ["decode", "burst"] {
        let skip = format!(
            "skip    {phase} context=1024 concurrency=20: context 1024 × 20 streams needs 20480 \
             tokens of KV cache; the server has 20000 (metrics vllm:cache_config_info) and \
             --skip-over-capacity is set"
        );
        assert!(lines.contains(&skip.as_str()), "{said}");
    }
    assert_eq!(
        lines.last(),
        Some(&"10 cells: 8 to record, 2 skipped (nothing was recorded: --plan)")
    );
}

/// Ctrl-C during a rate cell whose dispatcher is sleeping between arrivals (0.5 requests
/// per second): the run stops at once, without a panic, and the cell is left for
/// `--resume` (the dispatcher thread sees its cell gone within a slice).
#[test]
fn ctrl_c_stops_a_rate_cell_between_arrivals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let child = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["record", "--out"])
        .arg(&out)
        .args([
            "--sim-profile",
            "tiny",
            "--contexts",
            "256",
            "--rates",
            "0.5",
            "--rate-requests",
            "20",
            "--max-tokens",
            "8",
            "--gpu-telemetry",
            "off",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // The cell is recording once its staging folder holds a request table.
    let deadline = Instant::now() + Duration::from_secs(60);
    let staged = out.join(".staging/phase=rate/context=256/rate=0.5/requests.parquet");
    while !staged.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(staged.exists(), "the rate cell never started");
    std::thread::sleep(Duration::from_millis(500));
    let stopped_at = Instant::now();
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let output = child.wait_with_output().expect("wait");
    let took = stopped_at.elapsed();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Well under the runtime's 5 s wait for blocking threads at exit, which a dispatcher
    // asleep until its next arrival would run into.
    assert!(took < Duration::from_secs(3), "exit took {took:?}: {err}");
    let m = Manifest::read(&out).expect("manifest");
    assert_eq!(m.cells[0].status, CellStatus::Interrupted, "{:?}", m.cells);
    assert!(!m.cells[0].key().dir(&out).exists());
}

/// A resumed run keeps the settings it was recorded with (metrics interval, timeouts,
/// prompt tolerance), whatever the resuming command line says, and says so: every cell
/// of the run is measured alike, and its manifest stays true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_keeps_the_settings_it_was_recorded_with() {
    use tokentrace_schemas::tables::{EventKind, Events, Metrics};
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&sim.url(), &out);
    opts.contexts = vec![256];
    opts.concurrency = vec![1, 2];
    opts.window = Duration::from_millis(1500);
    opts.max_tokens = 16;
    opts.scrape_interval = Duration::from_millis(200);
    runner::record(&opts, |_| {}).await.expect("recorded");
    // Lose the last cell, as a crash inside it would: planned again, its folder gone.
    let mut m = Manifest::read(&out).expect("manifest");
    let last = m.cells.last_mut().expect("cells");
    last.status = CellStatus::Planned;
    let lost = last.key();
    std::fs::remove_dir_all(lost.dir(&out)).expect("remove the cell");
    m.write(&out).expect("manifest");

    let mut again = opts.clone();
    again.resume = true;
    again.scrape_interval = Duration::from_secs(5);
    again.stall_timeout = Duration::from_secs(7);
    let lines = std::sync::Mutex::new(Vec::new());
    runner::record(&again, |p| {
        if let session::Progress::Line(l) = p
            && let Ok(mut v) = lines.lock()
        {
            v.push(l);
        }
    })
    .await
    .expect("resumed");
    sim.stop();
    let lines = lines.into_inner().expect("lines");
    for said in [
        "--metrics-interval 5s: the run was recorded with 200ms, which it keeps",
        "--stall-timeout 7s: the run was recorded with 30s, which it keeps",
    ] {
        assert!(lines.iter().any(|l| l == said), "{said}: {lines:#?}");
    }
    // The cell recorded again was scraped every 200 ms inside its window, not every 5 s.
    let cell = lost.dir(&out);
    let events = read_table::<Events>(&cell.join("events.parquet")).expect("events");
    let at = |k: EventKind| events.iter().find(|e| e.kind == k).expect("event").time_ns;
    let (open, close) = (at(EventKind::WindowOpen), at(EventKind::WindowClose));
    let mut scrapes: Vec<i64> = read_table::<Metrics>(&cell.join("metrics.parquet"))
        .expect("metrics")
        .iter()
        .filter(|r| r.name == "vllm:num_requests_running")
        .map(|r| r.scrape_start_ns)
        .filter(|t| (open..close).contains(t))
        .collect();
    scrapes.dedup();
    assert!(
        scrapes.len() >= 4,
        "{} scrapes inside the window",
        scrapes.len()
    );
    let m = Manifest::read(&out).expect("manifest");
    assert_eq!(m.config.scrape_interval_ns, 200_000_000);
    assert!(m.cells.iter().all(|c| c.status == CellStatus::Complete));
}

/// `--max-concurrency` caps a rate cell's requests in flight: every request of an `inf`
/// schedule is due at once, at most 2 run at a time, and the wait for a place shows as
/// schedule lag (sent − scheduled), which the analyzer reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_caps_a_rate_cell_and_the_wait_is_lag() {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&sim.url(), &out);
    opts.contexts = vec![256];
    opts.max_tokens = 32;
    opts.modes = vec![session::Mode::Rate];
    opts.rate = Some(tokentrace_schemas::manifest::RateConfig {
        rates: vec![tokentrace_schemas::Rate::INF],
        arrival: tokentrace_schemas::schedule::Arrival::Poisson,
        seed: 0,
        requests: Some(12),
        duration_ns: None,
        max_concurrency: Some(2),
    });
    runner::record(&opts, |_| {}).await.expect("recorded");
    sim.stop();
    let (_, cell) = list_cells(&out)
        .expect("cells")
        .into_iter()
        .next()
        .expect("cell");
    let rows = read_table::<Requests>(&cell.join("requests.parquet")).expect("requests");
    let measured: Vec<_> = rows
        .iter()
        .filter(|r| r.role == tokentrace_schemas::tables::Role::Measured)
        .collect();
    assert_eq!(measured.len(), 12);
    // All due at once …
    assert!(
        measured
            .iter()
            .all(|r| r.scheduled_ns == measured[0].scheduled_ns)
    );
    // … at most 2 in flight at any moment (from a connection obtained to the end) …
    let mut marks: Vec<(i64, i32)> = measured
        .iter()
        .flat_map(|r| {
            [
                (r.connection_ns.expect("connected"), 1),
                (r.end_ns.expect("ended"), -1),
            ]
        })
        .collect();
    marks.sort_unstable_by_key(|&(t, d)| (t, d));
    let (mut now, mut most) = (0, 0);
    for (_, d) in marks {
        now += d;
        most = most.max(now);
    }
    assert_eq!(most, 2, "requests in flight at once");
    // … and the later ones waited for a place: their lag is whole requests long.
    let s = tokentrace_analyzer::score_dir(
        &out,
        &tokentrace_analyzer::RuleSet::builtin("default").expect("rules"),
    )
    .expect("scored");
    let f = s.cells[0].figures.as_ref().expect("figures");
    let (lag_max, e2e_median) = (
        f.schedule_lag_ms.max.expect("lag"),
        f.e2e_latency_ms.median.expect("e2e"),
    );
    assert!(
        lag_max > 4.0 * e2e_median,
        "lag max {lag_max} ms, E2E median {e2e_median} ms"
    );
}

/// A decode cell's drain believes no single idle scrape (vLLM publishes its gauges after
/// each engine step, so a request still in its first step reads as idle): it ends on two
/// idle scrapes `DRAIN_QUIET` apart whose token counters agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_ends_on_two_idle_scrapes_a_quiet_interval_apart() {
    use tokentrace_recorder::store::cell::DRAIN_QUIET;
    use tokentrace_schemas::Phase;
    use tokentrace_schemas::tables::{EventKind, Events, Metrics};
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&sim.url(), &out);
    opts.contexts = vec![256];
    opts.concurrency = vec![1, 2];
    opts.window = Duration::from_millis(1000);
    opts.max_tokens = 64;
    runner::record(&opts, |_| {}).await.expect("recorded");
    sim.stop();
    let mut decode = 0;
    for (key, cell) in list_cells(&out).expect("cells") {
        if key.phase != Phase::Decode {
            continue;
        }
        decode += 1;
        let events = read_table::<Events>(&cell.join("events.parquet")).expect("events");
        let at = |k: EventKind| events.iter().find(|e| e.kind == k).expect("event").time_ns;
        let (start, end) = (at(EventKind::DrainStart), at(EventKind::DrainEnd));
        let metrics = read_table::<Metrics>(&cell.join("metrics.parquet")).expect("metrics");
        // (scrape start, running + waiting, prompt + generated tokens) of each scrape
        // inside the drain.
        let mut scrapes: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
        for r in metrics
            .iter()
            .filter(|r| (start..=end).contains(&r.scrape_start_ns))
        {
            let s = scrapes.entry(r.scrape_start_ns).or_default();
            match r.name.as_str() {
                "vllm:num_requests_running" | "vllm:num_requests_waiting" => s.0 += r.value,
                "vllm:prompt_tokens_total" | "vllm:generation_tokens_total" => s.1 += r.value,
                _ => {}
            }
        }
        // The cell's own scraper goes on beside the drain: counted back from the last
        // scrape, the idle run with unmoved counters spans the quiet interval.
        let (&t1, &last) = scrapes.last_key_value().expect("a scrape in the drain");
        assert!(last.0 == 0.0 && last.1 > 0.0, "{key}: {scrapes:?}");
        let quiet_from = scrapes
            .iter()
            .rev()
            .take_while(|(_, s)| **s == last)
            .last()
            .map_or(t1, |(t, _)| *t);
        assert!(
            u128::try_from(t1 - quiet_from).expect("ordered") >= DRAIN_QUIET.as_nanos(),
            "{key}: the drain ended without two quiet scrapes {DRAIN_QUIET:?} apart: {scrapes:?}"
        );
    }
    assert_eq!(decode, 2);
}
