//! The analyzer's figures agree within 1% with the same figures computed here from the
//! simulator's ground truth (what it sent, and when), for a run recorded over loopback.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_recorder::runner::{self, RecordOptions};
use tokentrace_schemas::layout::{Phase, list_cells};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Endpoint, EventKind, Events, Requests, Role};
use tokentrace_sim::truth::{TruthChunks, TruthRequests};
use tokentrace_sim::{Profile, SimOptions, SimServer};

/// TTFT starts when the request left the client (`requests.sent_ns`), which only the
/// trace knows; it ends at the first token, which the ground truth knows as the time the
/// simulator wrote it. Every step that prefills costs 1 s, so TTFT ≥ 1 s and the
/// recorder's arrival-vs-write delay (well under a millisecond, a few under load) stays
/// far below 1%. How long the simulator took to start handling a request after it was
/// sent (outside any figure) is printed for information. 4 sequences run at once.
const PROFILE: &str = r#"
name = "truth"
model = "sim-truth"
max_model_len = 8192
max_num_seqs = 4
kv_cache_tokens = 100000
max_num_batched_tokens = 8192
block_size = 16
prefill_tokens_per_s = [[256, 4000.0], [8192, 4000.0]]
step_ms = [[1, 100.0], [8, 100.0]]
step_ms_per_mtoken = 0.0
prefill_overhead_ms = 1000.0
spec_tokens = 0
spec_acceptance = 0.0
reasoning_tokens = 0
reasoning_field = "reasoning_content"
loop_probability = [[1, 0.0]]
loop_after_tokens = 16
loop_cycle_tokens = 8
eos_probability = 0.0
seed = 3
"#;

/// Completions into `out`, 30 s timeouts, exact prompts; each test sets its matrix.
fn options(target: String, out: &std::path::Path) -> RecordOptions {
    RecordOptions {
        target,
        out: out.to_path_buf(),
        model: None,
        endpoint: Endpoint::Completions,
        contexts: Vec::new(),
        concurrency: Vec::new(),
        window: Duration::from_secs(1),
        max_tokens: 16,
        metrics_url: None,
        scrape_interval: Duration::from_millis(250),
        stall_timeout: Duration::from_secs(30),
        warmup_timeout: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(30),
        prompt_tolerance: 0,
        resume: false,
        describe: Vec::new(),
        launch_command: None,
        api_key: None,
        prefill_mode: tokentrace_schemas::manifest::PrefillMode::Scout,
        progress: Default::default(),
        writers: Default::default(),
        gpus: Default::default(),
        upload: None,
        skip_over_capacity: false,
    }
}

