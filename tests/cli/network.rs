//! A hostile network between the recorder and the simulator: a fault proxy
//! (testkit's `netfault`) adds latency and jitter, a bandwidth cap, burst buffering,
//! resets, half-open links, stalls, a refusal window, 1-byte segments and idle closes.
//! Nothing hangs, every sent request ends once with the reason its fault calls for, and
//! committed cells stay as they were.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use tokentrace_recorder::store::cell::SCRAPE_TIMEOUT;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{
    ChunkRow, Chunks, EndReason, EventKind, EventRow, Events, RequestRow, Requests,
};
use tokentrace_testkit::netfault::{Fault, FaultProxy, Hit, Plan};

use crate::misbehave::{finish, free_port, sim, wait_listening};

/// The stall timeout of every recording of the simulator here.
const STALL: Duration = Duration::from_secs(3);
/// The stall timeout of the recordings of a real llama.cpp server: on a loaded CI box a
/// CPU prefill can go quiet for more than 3 s, which is the server's pause, not the
/// network's.
const REAL_STALL: Duration = Duration::from_secs(30);
/// The drain limit of every recording here.
const DRAIN: Duration = Duration::from_secs(5);

/// A simulator process, killed when dropped.
struct Sim(Child, String);

impl Sim {
    fn start() -> Sim {
        let listen = format!("127.0.0.1:{}", free_port());
        let child = sim(&listen);
        wait_listening(&listen);
        Sim(child, listen)
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.1.parse().expect("an address")
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One recording through the proxy.
struct Recorded {
    run: PathBuf,
    code: Option<i32>,
    log: String,
    proxy: FaultProxy,
}

impl Recorded {
    fn requests(&self) -> Vec<RequestRow> {
        cells(&self.run)
            .iter()
            .flat_map(|d| read_table::<Requests>(&d.join("requests.parquet")).expect("requests"))
            .collect()
    }

    fn chunks(&self) -> Vec<ChunkRow> {
        cells(&self.run)
            .iter()
            .flat_map(|d| read_table::<Chunks>(&d.join("chunks.parquet")).expect("chunks"))
            .collect()
    }

    /// Faults of the proxy's log that `f` picks.
    fn hit(&self, f: impl Fn(&Hit) -> bool) -> usize {
        self.proxy.hits().iter().filter(|(_, h)| f(h)).count()
    }

    /// The requests that ended for `reason`.
    fn ended(&self, reason: EndReason) -> Vec<RequestRow> {
        self.requests()
            .into_iter()
            .filter(|q| q.end_reason == reason)
            .collect()
    }

    /// Asserts that every request ended for one of `allowed`.
    fn only_ended(&self, allowed: &[EndReason]) {
        for q in self.requests() {
            assert!(
                allowed.contains(&q.end_reason),
                "request {}: {:?} {:?}",
                q.request_id,
                q.end_reason,
                q.error
            );
        }
    }

    fn reasons(&self) -> BTreeMap<EndReason, usize> {
        let mut m = BTreeMap::new();
        for r in self.requests() {
            *m.entry(r.end_reason).or_insert(0) += 1;
        }
        m
    }
}

fn cells(run: &Path) -> Vec<PathBuf> {
    list_cells(run)
        .expect("cells")
        .into_iter()
        .map(|(_, d)| d)
        .collect()
}

/// Records the tiny simulator through a proxy with `plan`: contexts 512, the
/// concurrencies and window given, `extra` arguments after.
fn record_through(dir: &Path, name: &str, plan: Plan, extra: &[&str]) -> Recorded {
    let server = Sim::start();
    let r = record_via(dir, name, server.addr(), plan, STALL, extra);
    drop(server);
    r
}

/// Records the server at `upstream` through a proxy with `plan`, giving up on a stream
/// after `stall` without a byte.
fn record_via(
    dir: &Path,
    name: &str,
    upstream: std::net::SocketAddr,
    plan: Plan,
    stall: Duration,
    extra: &[&str],
) -> Recorded {
    let proxy = FaultProxy::start(upstream, plan).expect("proxy");
    let run = dir.join(name);
    let target = format!("http://{}", proxy.addr());
    let stall = format!("{}s", stall.as_secs());
    let drain = format!("{}s", DRAIN.as_secs());
    let mut args = vec![
        "--target",
        &target,
        "--stall-timeout",
        &stall,
        "--drain-timeout",
        &drain,
    ];
    args.extend_from_slice(extra);
    let child = crate::misbehave::record(&run, &args)
        .spawn()
        .expect("record");
    let (code, log) = finish(child, Duration::from_secs(180));
    Recorded {
        run,
        code,
        log,
        proxy,
    }
}

/// What holds under every fault: the recorder ended on its own with each cell complete
/// or failed with a reason; every request in the trace has one row (no duplicate id, no
/// chunk without its request); each cell ended within its window plus its drain and
/// stall limits; the run checks sound.
fn accounted(r: &Recorded, window: Duration) {
    assert!(
        matches!(r.code, Some(0 | 1)),
        "exit {:?}\n{}",
        r.code,
        r.log
    );
    let m = Manifest::read(&r.run).expect("manifest");
    for c in &m.cells {
        match c.status {
            CellStatus::Complete => {}
            CellStatus::Failed => assert!(c.reason.is_some(), "{c:?}"),
            other => panic!("{}: {other:?}\n{}", c.key(), r.log),
        }
    }
    let requests = r.requests();
    let ids: BTreeSet<i64> = requests.iter().map(|q| q.request_id).collect();
    assert_eq!(ids.len(), requests.len(), "a request id twice\n{}", r.log);
    let orphans: BTreeSet<i64> = r
        .chunks()
        .iter()
        .map(|c| c.request_id)
        .filter(|id| !ids.contains(id))
        .collect();
    assert!(orphans.is_empty(), "chunks of no request: {orphans:?}");
    for q in &requests {
        assert!(q.end_ns.is_some(), "request {} never ended", q.request_id);
    }
    for dir in cells(&r.run) {
        let events = read_table::<Events>(&dir.join("events.parquet")).expect("events");
        let at = |k: EventKind| {
            events
                .iter()
                .find(|e| e.kind == k)
                .map(|e: &EventRow| e.time_ns)
        };
        if let (Some(open), Some(close)) = (at(EventKind::WindowOpen), at(EventKind::WindowClose)) {
            let limit = window + Duration::from_secs(1);
            assert!(
                close - open <= limit.as_nanos() as i64,
                "{}: window {} ms",
                dir.display(),
                (close - open) / 1_000_000
            );
            if let Some(end) = at(EventKind::CellEnd) {
                // The last scrape of the window, the drain, the writer's end.
                let limit = DRAIN + SCRAPE_TIMEOUT + Duration::from_secs(2);
                assert!(
                    end - close <= limit.as_nanos() as i64,
                    "{}: {} ms from window close to the cell's end",
                    dir.display(),
                    (end - close) / 1_000_000
                );
            }
        }
    }
    crate::record::tokentrace_ok(&["check"], &r.run);
}

/// The decode cells' requests that ran in the window (not the probe's or a scout's).
fn finished(r: &Recorded) -> usize {
    r.requests()
        .iter()
        .filter(|q| {
            matches!(
                q.end_reason,
                EndReason::FinishedLength | EndReason::FinishedStop
            )
        })
        .count()
}

const DECODE: &[&str] = &[
    "--concurrency",
    "2",
    "--duration",
    "2s",
    "--max-tokens",
    "64",
];

#[test]
fn latency_and_jitter_delay_every_response_and_lose_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fault = Fault::Latency {
        base: Duration::from_millis(50),
        jitter: Duration::from_millis(30),
    };
    let r = record_through(tmp.path(), "latency", Plan::every(fault, 7), DECODE);
    accounted(&r, Duration::from_secs(2));
    assert!(finished(&r) > 0, "{:?}\n{}", r.reasons(), r.log);
    // Every first token came at least base - jitter after the request went out.
    for q in r.requests() {
        if let (Some(sent), Some(first)) = (q.sent_ns, q.first_token_ns) {
            assert!(
                first - sent >= 20_000_000,
                "request {}: TTFT {} ns",
                q.request_id,
                first - sent
            );
        }
    }
}

#[test]
fn a_bandwidth_cap_slows_a_long_stream_and_loses_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rate = 16 * 1024;
    let fault = Fault::Bandwidth { bytes_per_s: rate };
    let args = [
        "--concurrency",
        "1",
        "--duration",
        "3s",
        "--max-tokens",
        "400",
    ];
    let r = record_through(tmp.path(), "bandwidth", Plan::every(fault, 7), &args);
    accounted(&r, Duration::from_secs(3));
    // No request received faster than the cap (its bytes over its first to last chunk).
    let chunks = r.chunks();
    let mut by_request: BTreeMap<i64, (i64, i64, i64)> = BTreeMap::new();
    for c in &chunks {
        let e = by_request
            .entry(c.request_id)
            .or_insert((c.arrival_ns, c.arrival_ns, 0));
        e.0 = e.0.min(c.arrival_ns);
        e.1 = e.1.max(c.arrival_ns);
        e.2 += i64::from(c.bytes);
    }
    let mut long = 0;
    for (id, (first, last, bytes)) in by_request {
        if last - first > 500_000_000 {
            long += 1;
            let per_s = bytes as f64 / ((last - first) as f64 / 1e9);
            assert!(per_s < rate as f64 * 1.25, "request {id}: {per_s:.0} B/s");
        }
    }
    assert!(long > 0, "no stream ran long enough to measure\n{}", r.log);
}

