//! Requests a server turns away: a context above the limit the server enforces (it lists
//! a larger one, as llama.cpp lists its training context) fails after a few requests,
//! not hundreds, with the server's message, and the run's exit status says so; a server
//! that refuses above a request rate is sent requests at a bounded rate and the cell
//! still measures; an open-loop rate cell above that rate keeps its schedule and is an
//! Error with the refusals as evidence.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokentrace_recorder::run::runner;
use tokentrace_recorder::run::session;
use tokentrace_schemas::manifest::CellStatus;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{EndReason, EventKind, Events, Requests};
use tokentrace_sim::{Profile, SimServer};

use crate::record::options;

async fn sim(profile: Profile) -> SimServer {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    SimServer::start(profile, addr).await.expect("sim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_the_server_refuses_fails_after_a_few_requests() {
    let mut profile = Profile::load("tiny").expect("tiny");
    // Lists 64K, enforces 16K.
    profile.listed_max_model_len = Some(65_536);
    let server = sim(profile).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&server.url(), &out);
    opts.contexts = vec![512, 20_000];
    opts.concurrency = vec![1, 4];
    opts.window = Duration::from_millis(400);
    let m = runner::record(&opts, |_| {}).await.expect("recorded");
    let received = server.requests_received();
    server.stop();

    let status = |ctx: u32| -> Vec<CellStatus> {
        m.cells
            .iter()
            .filter(|c| c.context == ctx)
            .map(|c| c.status)
            .collect()
    };
    assert_eq!(status(512), vec![CellStatus::Complete; 3]);
    assert_eq!(status(20_000), vec![CellStatus::Failed; 3]);
    let scout = m.cells.iter().find(|c| c.context == 20_000).expect("scout");
    let reason = scout.reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("refused 4 requests in a row")
            && reason.contains("HTTP 400")
            && reason.contains("maximum context length is 16384"),
        "{reason}"
    );
    // The 512 cells: probe + scout + warm-up and window requests; the 20K context: the
    // scout's 4 attempts, and not one decode request.
    let recorded: usize = tokentrace_schemas::layout::list_cells(&out)
        .expect("cells")
        .iter()
        .map(|(_, d)| {
            read_table::<Requests>(&d.join("requests.parquet"))
                .expect("requests")
                .len()
        })
        .sum();
    assert_eq!(received as usize, recorded + 4, "only 4 requests refused");
    assert!(
        !out.join(".staging").join("prefill").exists(),
        "no staging left"
    );
    let (code, line) = tokentrace_recorder::cli::finished(&m);
    assert_eq!(code, 1, "a failed cell makes the exit status 1");
    assert!(line.is_some_and(|l| l.contains("3 of 6 cells failed")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_above_a_rate_gets_a_bounded_rate_and_the_cell_measures() {
    let mut profile = Profile::load("tiny").expect("tiny");
    profile.max_requests_per_s = 8.0;
    let server = sim(profile).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&server.url(), &out);
    opts.contexts = vec![512];
    opts.concurrency = vec![4];
    opts.window = Duration::from_secs(2);
    // Short requests: unpaced, four workers would send ~100 a second.
    opts.max_tokens = 8;
    let started = Instant::now();
    let lines = std::sync::Mutex::new(Vec::new());
    let m = runner::record(&opts, |p| {
        if let session::Progress::CellEnd { key, line, .. } = p
            && let Ok(mut l) = lines.lock()
        {
            l.push((key, line));
        }
    })
    .await
    .expect("recorded");
    let elapsed = started.elapsed().as_secs_f64();
    let received = server.requests_received();
    server.stop();
    assert!(
        m.cells.iter().all(|c| c.status == CellStatus::Complete),
        "{:?}",
        m.cells
    );
    // Unpaced, four workers send about 100 a second in a debug build (more since its
    // hot path is optimized: 30 a second was once the paced rate's ceiling here).
    let rate = received as f64 / elapsed;
    assert!(rate < 40.0, "{received} requests in {elapsed:.1} s");
    let decode = tokentrace_schemas::layout::list_cells(&out)
        .expect("cells")
        .into_iter()
        .find(|(k, _)| k.concurrency == 4)
        .expect("decode cell")
        .1;
    let rows = read_table::<Requests>(&decode.join("requests.parquet")).expect("requests");
    let refused = rows
        .iter()
        .filter(|r| r.end_reason == EndReason::HttpError && r.http_status == Some(429))
        .count();
    let served = rows.iter().filter(|r| r.http_status == Some(200)).count();
    assert!(
        refused > 0 && served > 4,
        "{refused} refused, {served} served"
    );
    let events = read_table::<Events>(&decode.join("events.parquet")).expect("events");
    let note = events
        .iter()
        .find(|e| {
            e.kind == EventKind::Note
                && e.detail
                    .as_deref()
                    .is_some_and(|d| d.starts_with("refusals:"))
        })
        .and_then(|e| e.detail.clone())
        .expect("the refusals are counted");
    assert!(note.contains(&format!("{refused} requests")), "{note}");
    // The cell's progress line counts them too.
    let lines = lines.into_inner().expect("lines");
    let (_, line) = lines
        .iter()
        .find(|(k, _)| k.concurrency == 4)
        .expect("the decode cell's line");
    assert!(
        line.starts_with("committed: ")
            && line.contains(&format!("{} requests (", rows.len()))
            && line.contains(&format!("{refused} refused before streaming")),
        "{line}"
    );
}

/// Open loop against a server that refuses above 5 requests per second: a rate cell at 20
/// keeps to its schedule (refused requests are not sent again: the schedule is the
/// load), every refusal stays in the trace, and the cell is Error with the server's
/// message, so its latencies, taken over the requests served, are never shown as Valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_cell_refused_above_the_servers_rate_is_an_error_with_the_refusals() {
    use tokentrace_analyzer::contract::{Evidence, Verdict};
    let mut profile = Profile::load("tiny").expect("tiny");
    profile.max_requests_per_s = 5.0;
    let server = sim(profile).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&server.url(), &out);
    opts.contexts = vec![256];
    opts.max_tokens = 8;
    opts.modes = vec![session::Mode::Rate];
    opts.rate = Some(tokentrace_schemas::manifest::RateConfig {
        rates: vec![tokentrace_schemas::Rate::parse("20").expect("rate")],
        arrival: tokentrace_schemas::schedule::Arrival::Constant,
        seed: 0,
        requests: Some(40),
        duration_ns: None,
        max_concurrency: None,
    });
    let m = runner::record(&opts, |_| {}).await.expect("recorded");
    server.stop();
    assert!(
        m.cells.iter().all(|c| c.status == CellStatus::Complete),
        "{:?}",
        m.cells
    );
    let (_, cell) = tokentrace_schemas::layout::list_cells(&out)
        .expect("cells")
        .into_iter()
        .next()
        .expect("the rate cell");
    let rows = read_table::<Requests>(&cell.join("requests.parquet")).expect("requests");
    let measured: Vec<_> = rows
        .iter()
        .filter(|r| r.role == tokentrace_schemas::tables::Role::Measured)
        .collect();
    // Exactly the schedule: 40 requests 50 ms apart, refused or not.
    assert_eq!(measured.len(), 40);
    let mut due: Vec<i64> = measured.iter().map(|r| r.scheduled_ns).collect();
    due.sort_unstable();
    assert!(due.windows(2).all(|w| w[1] - w[0] == 50_000_000), "{due:?}");
    let refused = measured
        .iter()
        .filter(|r| r.http_status == Some(429))
        .count();
    assert!(refused >= 20, "{refused} of 40 refused");
    let s = tokentrace_analyzer::score_dir(
        &out,
        &tokentrace_analyzer::RuleSet::builtin("default").expect("rules"),
    )
    .expect("scored");
    let c = &s.cells[0];
    assert_eq!(c.verdict, Some(Verdict::Error), "{:?}", c.evidence);
    assert!(
        c.evidence.iter().any(|e| matches!(e,
            Evidence::FailedStream { error: Some(msg), .. } if msg.contains("Rate limit exceeded"))),
        "{:?}",
        c.evidence
    );
    assert_eq!(c.figures.as_ref().and_then(|f| f.slo_met), Some(false));
}
