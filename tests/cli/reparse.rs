//! `reparse` end to end: under the recorded policy it reproduces `chunks` and `requests`
//! row for row (golden runs, a run with every simulator fault) and the reports stay byte
//! for byte; under another policy the token counts follow that policy.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use tokentrace::{Cli, run};
use tokentrace_recorder::run::runner;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{Manifest, TokenCounting};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{ChunkKind, ChunkRow, Chunks, RequestRow, Requests};
use tokentrace_sim::{Profile, SimServer};

/// Every cell's rows, requests by id and chunks by (request, position).
type Rows = BTreeMap<String, (Vec<RequestRow>, Vec<ChunkRow>)>;

pub fn rows_of(run: &Path) -> Rows {
    let mut out = BTreeMap::new();
    for (key, dir) in list_cells(run).expect("cells") {
        let mut requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
        let mut chunks = read_table::<Chunks>(&dir.join("chunks.parquet")).expect("chunks");
        requests.sort_by_key(|r| r.request_id);
        chunks.sort_by_key(|c| (c.request_id, c.seq));
        out.insert(key.to_string(), (requests, chunks));
    }
    out
}

/// Asserts two runs hold the same rows, naming the first difference.
pub fn assert_same_rows(a: &Rows, b: &Rows) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (key, (ra, ca)) in a {
        let (rb, cb) = &b[key];
        assert_eq!(ra.len(), rb.len(), "{key}: requests");
        for (x, y) in ra.iter().zip(rb) {
            assert_eq!(x, y, "{key}: request {}", x.request_id);
        }
        assert_eq!(ca.len(), cb.len(), "{key}: chunks");
        for (x, y) in ca.iter().zip(cb) {
            assert_eq!(x, y, "{key}: chunk {} of request {}", x.seq, x.request_id);
        }
    }
}

/// `tokentrace reparse RUN --out OUT [--token-counting POLICY]`, in-process.
pub fn reparse_cmd(
    run_dir: &Path,
    out: &Path,
    policy: Option<&str>,
) -> anyhow::Result<std::process::ExitCode> {
    let mut args = vec![
        "tokentrace".to_string(),
        "reparse".to_string(),
        run_dir.display().to_string(),
        "--out".to_string(),
        out.display().to_string(),
    ];
    if let Some(p) = policy {
        args.extend(["--token-counting".to_string(), p.to_string()]);
    }
    run(Cli::parse_from(args))
}

/// The same, which must succeed.
pub fn reparse(run_dir: &Path, out: &Path, policy: Option<&str>) {
    let code = reparse_cmd(run_dir, out, policy).expect("reparse runs");
    assert_eq!(code, std::process::ExitCode::SUCCESS);
}

/// The Markdown and JSON reports of a run under both built-in rule sets.
pub fn reports(run_dir: &Path) -> Vec<Vec<u8>> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut out = Vec::new();
    for (rules, format) in [("default", "md"), ("reference", "md"), ("default", "json")] {
        let file = tmp.path().join(format!("{rules}.{format}"));
        let cli = Cli::parse_from([
            "tokentrace",
            "report",
            run_dir.to_str().expect("utf-8"),
            "--rules",
            rules,
            "--format",
            format,
            "--out",
            file.to_str().expect("utf-8"),
        ]);
        run(cli).expect("report");
        out.push(std::fs::read(&file).expect("report file"));
    }
    out
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/runs")
        .join(name)
}

#[test]
fn golden_runs_reparse_row_for_row_and_report_byte_for_byte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in ["sim-completions", "sim-chat", "sim-open"] {
        let out = tmp.path().join(name);
        reparse(&golden(name), &out, None);
        assert_same_rows(&rows_of(&golden(name)), &rows_of(&out));
        assert_eq!(reports(&golden(name)), reports(&out), "{name}: reports");
        let m = Manifest::read(&out).expect("manifest");
        let r = m.reparsed.expect("the manifest says it was reparsed");
        assert_eq!(r.from_run_id, m.run_id);
        assert_eq!(r.token_counting, TokenCounting::TokenIds);
        assert_eq!(r.recorded_token_counting, Some(TokenCounting::TokenIds));
        // A second reparse refuses to overwrite.
        assert!(
            reparse_cmd(&golden(name), &out, None).is_err(),
            "an existing --out is refused"
        );
    }
}