#[test]
fn bursts_every_500_ms_arrive_as_bursts_and_lose_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fault = Fault::Burst {
        every: Duration::from_millis(500),
    };
    let r = record_through(tmp.path(), "burst", Plan::every(fault, 7), DECODE);
    accounted(&r, Duration::from_secs(2));
    assert!(finished(&r) > 0, "{:?}\n{}", r.reasons(), r.log);
    // Most events share their read with several others.
    let chunks = r.chunks();
    let reads = reads_of(&chunks);
    let in_bursts: usize = reads.values().filter(|n| **n >= 4).sum();
    assert!(
        in_bursts * 2 > chunks.len(),
        "{in_bursts} of {} events in reads of 4 or more",
        chunks.len()
    );
    // The scoring says so: the decode cell warns that the network re-chunked its
    // streams (class `buffering`), and its TTFT and time between tokens leave them out
    // while total tok/s counts their tokens.
    let scoring = scoring_under(&r.run, "default");
    let decode = decode_cell(&scoring);
    let warning = decode["warnings"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["kind"] == "rechunked"))
        .unwrap_or_else(|| panic!("no rechunked warning: {decode:#}"));
    assert_eq!(warning["fault"], "buffering");
    assert_eq!(warning["excluded_from_latency"], true);
    let flagged = warning["requests"].as_array().map_or(0, Vec::len)
        + warning["more"].as_u64().unwrap_or(0) as usize;
    let of = warning["of"].as_u64().unwrap_or(0) as usize;
    assert!(flagged > 0 && flagged == of, "{warning:#}");
    assert!(warning["mean_events_per_read"].as_f64().unwrap_or(0.0) >= 8.0);
    // The simulator's own pace is in the evidence, from its metrics.
    let server = warning["server_token_interval_ms"].as_f64().unwrap_or(0.0);
    assert!(server > 0.0, "{warning:#}");
    let figures = &decode["figures"];
    assert_eq!(figures["ttft_ms"]["n"], 0, "{figures:#}");
    assert_eq!(figures["time_between_tokens_ms"]["n"], 0, "{figures:#}");
    assert_eq!(figures["itl_ms"]["n"], 0, "{figures:#}");
    assert!(figures["total_tok_s"].as_f64().unwrap_or(0.0) > 0.0);
    // Under the rules before 1.7.0 the same run is scored as it was, unwarned.
    let before = scoring_under(&r.run, "default@1.6.0");
    let decode = decode_cell(&before);
    assert!(
        decode["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().all(|w| w["kind"] != "rechunked")),
        "{decode:#}"
    );
    assert!(decode["figures"]["ttft_ms"]["n"].as_u64().unwrap_or(0) > 0);
}

