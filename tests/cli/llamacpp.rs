//! A real engine in the loop: llama.cpp's server (xllamacpp CPU wheel, SmolLM2-135M)
//! recorded over both endpoints, then analyzed; a second run against the warm server
//! prefills cold again, a 20-request trace is replayed at exact prompt lengths on its
//! schedule, and a context above one slot's share is skipped; two conversations keep
//! their history in the server's slots (its usage reports `cached_tokens`). Needs
//! llama.cpp installed by fixtures/llamacpp/install.sh, which prints the two variables
//! this test reads: so it is `#[ignore]`d, reported by `cargo test` as ignored with that
//! reason, and run by `cargo test -- --include-ignored` (CI), where a missing install
//! fails it.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::serve::{self, Server};
use tokentrace_analyzer::contract::{Evidence, Verdict};
use tokentrace_analyzer::{RuleSet, report, score_dir};
use tokentrace_recorder::run::runner;
use tokentrace_recorder::run::session::{self, RecordOptions};
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::raw::RawReader;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Chunks, EndReason, Endpoint, EventKind, Events, Requests, Role};

/// The Python and model fixtures/llamacpp/install.sh installed (a missing install fails
/// the test that asks, with how to install it).
pub(crate) fn installed() -> (String, String) {
    let (Ok(python), Ok(model)) = (
        std::env::var("TOKENTRACE_LLAMACPP_PYTHON"),
        std::env::var("TOKENTRACE_LLAMACPP_MODEL"),
    ) else {
        panic!(
            "llama.cpp is not installed: eval \"$(bash fixtures/llamacpp/install.sh)\" sets TOKENTRACE_LLAMACPP_PYTHON and TOKENTRACE_LLAMACPP_MODEL"
        );
    };
    (python, model)
}

pub(crate) fn start_server(python: &str, model: &str) -> Server {
    serve::spawn(
        python,
        "fixtures/llamacpp/serve.py",
        model,
        &["--parallel", "2", "--ctx", "4096", "--threads", "2"],
        Duration::from_secs(120),
        Duration::ZERO,
    )
}