/// A run with speculative decoding (several tokens per chunk) and every fault: reparsed
/// as recorded it is the same, row for row; under `one_per_chunk` every text event
/// counts one token and the final usage settles the rest on the finishing event; under
/// `usage`, tokens are the increases of the cumulative usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulty_speculative_run_reparses_as_recorded_and_under_other_policies() {
    let mut profile = Profile::load("tiny").expect("tiny");
    profile.spec_tokens = 3;
    profile.spec_acceptance = 0.7;
    profile.faults.reset = 0.1;
    profile.faults.http_503 = 0.05;
    profile.faults.error_event = 0.1;
    profile.faults.malformed = 0.1;
    profile.faults.stall = 0.1;
    profile.faults.stall_seconds = 1.0;
    profile.faults.ping_seconds = 0.002;
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(profile, addr).await.expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let recorded = dir.path().join("run");
    let mut opts = crate::record::options(&sim.url(), &recorded);
    opts.contexts = vec![256];
    opts.concurrency = vec![3];
    opts.window = Duration::from_secs(2);
    opts.max_tokens = 60;
    opts.stall_timeout = Duration::from_millis(400);
    runner::record(&opts, |_| {}).await.expect("recorded");
    sim.stop();

    let same = dir.path().join("same");
    reparse(&recorded, &same, None);
    let original = rows_of(&recorded);
    assert_same_rows(&original, &rows_of(&same));
    let reasons: std::collections::BTreeSet<String> = original
        .values()
        .flat_map(|(r, _)| r.iter().map(|r| r.end_reason.to_string()))
        .collect();
    assert!(reasons.len() >= 4, "faults recorded: {reasons:?}");
    let multi = original
        .values()
        .flat_map(|(_, c)| c)
        .filter(|c| c.tokens.unwrap_or(0) > 1)
        .count();
    assert!(multi > 0, "speculative chunks carry several tokens");

    let one = dir.path().join("one");
    reparse(&recorded, &one, Some("one_per_chunk"));
    let usage = dir.path().join("usage");
    reparse(&recorded, &usage, Some("usage"));
    let (one, usage) = (rows_of(&one), rows_of(&usage));
    for (key, (requests, chunks)) in &original {
        for r in requests.iter().filter(|r| r.role.to_string() != "probe") {
            let of = |rows: &[ChunkRow]| -> Vec<ChunkRow> {
                rows.iter()
                    .filter(|c| c.request_id == r.request_id)
                    .cloned()
                    .collect()
            };
            let (was, per_chunk, by_usage) = (of(chunks), of(&one[key].1), of(&usage[key].1));
            assert_eq!(was.len(), per_chunk.len(), "{key}: same events");
            let text = |c: &ChunkRow| c.content.as_deref().is_some_and(|t| !t.is_empty());
            for c in &per_chunk {
                if c.kind == ChunkKind::Data && c.finish_reason.is_none() {
                    assert_eq!(c.tokens, Some(i32::from(text(c))), "{key}: {c:?}");
                }
            }
            for c in &by_usage {
                let before = by_usage
                    .iter()
                    .filter(|p| p.seq < c.seq)
                    .filter_map(|p| p.completion_tokens)
                    .next_back()
                    .unwrap_or(0);
                assert_eq!(
                    c.tokens,
                    c.completion_tokens.map(|n| n - before),
                    "{key}: {c:?}"
                );
            }
            // A request that finished with usage: every policy adds up to the server.
            if r.end_reason.to_string().starts_with("finished")
                && let Some(server) = r.completion_tokens_server
            {
                for rows in [&was, &per_chunk, &by_usage] {
                    let sum: i32 = rows.iter().filter_map(|c| c.tokens).sum();
                    assert_eq!(sum, server, "{key}: request {}", r.request_id);
                }
            }
        }
    }
    let m = Manifest::read(&dir.path().join("one")).expect("manifest");
    assert_eq!(
        m.capabilities.token_counting,
        Some(TokenCounting::OnePerChunk)
    );
}

/// Copies a folder tree.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// A damaged raw capture is an error that names the file; nothing is left at `--out`
/// (not even a half-made folder), and the original is untouched.
#[test]
fn a_damaged_raw_capture_is_named_and_nothing_is_left_behind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run_dir = tmp.path().join("run");
    copy_tree(&golden("sim-chat"), &run_dir);
    let (_, cell) = list_cells(&run_dir)
        .expect("cells")
        .into_iter()
        .next_back()
        .expect("a cell");
    let raw = cell.join("raw.sse.zst");
    let bytes = std::fs::read(&raw).expect("raw");
    std::fs::write(&raw, &bytes[..bytes.len() / 2]).expect("truncate");
    let before = rows_of(&run_dir);
    let out = tmp.path().join("out");
    let err = reparse_cmd(&run_dir, &out, None).expect_err("a damaged capture fails");
    let msg = format!("{err:#}");
    assert!(
        msg.contains(&raw.display().to_string()),
        "names the file: {msg}"
    );
    assert!(!out.exists());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read_dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    assert_same_rows(&before, &rows_of(&run_dir));
}