/// The JSON scoring of a run under `rules`.
fn scoring_under(run: &Path, rules: &str) -> serde_json::Value {
    let run = run.to_str().expect("utf-8");
    let (code, out, err) =
        crate::report::tokentrace(&["report", "--format", "json", "--rules", rules, run]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("the scoring")
}

/// Events per (request, read): the events of one read share their arrival time.
fn reads_of(chunks: &[ChunkRow]) -> BTreeMap<(i64, i64), usize> {
    let mut reads = BTreeMap::new();
    for c in chunks {
        *reads.entry((c.request_id, c.arrival_ns)).or_insert(0) += 1;
    }
    reads
}

/// The cells of a scoring (of `phase`, or all) that warn of re-chunked streams.
fn rechunk_warned(scoring: &serde_json::Value, phase: Option<&str>) -> usize {
    scoring["cells"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| phase.is_none_or(|p| c["phase"] == p))
        .filter(|c| {
            c["warnings"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w["kind"] == "rechunked"))
        })
        .count()
}

/// The (one) decode cell of a scoring.
fn decode_cell(scoring: &serde_json::Value) -> &serde_json::Value {
    scoring["cells"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["phase"] == "decode"))
        .expect("a decode cell")
}

#[test]
fn a_reset_mid_stream_ends_its_request_as_a_disconnect() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fault = Fault::Reset { after: (400, 4000) };
    let r = record_through(tmp.path(), "reset", Plan::streams(fault, 0.5, 11), DECODE);
    accounted(&r, Duration::from_secs(2));
    let resets = r.hit(|h| matches!(h, Hit::Reset(_)));
    assert!(resets > 0, "the proxy reset nothing");
    let cut: Vec<RequestRow> = r.ended(EndReason::Disconnect);
    assert!(!cut.is_empty(), "{:?}\n{}", r.reasons(), r.log);
    for q in &cut {
        let e = q.error.as_deref().unwrap_or("");
        assert!(
            e.contains("reset") || e.contains("closed"),
            "request {}: {e}",
            q.request_id
        );
    }
    assert!(finished(&r) > 0, "{:?}", r.reasons());
    r.only_ended(&[
        EndReason::FinishedLength,
        EndReason::FinishedStop,
        EndReason::Disconnect,
        EndReason::Cancelled,
    ]);
}