fn options(url: &str, out: &Path, endpoint: Endpoint) -> RecordOptions {
    RecordOptions {
        target: url.to_string(),
        out: out.to_path_buf(),
        model: None,
        endpoint,
        contexts: vec![256, 1024],
        concurrency: vec![1, 2, 4],
        window: Duration::from_secs(3),
        max_tokens: 24,
        metrics_url: None,
        scrape_interval: Duration::from_millis(250),
        stall_timeout: Duration::from_secs(120),
        warmup_timeout: Duration::from_secs(120),
        drain_timeout: Duration::from_secs(120),
        prompt_tolerance: session::DEFAULT_PROMPT_TOLERANCE,
        resume: false,
        describe: vec![("hardware".to_string(), "CPU, 2 threads".to_string())],
        launch_command: Some(
            "python fixtures/llamacpp/serve.py SmolLM2-135M-Instruct.Q4_1.gguf --parallel 2"
                .to_string(),
        ),
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

/// `timings.prompt_ms` of each request, from the raw capture (the usage event keeps it).
fn prompt_ms(cell: &Path) -> std::collections::BTreeMap<i64, f64> {
    let mut out = std::collections::BTreeMap::new();
    let mut bodies: std::collections::BTreeMap<i64, Vec<u8>> = Default::default();
    let reader = RawReader::open(&cell.join("raw.sse.zst")).expect("raw");
    for frame in reader {
        let frame = frame.expect("frame");
        bodies
            .entry(frame.request_id)
            .or_default()
            .extend_from_slice(&frame.bytes);
    }
    for (id, body) in bodies {
        let text = String::from_utf8_lossy(&body);
        for line in text.lines() {
            let Some(json) = line.strip_prefix("data: ") else {
                continue;
            };
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(json)
                && let Some(ms) = v["timings"]["prompt_ms"].as_f64()
            {
                out.insert(id, ms);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs llama.cpp: eval \"$(bash fixtures/llamacpp/install.sh)\", then --include-ignored"]
async fn a_real_llama_cpp_server_is_recorded_and_analyzed() {
    let (python, model) = installed();
    let mut server = start_server(&python, &model);
    serve::wait_healthy(&mut server, Duration::from_secs(120)).await;
    let tmp = tempfile::tempdir().expect("tempdir");
    for endpoint in [Endpoint::Completions, Endpoint::Chat] {
        let started = Instant::now();
        let out = tmp.path().join(endpoint.to_string());
        let manifest = runner::record(&options(&server.url, &out, endpoint), |_| {})
            .await
            .expect("recorded");
        eprintln!(
            "{endpoint}: recorded in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(manifest.engine.name.as_deref(), Some("llama.cpp"));
        assert_eq!(manifest.capabilities.metrics, Some(true));
        assert_eq!(
            manifest.capabilities.tokenize,
            Some(tokentrace_schemas::manifest::TokenizeShape::LlamaCpp)
        );
        // Facts from llama.cpp's own /props: its build, the model's quantization, slots.
        let found = |k: &str| {
            manifest
                .facts
                .iter()
                .find(|f| f.key == k)
                .map(|f| (f.value.clone(), f.source.clone()))
        };
        assert!(
            found("engine.build").is_some_and(|(v, s)| !v.is_empty() && s == "GET /props"),
            "{:?}",
            manifest.facts
        );
        assert_eq!(
            found("engine.quantization"),
            Some(("Q4_1".to_string(), "GET /props".to_string()))
        );
        assert_eq!(
            found("engine.slots").map(|f| f.0),
            Some("2".to_string()),
            "--parallel 2"
        );
        // Its KV budget: 2 slots × 2048 tokens each (--ctx 4096).
        assert_eq!(
            found("engine.kv_cache_tokens"),
            Some((
                "4096".to_string(),
                "GET /props: total_slots × n_ctx of a slot".to_string()
            ))
        );

        let (mut requests_checked, mut ttft_vs_prompt_ms) = (0, Vec::new());
        let (mut reused, mut reconnects, mut retries) = (0, 0, 0);
        for (key, dir) in list_cells(&out).expect("cells") {
            let requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
            let events = read_table::<Events>(&dir.join("events.parquet")).expect("events");
            // Connections: kept alive per worker where the server allows, and every new
            // one recorded. llama.cpp closes a connection after each streamed response
            // (its head says `Keep-Alive`): the next request of the worker finds it
            // closed and reconnects, or is retried once, never a false disconnect.
            for r in &requests {
                assert!(
                    !matches!(r.end_reason, EndReason::Disconnect | EndReason::HttpError),
                    "{key}: {r:?}"
                );
                let (conn, sent) = (
                    r.connection_ns.expect("connected"),
                    r.sent_ns.expect("sent"),
                );
                assert!(
                    r.connect_start_ns.unwrap_or(conn) <= conn && conn <= sent,
                    "{r:?}"
                );
                match r.connect_start_ns {
                    None => reused += 1,
                    Some(_) => reconnects += 1,
                }
                retries += r.retries.expect("retries recorded");
            }
            let notes = events
                .iter()
                .filter(|e| e.kind == EventKind::Note)
                .filter(|e| e.detail.as_deref().is_some_and(|d| d.starts_with("retry:")))
                .count();
            assert_eq!(
                notes as i32,
                requests.iter().filter_map(|r| r.retries).sum::<i32>(),
                "{key}: a note per retry"
            );
            let chunks = read_table::<Chunks>(&dir.join("chunks.parquet")).expect("chunks");
            let timings = prompt_ms(&dir);
            for r in requests.iter().filter(|r| r.role != Role::Probe) {
                // Every request the server finished reported usage; its streamed tokens
                // add up to the server's count.
                let Some(server_tokens) = r.completion_tokens_server else {
                    continue;
                };
                let streamed: i32 = chunks
                    .iter()
                    .filter(|c| c.request_id == r.request_id)
                    .filter_map(|c| c.tokens)
                    .sum();
                assert_eq!(streamed, server_tokens, "{key}: request {}", r.request_id);
                let asked = r.prompt_tokens_requested;
                let counted = r.prompt_tokens_server.expect("prompt tokens");
                assert!(
                    (counted - asked).abs() <= session::DEFAULT_PROMPT_TOLERANCE as i32,
                    "{key}: request {} asked {asked} prompt tokens, the server counted {counted}",
                    r.request_id
                );
                if let (Some(ms), Some(sent), Some(first)) =
                    (timings.get(&r.request_id), r.sent_ns, r.first_token_ns)
                {
                    ttft_vs_prompt_ms.push((key, r.role, (first - sent) as f64 / 1e6, *ms));
                }
                requests_checked += 1;
            }
        }
        eprintln!(
            "{endpoint}: {reused} requests on a kept-alive connection, {reconnects} on a new one, {retries} retried"
        );
        assert!(reconnects > 0, "new connections are recorded");
        // Both scouts always finish; on a loaded machine few 24-token decode requests
        // finish inside a 3 s window, so ask for a few, not for a rate.
        assert!(
            requests_checked >= 4,
            "only {requests_checked} requests finished with usage"
        );
        for (key, role, ttft, prompt) in ttft_vs_prompt_ms.iter().filter(|t| t.1 != Role::Measured)
        {
            eprintln!(
                "{endpoint} {key} {role}: recorder TTFT {ttft:.1} ms, server timings.prompt_ms {prompt:.1}"
            );
        }

        // The raw capture re-derives the same rows, and the same reports.
        let again = tmp.path().join(format!("{endpoint}-reparsed"));
        crate::reparse::reparse(&out, &again, None);
        crate::reparse::assert_same_rows(
            &crate::reparse::rows_of(&out),
            &crate::reparse::rows_of(&again),
        );
        assert_eq!(
            crate::reparse::reports(&out),
            crate::reparse::reports(&again)
        );
        // llama.cpp sends neither token ids nor usage per chunk: counted by usage, a
        // finished request's tokens all land on its final usage event.
        let by_usage = tmp.path().join(format!("{endpoint}-usage"));
        crate::reparse::reparse(&out, &by_usage, Some("usage"));
        for (key, (requests, chunks)) in crate::reparse::rows_of(&by_usage) {
            for r in requests.iter().filter(|r| r.role != Role::Probe) {
                let Some(server) = r.completion_tokens_server else {
                    continue;
                };
                let counted: Vec<i32> = chunks
                    .iter()
                    .filter(|c| c.request_id == r.request_id)
                    .filter_map(|c| c.tokens)
                    .collect();
                assert_eq!(counted, vec![server], "{key}: request {}", r.request_id);
            }
        }

        let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
        assert_eq!(s.metrics.name, "llama.cpp");
        for c in s.cells.iter().filter(|c| c.concurrency == 4) {
            assert_eq!(c.verdict, Some(Verdict::RequestsQueued), "{:?}", c.key());
            assert!(
                c.evidence.iter().any(|e| matches!(e,
                    Evidence::WaitingMeanAbove { metric, .. } if metric == "llamacpp:requests_deferred")),
                "{:?}: {:?}",
                c.key(),
                c.evidence
            );
        }
        for c in s.cells.iter().filter(|c| c.concurrency < 4) {
            assert!(c.verdict.is_some(), "{:?}", c.key());
        }
        // A direct link re-chunks nothing: a server's events come about one to a read.
        for c in &s.cells {
            assert!(
                !c.warnings.iter().any(|w| w.kind() == "rechunked"),
                "{:?}: {:?}",
                c.key(),
                c.warnings
            );
        }
        let report = report::render(&s, report::Format::Markdown);
        assert!(report.contains("## Sustained decode"), "{report}");
        assert!(report.contains("Requests queued"), "{report}");
        eprintln!("{report}");
    }

    // A second run against the same, now warm, server: its scout prefills cold again
    // (its prompts start with a nonce of their own), so its prefill is not a cache hit.
    let first = tmp.path().join(Endpoint::Completions.to_string());
    let second = tmp.path().join("second");
    let mut opts = options(&server.url, &second, Endpoint::Completions);
    opts.contexts = vec![1024];
    opts.concurrency = vec![1];
    runner::record(&opts, |_| {}).await.expect("second run");
    let cached = |(rate, cached): (f64, Option<i32>)| {
        (rate, cached.expect("llama.cpp says its cached tokens"))
    };
    let (a, b) = (
        cached(crate::cache::prefill(&first, 1024)),
        cached(crate::cache::prefill(&second, 1024)),
    );
    eprintln!(
        "prefill 1024: first run {:.0} tok/s ({} cached), second run {:.0} tok/s ({} cached)",
        a.0, a.1, b.0, b.1
    );
    assert!(
        b.1 * 10 < 1024,
        "the second scout was served from cache: {b:?}"
    );
    // Cold both times by the server's own count above; the two rates are not compared:
    // this test shares two cores with the rest of the suite, whose load changes the
    // speed of a prefill several-fold between the start of the run and its end.

    // One small burst cell and one rate cell: every measured request runs to
    // completion, the rate cell's requests leave on the seeded schedule, and both are
    // scored and reported.
    let open = tmp.path().join("burst-rate");
    let mut opts = options(&server.url, &open, Endpoint::Completions);
    opts.contexts = vec![256];
    opts.concurrency = vec![2];
    opts.modes = vec![session::Mode::Burst, session::Mode::Rate];
    opts.burst_requests = 4;
    opts.rate = Some(tokentrace_schemas::manifest::RateConfig {
        rates: vec![tokentrace_schemas::Rate::parse("2").expect("rate")],
        arrival: tokentrace_schemas::schedule::Arrival::Constant,
        seed: 1,
        requests: Some(4),
        duration_ns: None,
        max_concurrency: Some(2),
    });
    let m = runner::record(&opts, |_| {})
        .await
        .expect("burst and rate run");
    assert_eq!(m.schema_version, 2);
    let cells = list_cells(&open).expect("cells");
    assert_eq!(cells.len(), 2, "{cells:?}");
    for (key, dir) in &cells {
        let requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
        let measured: Vec<_> = requests
            .iter()
            .filter(|r| r.role == Role::Measured)
            .collect();
        assert_eq!(measured.len(), 4, "{key}");
        for r in &measured {
            assert_eq!(r.end_reason, EndReason::FinishedLength, "{key}: {r:?}");
            assert!(r.sent_ns.expect("sent") >= r.scheduled_ns, "{key}: {r:?}");
            // Each its own prompt: llama.cpp's slot cache held almost none of it (with
            // one shared prompt it held all but the last token).
            let cached = r
                .cached_tokens_server
                .expect("llama.cpp says its cached tokens");
            assert!(cached * 10 < 256, "{key}: {cached} cached: {r:?}");
        }
        if key.phase == tokentrace_schemas::Phase::Rate {
            let mut due: Vec<i64> = measured.iter().map(|r| r.scheduled_ns).collect();
            due.sort_unstable();
            let gaps: Vec<i64> = due.windows(2).map(|w| w[1] - w[0]).collect();
            assert_eq!(
                gaps,
                vec![500_000_000; 3],
                "{key}: constant arrivals at 2/s"
            );
        }
    }
    let s = score_dir(&open, &RuleSet::builtin("default").expect("rules")).expect("scored");
    for c in &s.cells {
        let f = c.figures.as_ref().expect("figures");
        assert_eq!(f.completed_requests, 4, "{:?}", c.key());
        assert!(
            f.e2e_latency_ms.median.is_some_and(|e| e > 0.0),
            "{:?}",
            c.key()
        );
        assert_ne!(
            c.verdict,
            Some(Verdict::Error),
            "{:?}: {:?}",
            c.key(),
            c.evidence
        );
    }
    let report = report::render(&s, report::Format::Markdown);
    assert!(report.contains("## Burst / E2E"), "{report}");
    assert!(report.contains("## Request rate"), "{report}");
    eprintln!("{report}");

    // A 20-request trace replayed: every prompt is sent at its exact length (token ids
    // drawn from the server's own vocabulary), every request leaves at its offset.
    let trace = tmp.path().join("trace.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| {
            // Two conversations sharing a first block; each turn adds its own.
            let ids: Vec<String> = [i % 2, 100 + i / 2, 200 + i]
                .iter()
                .map(u64::to_string)
                .collect();
            format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 4, \"hash_ids\": [{}]}}",
                i * 250,
                64 + (i * 7) % 32,
                ids.join(", ")
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n")).expect("trace");
    let replayed = tmp.path().join("replay");
    let mut opts = options(&server.url, &replayed, Endpoint::Completions);
    let replay = tokentrace_recorder::send::replay::ReplayOptions {
        from: trace.clone(),
        format: None,
        time_scale: 1.0,
        window: (None, None),
        max_requests: None,
        max_concurrency: None,
        block_tokens: 32,
    };
    let workload = tokentrace_recorder::send::replay::load(&replay, &mut |_| {}).expect("workload");
    opts.modes = vec![session::Mode::Replay];
    opts.replay = Some(session::ReplaySetup {
        opts: replay,
        workload: std::sync::Arc::new(workload),
    });
    let m = runner::record(&opts, |_| {}).await.expect("replay run");
    assert_eq!(m.schema_version, 3);
    let cells = list_cells(&replayed).expect("cells");
    let [(key, dir)] = &cells[..] else {
        panic!("one replay cell: {cells:?}")
    };
    let rows = read_table::<tokentrace_schemas::tables::Replay>(&dir.join("replay.parquet"))
        .expect("replay rows");
    let requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
    assert_eq!(rows.len(), 20);
    let mut lags = Vec::new();
    for row in &rows {
        assert_eq!(row.offset_ns, row.trace_ns, "time scale 1");
        let r = requests
            .iter()
            .find(|r| r.request_id == row.request_id)
            .expect("sent");
        assert_eq!(r.end_reason, EndReason::FinishedLength, "{key}: {r:?}");
        assert_eq!(
            r.prompt_tokens_server,
            Some(row.input_tokens),
            "{key}: source line {}",
            row.source_row
        );
        assert_eq!(r.completion_tokens_server, Some(4));
        let sent = r.sent_ns.expect("sent");
        lags.push(sent - r.scheduled_ns);
    }
    let zero = requests
        .iter()
        .filter(|r| r.role == Role::Measured)
        .map(|r| r.scheduled_ns)
        .min()
        .expect("due");
    for row in &rows {
        let r = requests
            .iter()
            .find(|r| r.request_id == row.request_id)
            .expect("sent");
        assert_eq!(
            r.scheduled_ns - zero,
            row.offset_ns,
            "due at its trace time"
        );
    }
    lags.sort_unstable();
    let median_ms = lags[lags.len() / 2] as f64 / 1e6;
    eprintln!(
        "replay on llama.cpp: 20 requests, schedule lag median {median_ms:.3} ms, max {:.3} ms",
        lags[lags.len() - 1] as f64 / 1e6
    );
    assert!(lags.iter().all(|l| *l >= 0), "none left early");
    assert!(median_ms < 5.0, "schedule lag median {median_ms} ms");

    // A context above what one slot holds (--ctx 4096 over 2 slots: 2,048 tokens) is
    // skipped before any request, with the limit and where it came from; the run's exit
    // status says so.
    let over = tmp.path().join("over");
    let mut opts = options(&server.url, &over, Endpoint::Completions);
    opts.contexts = vec![3000];
    opts.concurrency = vec![1, 2];
    let m = runner::record(&opts, |_| {}).await.expect("over-limit run");
    for c in &m.cells {
        assert_eq!(
            c.status,
            tokentrace_schemas::manifest::CellStatus::Skipped,
            "{c:?}"
        );
        let reason = c.reason.as_deref().unwrap_or("");
        assert!(reason.contains("llama.cpp per-slot n_ctx 2048"), "{reason}");
    }
    let (code, line) = tokentrace_recorder::cli::finished(&m);
    assert_eq!(code, 3, "{line:?}");
    conversations_in_slots(&server, tmp.path()).await;
    drop(server);
}

/// Conversations on llama.cpp, whose OpenAI-compatible usage reports `cached_tokens`:
/// two sessions on its two slots, chat, three turns each; every later turn finds at
/// least the previous prompt in its slot's cache, and the scoring sees the cache keep
/// the sessions. Most turns are served all of their history but the answer's last
/// token; one whose answer text re-tokenizes otherwise than the ids the model
/// generated (CI met 112 of 126) is served up to where the two part. Run on
/// the main test's server, after its other cells (a second server beside it, under the
/// whole suite, left no time for a later turn).
async fn conversations_in_slots(server: &Server, tmp: &Path) {
    let out = tmp.join("conversations");
    let mut opts = options(&server.url, &out, Endpoint::Chat);
    opts.modes = vec![session::Mode::Conversation];
    // Long enough for two later turns when the suite shares the two cores with it.
    opts.window = Duration::from_secs(20);
    opts.conversation = Some(crate::conversation::three_turns(vec![2], 64, 32, 5));
    runner::record(&opts, |_| {}).await.expect("recorded");
    let cells = list_cells(&out).expect("cells");
    let [(key, dir)] = &cells[..] else {
        panic!("one conversation cell: {cells:?}")
    };
    let requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
    let turns =
        read_table::<tokentrace_schemas::tables::Turns>(&dir.join("turns.parquet")).expect("turns");
    let request = |id: i64| {
        requests
            .iter()
            .find(|r| r.request_id == id)
            .expect("request row")
    };
    let mut checked = 0;
    for t in turns.iter().filter(|t| t.turn > 1) {
        let r = request(t.request_id);
        if r.end_reason != EndReason::FinishedLength {
            continue;
        }
        let before = turns
            .iter()
            .find(|b| b.session == t.session && b.turn == t.turn - 1)
            .expect("the turn before");
        let prev_prompt = request(before.request_id)
            .prompt_tokens_server
            .expect("usage");
        let cached = r
            .cached_tokens_server
            .expect("llama.cpp reports cached_tokens");
        eprintln!(
            "{key}: session {} turn {}: previous prompt {prev_prompt}, history {}, {cached} cached",
            t.session, t.turn, t.history_tokens
        );
        assert!(
            cached >= prev_prompt && cached <= t.history_tokens,
            "{key}: session {} turn {}: {cached} cached, the previous prompt is {prev_prompt}, the history {}",
            t.session,
            t.turn,
            t.history_tokens
        );
        checked += 1;
    }
    assert!(checked >= 2, "{key}: only {checked} later turns answered");
    let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
    let cell = s
        .cells
        .iter()
        .find(|c| c.phase == tokentrace_schemas::Phase::Conversation)
        .expect("cell");
    let talk = cell
        .figures
        .as_ref()
        .and_then(|f| f.conversation.as_ref())
        .expect("figures");
    assert!(talk.cache_hit_ratio.is_some_and(|h| h >= 0.5), "{talk:?}");
    assert!(
        !cell.warnings.iter().any(|w| w.kind() == "prefix_evicted"),
        "{:?}",
        cell.warnings
    );
}