fn within_1pct(what: &str, analyzer: f64, truth: f64) {
    let rel = (analyzer - truth).abs() / truth.abs();
    eprintln!(
        "{what}: analyzer {analyzer:.4}, ground truth {truth:.4}, {:.4}%",
        rel * 100.0
    );
    assert!(
        rel <= 0.01,
        "{what}: analyzer {analyzer} vs ground truth {truth}"
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_agree_with_the_simulators_ground_truth() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let profile_path = tmp.path().join("truth.toml");
    std::fs::write(&profile_path, PROFILE).expect("profile");
    let truth_dir = tmp.path().join("truth");
    std::fs::create_dir_all(&truth_dir).expect("mkdir");
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start_with(
        Profile::load(profile_path.to_str().expect("utf-8")).expect("profile"),
        addr,
        SimOptions {
            truth_dir: Some(truth_dir.clone()),
        },
    )
    .await
    .expect("sim");
    let out = tmp.path().join("run");
    let opts = RecordOptions {
        contexts: vec![512],
        concurrency: vec![1, 4, 8],
        window: Duration::from_secs(2),
        max_tokens: 16,
        scrape_interval: Duration::from_millis(250),
        ..options(sim.url(), &out)
    };
    let manifest = runner::record(&opts, |_| {}).await.expect("recorded");
    let (stats, dropped) = sim.stop().expect("truth on");
    stats.expect("truth written");
    assert_eq!(dropped, 0);
    let zero = manifest.clock.monotonic_at_zero_ns.expect("clock anchor");

    // Ground truth, on the run's clock.
    let truth_requests =
        read_table::<TruthRequests>(&truth_dir.join("truth_requests.parquet")).expect("truth");
    let truth_chunks =
        read_table::<TruthChunks>(&truth_dir.join("truth_chunks.parquet")).expect("truth");
    let sim_id: BTreeMap<&str, i64> = truth_requests
        .iter()
        .map(|r| (r.server_request_id.as_str(), r.request_id))
        .collect();
    let arrived: BTreeMap<i64, (i64, i32)> = truth_requests
        .iter()
        .map(|r| (r.request_id, (r.arrived_ns - zero, r.prompt_tokens)))
        .collect();
    // Per simulator request: (written time, tokens) of each token event.
    let mut written: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for c in &truth_chunks {
        if let Some(t) = c.tokens.filter(|t| *t > 0) {
            written
                .entry(c.request_id)
                .or_default()
                .push((c.written_ns - zero, i64::from(t)));
        }
    }
    for v in written.values_mut() {
        v.sort_unstable();
    }

    let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
    let mut compared = 0;
    for (key, dir) in list_cells(&out).expect("cells") {
        let cell = s
            .cells
            .iter()
            .find(|c| c.key() == key)
            .expect("scored cell");
        let f = cell.figures.as_ref().expect("figures");
        let requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
        let truth_of = |r: &tokentrace_schemas::tables::RequestRow| {
            r.server_request_id
                .as_deref()
                .and_then(|sid| sim_id.get(sid))
                .copied()
        };
        match key.phase {
            Phase::Prefill => {
                let scout = requests
                    .iter()
                    .find(|r| r.role == Role::Scout)
                    .expect("scout");
                let id = truth_of(scout).expect("served");
                let (arrive, prompt) = arrived[&id];
                let sent = scout.sent_ns.expect("sent");
                eprintln!(
                    "{key}: the simulator began handling the scout {} µs after it was sent",
                    (arrive - sent) / 1000
                );
                let first = written[&id][0].0;
                let truth = f64::from(prompt) / ((first - sent) as f64 / 1e9);
                within_1pct(
                    &format!("{key}: prompt tok/s"),
                    f.prompt_tok_s.expect("rate"),
                    truth,
                );
            }
            Phase::Decode => {
                let events = read_table::<Events>(&dir.join("events.parquet")).expect("events");
                let at = |k: EventKind| events.iter().find(|e| e.kind == k).expect("event").time_ns;
                let (open, close) = (at(EventKind::WindowOpen), at(EventKind::WindowClose));
                let (mut tokens, mut ttft, mut handling) = (0i64, Vec::new(), Vec::new());
                for r in requests.iter().filter(|r| r.role != Role::Probe) {
                    let Some(id) = truth_of(r) else { continue };
                    let sent = written.get(&id).map(Vec::as_slice).unwrap_or(&[]);
                    tokens += sent
                        .iter()
                        .filter(|(t, _)| *t >= open && *t <= close)
                        .map(|(_, n)| n)
                        .sum::<i64>();
                    // The default rule set's requests: overlapping the window, 2+ tokens.
                    let overlaps =
                        r.sent_ns.is_some_and(|s| s < close) && r.end_ns.is_none_or(|e| e >= open);
                    let n: i64 = sent.iter().map(|(_, n)| n).sum();
                    if overlaps && n >= 2 {
                        let left = r.sent_ns.expect("sent");
                        ttft.push((sent[0].0 - left) as f64 / 1e6);
                        handling.push((arrived[&id].0 - left) as f64 / 1e3);
                    }
                }
                eprintln!(
                    "{key}: the simulator began handling requests a median {:.0} µs after they were sent",
                    median(handling)
                );
                let window_s = (close - open) as f64 / 1e9;
                within_1pct(
                    &format!("{key}: total tok/s"),
                    f.total_tok_s.expect("rate"),
                    tokens as f64 / window_s,
                );
                within_1pct(
                    &format!("{key}: TTFT median ms"),
                    f.ttft_ms.median.expect("ttft"),
                    median(ttft),
                );
            }
        }
        compared += 1;
    }
    assert_eq!(compared, 4);
}

/// A server whose metrics cannot be read is recorded and analyzed with client-side
/// evidence only, and the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_server_metrics_the_client_side_evidence_is_used_and_said() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start_with(
        Profile::load("tiny").expect("tiny"),
        addr,
        SimOptions { truth_dir: None },
    )
    .await
    .expect("sim");
    let out = tmp.path().join("run");
    let opts = RecordOptions {
        contexts: vec![256],
        concurrency: vec![2],
        window: Duration::from_millis(800),
        max_tokens: 64,
        // Not a metrics endpoint: the probe finds no Prometheus text there.
        metrics_url: Some(format!("{}/no-metrics-here", sim.url())),
        scrape_interval: Duration::from_millis(200),
        ..options(sim.url(), &out)
    };
    let manifest = runner::record(&opts, |_| {}).await.expect("recorded");
    let _ = sim.stop();
    assert_eq!(manifest.capabilities.metrics, Some(false));
    let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
    let decode = s
        .cells
        .iter()
        .find(|c| c.phase == Phase::Decode)
        .expect("decode cell");
    let f = decode.figures.as_ref().expect("figures");
    assert_eq!(f.active_source.as_deref(), Some("client"));
    let active = f.active_requests.expect("active");
    assert!((1.5..=2.0).contains(&active), "{active}");
    assert!(
        decode.warnings.iter().any(|w| matches!(
            w,
            tokentrace_analyzer::contract::Warning::NoServerMetrics { .. }
        )),
        "{:?}",
        decode.warnings
    );
    // Without metrics there was no drain to check: no claim that the server did not drain.
    assert!(
        !decode.warnings.iter().any(|w| matches!(
            w,
            tokentrace_analyzer::contract::Warning::DrainIncomplete { .. }
        )),
        "{:?}",
        decode.warnings
    );
    let md = tokentrace_analyzer::render::render(&s, tokentrace_analyzer::render::Format::Markdown);
    assert!(!md.contains("did not drain"), "{md}");
    assert!(
        md.contains("- Server metrics: no (client-side evidence only)"),
        "{md}"
    );
    assert!(md.contains("queueing not judged from the server"), "{md}");
}