/// A link that resets every connection at once: the recorder says it cannot reach the
/// server (after retrying its calls), not that the server lacks an endpoint.
#[test]
fn a_link_that_resets_everything_is_named_as_unreachable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fault = Fault::Reset { after: (0, 0) };
    let r = record_through(tmp.path(), "dead", Plan::every(fault, 1), DECODE);
    assert_eq!(r.code, Some(1), "{}", r.log);
    assert!(r.log.contains("cannot reach"), "{}", r.log);
    assert!(!r.log.contains("has no /"), "{}", r.log);
    assert!(r.proxy.accepted() >= 4, "the calls were tried again");
}

#[test]
fn a_half_open_link_ends_its_request_at_the_stall_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fault = Fault::HalfOpen { after: (400, 4000) };
    let plan = Plan::streams(fault, 0.5, 5);
    let r = record_through(tmp.path(), "half-open", plan, DECODE);
    accounted(&r, Duration::from_secs(2));
    let held = r.hit(|h| matches!(h, Hit::HalfOpen(_)));
    assert!(held > 0, "the proxy held nothing");
    let stalled: Vec<RequestRow> = r.ended(EndReason::StallTimeout);
    assert!(!stalled.is_empty(), "{:?}\n{}", r.reasons(), r.log);
    for q in &stalled {
        let e = q.error.as_deref().unwrap_or("");
        assert!(
            e.contains("no byte for 3s"),
            "request {}: {e}",
            q.request_id
        );
    }
}

#[test]
fn a_ten_second_stall_is_a_stall_timeout_and_the_cell_ends_in_bounds() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // After some tokens (a stall before the first token is a refusal, paced and given up
    // on after 16 in a row, as a refusing server's).
    let fault = Fault::Stall {
        after: (2000, 4000),
        pause: Duration::from_secs(10),
    };
    // A window longer than the stall timeout, so that a stall inside it outlasts it.
    let args = [
        "--concurrency",
        "2",
        "--duration",
        "6s",
        "--max-tokens",
        "64",
    ];
    let r = record_through(tmp.path(), "stall", Plan::streams(fault, 1.0, 3), &args);
    accounted(&r, Duration::from_secs(6));
    let stalled = r.hit(|h| matches!(h, Hit::Stalled(_)));
    assert!(stalled > 0, "the proxy stalled nothing");
    let reasons = r.reasons();
    assert!(
        reasons.get(&EndReason::StallTimeout).copied().unwrap_or(0) > 0,
        "{reasons:?}\n{}",
        r.log
    );
    for q in r.requests() {
        if q.end_reason == EndReason::StallTimeout {
            let e = q.error.as_deref().unwrap_or("");
            assert!(
                e.contains("no byte for 3s"),
                "request {}: {e}",
                q.request_id
            );
        }
    }
}

#[test]
fn connections_refused_for_five_seconds_are_paced_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fault = Fault::Refuse {
        at: Duration::from_secs(3),
        down: Duration::from_secs(5),
    };
    let args = ["--concurrency", "1,2,3", "--duration", "3s"];
    let r = record_through(tmp.path(), "refused", Plan::every(fault, 1), &args);
    accounted(&r, Duration::from_secs(3));
    assert_eq!(r.proxy.refusals(), 1);
    let refused: Vec<RequestRow> = r
        .requests()
        .into_iter()
        .filter(|q| {
            q.error
                .as_deref()
                .is_some_and(|e| e.contains("cannot connect"))
        })
        .collect();
    assert!(!refused.is_empty(), "{:?}\n{}", r.reasons(), r.log);
    for q in &refused {
        assert_eq!(
            q.end_reason,
            EndReason::Disconnect,
            "request {}",
            q.request_id
        );
        assert!(q.first_token_ns.is_none());
    }
    // The refusals were paced (a capped backoff), not a tight loop of connects.
    assert!(refused.len() < 40, "{} refused requests", refused.len());
    let m = Manifest::read(&r.run).expect("manifest");
    assert_eq!(
        m.cells.last().map(|c| c.status),
        Some(CellStatus::Complete),
        "the matrix carried on\n{}",
        r.log
    );
}

#[test]
fn one_byte_segments_are_reassembled_exactly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let args = [
        "--concurrency",
        "1",
        "--duration",
        "2s",
        "--max-tokens",
        "16",
    ];
    let r = record_through(
        tmp.path(),
        "one-byte",
        Plan::every(Fault::OneByte, 1),
        &args,
    );
    accounted(&r, Duration::from_secs(2));
    let requests = r.requests();
    let done: Vec<&RequestRow> = requests
        .iter()
        .filter(|q| q.end_reason == EndReason::FinishedLength)
        .collect();
    assert!(!done.is_empty(), "{:?}\n{}", r.reasons(), r.log);
    let chunks = r.chunks();
    for q in done {
        let tokens: i64 = chunks
            .iter()
            .filter(|c| c.request_id == q.request_id)
            .filter_map(|c| c.tokens)
            .map(i64::from)
            .sum();
        assert_eq!(Some(tokens), q.completion_tokens_server.map(i64::from));
    }
}

#[test]
fn idle_kept_alive_connections_closed_between_requests_are_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fault = Fault::IdleClose {
        idle: Duration::from_millis(600),
    };
    // An open-loop cell at 1 request a second: the gaps outlast the idle limit.
    let args = [
        "--mode",
        "rate",
        "--rates",
        "1",
        "--arrival",
        "constant",
        "--rate-requests",
        "6",
        "--max-tokens",
        "64",
    ];
    let r = record_through(tmp.path(), "idle", Plan::every(fault, 1), &args);
    assert!(matches!(r.code, Some(0)), "exit {:?}\n{}", r.code, r.log);
    accounted(&r, Duration::from_secs(60));
    let closed = r.hit(|h| matches!(h, Hit::IdleClosed));
    assert!(closed > 0, "the proxy closed nothing");
    let requests = r.requests();
    let new_connections = requests
        .iter()
        .filter(|q| q.connect_start_ns.is_some())
        .count();
    let retried = requests
        .iter()
        .filter(|q| q.retries.is_some_and(|n| n > 0))
        .count();
    assert!(new_connections + retried > 1, "{requests:?}");
    // Every request still finished: a closed idle connection costs a reconnect, not a
    // request.
    let chunks = r.chunks();
    for q in &requests {
        let arrivals: Vec<i64> = chunks
            .iter()
            .filter(|c| c.request_id == q.request_id)
            .map(|c| (c.arrival_ns - q.sent_ns.unwrap_or(0)) / 1_000_000)
            .collect();
        assert!(
            matches!(
                q.end_reason,
                EndReason::FinishedLength | EndReason::FinishedStop
            ),
            "request {}: {:?} {:?}, events at {arrivals:?} ms",
            q.request_id,
            q.end_reason,
            q.error
        );
    }
}

#[test]
fn committed_cells_stay_byte_identical_when_a_later_cell_meets_a_fault() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The refusal window opens 6 s after the first connection: during the last cells.
    let fault = Fault::Refuse {
        at: Duration::from_secs(6),
        down: Duration::from_secs(5),
    };
    let server = Sim::start();
    let proxy = FaultProxy::start(server.addr(), Plan::every(fault, 1)).expect("proxy");
    let run = tmp.path().join("run");
    let target = format!("http://{}", proxy.addr());
    let child = crate::misbehave::record(
        &run,
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
            "64",
        ],
    )
    .spawn()
    .expect("record");
    // Copy each committed cell as soon as it commits, before the window opens.
    let mut first: BTreeMap<PathBuf, Vec<(PathBuf, Vec<u8>)>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut child = Some(child);
    while let Some(c) = child.as_mut() {
        if proxy.refusals() == 0 {
            for dir in list_cells(&run)
                .unwrap_or_default()
                .into_iter()
                .map(|(_, d)| d)
            {
                first.entry(dir.clone()).or_insert_with(|| snapshot(&dir));
            }
        }
        if c.try_wait().expect("wait").is_some() {
            let c = child.take().expect("child");
            let (code, log) = finish(c, Duration::from_secs(5));
            assert!(matches!(code, Some(0 | 1)), "exit {code:?}\n{log}");
        }
        assert!(Instant::now() < deadline, "the recorder hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(proxy.refusals() == 1, "the refusal window never opened");
    assert!(!first.is_empty(), "no cell committed before the fault");
    for (dir, files) in &first {
        assert_eq!(
            &snapshot(dir),
            files,
            "{} changed after the fault",
            dir.display()
        );
    }
}

/// Every file of a committed cell folder, with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("cell folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read");
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// The same faults between the recorder and a real llama.cpp server: bursts every
/// 500 ms on every connection, then resets mid-stream on half the streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama.cpp: eval \"$(bash fixtures/llamacpp/install.sh)\", then --include-ignored"]
async fn a_real_llama_cpp_server_behind_bursts_and_resets_loses_nothing() {
    let (python, model) = crate::llamacpp::installed();
    let mut server = crate::llamacpp::start_server(&python, &model);
    crate::serve::wait_healthy(&mut server, Duration::from_secs(120)).await;
    let upstream: std::net::SocketAddr = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("the server's address");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let args = [
        "--concurrency",
        "1,2",
        "--duration",
        "3s",
        "--max-tokens",
        "24",
    ];
    let burst = Fault::Burst {
        every: Duration::from_millis(500),
    };
    let reset = Fault::Reset { after: (300, 3000) };
    let (bursts, resets) = tokio::task::spawn_blocking(move || {
        let b = record_via(
            &dir,
            "burst",
            upstream,
            Plan::every(burst, 1),
            REAL_STALL,
            &args,
        );
        let plan = Plan::streams(reset, 0.5, 2);
        let r = record_via(&dir, "reset", upstream, plan, REAL_STALL, &args);
        (b, r)
    })
    .await
    .expect("the recordings");
    accounted(&bursts, Duration::from_secs(3));
    assert!(
        finished(&bursts) > 0,
        "{:?}\n{}",
        bursts.reasons(),
        bursts.log
    );
    let chunks = bursts.chunks();
    let reads = reads_of(&chunks);
    let in_bursts: usize = reads.values().filter(|n| **n >= 2).sum();
    assert!(
        in_bursts * 2 > chunks.len(),
        "{in_bursts} of {} events in reads of 2 or more",
        chunks.len()
    );
    // The scoring warns that the network re-chunked the streams (a decode cell whose
    // every request straddled many bursts on a slow box may not: at least one does).
    let scoring = scoring_under(&bursts.run, "default");
    assert!(rechunk_warned(&scoring, Some("decode")) > 0, "{scoring:#}");
    accounted(&resets, Duration::from_secs(3));
    let hits = resets.proxy.hits().len();
    assert!(hits > 0, "the proxy reset nothing");
    resets.only_ended(&[
        EndReason::FinishedLength,
        EndReason::FinishedStop,
        EndReason::Disconnect,
        EndReason::Cancelled,
    ]);
    assert!(
        resets
            .requests()
            .iter()
            .any(|q| q.end_reason == EndReason::Disconnect),
        "{:?}\n{}",
        resets.reasons(),
        resets.log
    );
}

/// A speculative-decoding server that writes each accepted token as its own event, back
/// to back (llama.cpp's server; the simulator's `spec_event_per_token`), puts a step's
/// events in one read by itself, with no network between. Default 1.7.0 asks 8 events
/// to a read and does not call that re-chunking; a rule set asking 2 would.
#[test]
fn speculative_steps_written_token_by_token_are_not_called_re_chunked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let tiny = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sim/profiles/tiny.toml"),
    )
    .expect("tiny");
    let profile = tmp.path().join("spec-per-token.toml");
    let text = tiny.replace("spec_tokens = 0", "spec_tokens = 4").replace(
        "spec_acceptance = 0.0",
        "spec_acceptance = 0.8\nspec_event_per_token = true",
    );
    std::fs::write(&profile, text).expect("profile");
    let run = tmp.path().join("run");
    let mut args = vec!["--sim-profile", profile.to_str().expect("utf-8")];
    args.extend_from_slice(DECODE);
    let child = crate::misbehave::record(&run, &args)
        .spawn()
        .expect("record");
    let (code, log) = finish(child, Duration::from_secs(180));
    assert_eq!(code, Some(0), "{log}");
    // Events do share reads: a step's accepted tokens come together.
    let token_events: Vec<ChunkRow> = cells(&run)
        .iter()
        .flat_map(|d| read_table::<Chunks>(&d.join("chunks.parquet")).expect("chunks"))
        .filter(|c| c.tokens.unwrap_or(0) > 0)
        .collect();
    let (events, reads) = (token_events.len(), reads_of(&token_events));
    let per_read = events as f64 / reads.len().max(1) as f64;
    assert!(
        per_read > 1.5,
        "{events} token events in {} reads",
        reads.len()
    );
    assert_eq!(
        rechunk_warned(&scoring_under(&run, "default"), None),
        0,
        "{per_read} events a read"
    );
    let low = tmp.path().join("low.toml");
    std::fs::write(
        &low,
        "extends = \"default\"\nname = \"low\"\nversion = \"1\"\n[network]\nrechunk_events_per_read = 2.0\n",
    )
    .expect("rules");
    assert!(rechunk_warned(&scoring_under(&run, low.to_str().expect("utf-8")), None) > 0);
}
