//! Figures of how the server answered, against the simulator's ground truth: speculative
//! decoding (the engine's counters and tokens per event), the content rules (a script
//! leak, a stop before `max_tokens`) and the connections (reconnects and retries after
//! kept-alive connections closed under their workers).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokentrace_analyzer::contract::{Verdict, Warning};
use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_recorder::run::runner;
use tokentrace_recorder::run::session::RecordOptions;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{Phase, list_cells};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{EventKind, Events, Metrics, Requests, Role};
use tokentrace_sim::truth::{TruthChunks, TruthRequests};

use crate::truth::{PROFILE, f_zero, options, sim_with_truth, within_1pct};

/// The truth profile, faster (20 ms steps), with its replacements made; each must apply.
fn profile(name: &str, swaps: &[(&str, &str)]) -> String {
    let mut p = PROFILE
        .replace("name = \"truth\"", &format!("name = \"{name}\""))
        .replace(
            "step_ms = [[1, 100.0], [8, 100.0]]",
            "step_ms = [[1, 20.0], [8, 20.0]]",
        )
        .replace(
            "prefill_overhead_ms = 1000.0",
            "prefill_overhead_ms = 100.0",
        );
    for (from, to) in swaps {
        assert!(p.contains(from), "{from} not in the profile");
        p = p.replace(from, to);
    }
    p
}

/// The window of a decode cell, on the run's clock.
fn window(dir: &std::path::Path) -> (i64, i64) {
    let events = read_table::<Events>(&dir.join("events.parquet")).expect("events");
    let at = |k: EventKind| events.iter().find(|e| e.kind == k).expect("event").time_ns;
    (at(EventKind::WindowOpen), at(EventKind::WindowClose))
}

/// Speculative decoding: each decode cell's accepted and proposed draft tokens lie
/// between what the simulator's truth says its steps proposed and accepted strictly
/// between the first and last scrape inside the window and what they did from the
/// first scrape's start to the last one's end (the counters were read somewhere inside
/// each scrape); the acceptance rate and length agree within 1% with those steps';
/// tokens per streamed event agree within 1% with the events the simulator wrote inside
/// the window; and the server's counters over the whole run equal its truth's sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculative_decoding_agrees_with_the_simulators_ground_truth() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = profile(
        "truth-spec",
        &[
            ("spec_tokens = 0", "spec_tokens = 3"),
            ("spec_acceptance = 0.0", "spec_acceptance = 0.7"),
        ],
    );
    let (sim, truth_dir) = sim_with_truth(tmp.path(), "truth-spec.toml", &p).await;
    let metrics_url = format!("{}/metrics", sim.url());
    let out = tmp.path().join("run");
    let opts = RecordOptions {
        contexts: vec![512],
        concurrency: vec![1, 4],
        window: Duration::from_secs(3),
        max_tokens: 64,
        scrape_interval: Duration::from_millis(200),
        ..options(sim.url(), &out)
    };
    runner::record(&opts, |_| {}).await.expect("recorded");
    let scraped = reqwest::get(&metrics_url)
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let (stats, dropped) = sim.stop().expect("truth on");
    stats.expect("truth written");
    assert_eq!(dropped, 0);
    let zero = f_zero(&out);
    let chunks = read_table::<TruthChunks>(&truth_dir.join("truth_chunks.parquet")).expect("truth");

    // The counters over the whole run are the truth log's sums.
    let counter = |name: &str| -> u64 {
        scraped
            .lines()
            .filter(|l| l.starts_with(name))
            .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} not in /metrics")) as u64
    };
    let sum = |f: fn(&tokentrace_sim::truth::TruthChunkRow) -> Option<i32>| -> u64 {
        chunks.iter().filter_map(f).map(|n| n as u64).sum()
    };
    // Requests cancelled at a cell's end may have had steps the stream never wrote.
    let accepted_total = counter("vllm:spec_decode_num_accepted_tokens_total");
    let accepted_truth = sum(|c| c.spec_accepted_tokens);
    eprintln!("accepted tokens: counter {accepted_total}, truth log {accepted_truth}");
    assert!(accepted_total >= accepted_truth && accepted_truth > 0);
    assert!(
        accepted_total - accepted_truth <= 3 * 8,
        "more than the cancelled steps"
    );

    let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
    let mut compared = 0;
    for (key, dir) in list_cells(&out).expect("cells") {
        if key.phase != Phase::Decode {
            continue;
        }
        let f = s
            .cells
            .iter()
            .find(|c| c.key() == key)
            .and_then(|c| c.figures.clone())
            .expect("figures");
        let (open, close) = window(&dir);
        let metrics = read_table::<Metrics>(&dir.join("metrics.parquet")).expect("metrics");
        let mut scrapes: Vec<(i64, i64)> = metrics
            .iter()
            .filter(|m| m.name == "vllm:spec_decode_num_accepted_tokens_total")
            .map(|m| (m.scrape_start_ns, m.scrape_end_ns))
            .filter(|&(s, e)| s >= open && e <= close)
            .collect();
        scrapes.sort_unstable();
        let (first, last) = (scrapes[0], scrapes[scrapes.len() - 1]);
        // Steps by their end (the counters move when a step ends), on the run's clock.
        let between = |from: i64, to: i64| {
            chunks
                .iter()
                .filter(|c| {
                    c.scheduled_ns
                        .is_some_and(|t| t - zero >= from && t - zero <= to)
                })
                .filter_map(|c| Some((c.spec_draft_tokens?, c.spec_accepted_tokens?)))
                .fold((0i64, 0i64, 0i64), |(steps, d, a), (dd, aa)| {
                    (steps + 1, d + i64::from(dd), a + i64::from(aa))
                })
        };
        let inner = between(first.1, last.0);
        let outer = between(first.0, last.1);
        let (drafts, accepted) = (
            f.spec_draft_tokens.expect("draft tokens"),
            f.spec_accepted_tokens.expect("accepted tokens"),
        );
        eprintln!(
            "{key}: proposed {drafts} (truth {}..{}), accepted {accepted} (truth {}..{})",
            inner.1, outer.1, inner.2, outer.2
        );
        assert!((inner.1..=outer.1).contains(&drafts), "{key}: drafts");
        assert!((inner.2..=outer.2).contains(&accepted), "{key}: accepted");
        // A step that ended while a bracketing scrape ran may be in the counters or
        // not (one step of 3 drafts moves a 330-draft rate by 1.3%): the figures are
        // the truth of the bracket the counts fall in, and equal it when the two ends
        // agree.
        let rate = f.spec_acceptance_rate.expect("rate");
        let (low, high) = (
            inner.2 as f64 / outer.1 as f64,
            outer.2 as f64 / inner.1 as f64,
        );
        assert!(
            low <= rate && rate <= high,
            "{key}: acceptance rate {rate}, truth {low}..{high}"
        );
        if inner == outer {
            within_1pct(
                &format!("{key}: acceptance rate"),
                rate,
                inner.2 as f64 / inner.1 as f64,
            );
        }
        let length = f.spec_acceptance_length.expect("length");
        let (fewest, most) = (
            1.0 + accepted as f64 / outer.0 as f64,
            1.0 + accepted as f64 / inner.0 as f64,
        );
        assert!(
            fewest * 0.99 <= length && length <= most * 1.01,
            "{key}: acceptance length {length}, truth {fewest}..{most}"
        );
        // Tokens per event: what the simulator wrote inside the window.
        let (events, tokens) = chunks
            .iter()
            .filter(|c| c.tokens.unwrap_or(0) > 0)
            .filter(|c| (open..=close).contains(&(c.written_ns - zero)))
            .fold((0i64, 0i64), |(e, t), c| {
                (e + 1, t + i64::from(c.tokens.unwrap_or(0)))
            });
        within_1pct(
            &format!("{key}: tokens per event"),
            f.tokens_per_event.expect("tokens per event"),
            tokens as f64 / events as f64,
        );
        assert!(f.tokens_per_event.expect("tpe") > 1.5, "speculative steps");
        compared += 1;
    }
    assert_eq!(compared, 2);
}

/// The content rules and the connections: a profile that leaks into CJK or stops early
/// on some requests, and closes each kept-alive connection after three requests (by
/// dropping the fourth, so its client must send it again). Each decode cell's script-mix
/// and stop-early counts are those of its requests in scope that the simulator's truth
/// says it leaked or stopped; the warnings quote the leak; with `content.verdict` the
/// cells are Bad output; reconnects per cell are the truth's connection changes per
/// worker, and the run's retries are the requests the simulator dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_rules_and_connections_agree_with_the_simulators_ground_truth() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = profile("truth-content", &[])
        + "\n[faults]\nscript_leak = 0.25\nstop_early = 0.15\n\n[keepalive]\nmax_requests = 3\nclose = \"race\"\n";
    let (sim, truth_dir) = sim_with_truth(tmp.path(), "truth-content.toml", &p).await;
    let out = tmp.path().join("run");
    let opts = RecordOptions {
        contexts: vec![512],
        concurrency: vec![2, 4],
        window: Duration::from_secs(3),
        max_tokens: 96,
        ..options(sim.url(), &out)
    };
    runner::record(&opts, |_| {}).await.expect("recorded");
    let (_, dropped_on) = sim.connections();
    let (stats, dropped) = sim.stop().expect("truth on");
    stats.expect("truth written");
    assert_eq!(dropped, 0);
    let truth =
        read_table::<TruthRequests>(&truth_dir.join("truth_requests.parquet")).expect("truth");
    let by_sid: BTreeMap<&str, &tokentrace_sim::truth::TruthRequestRow> = truth
        .iter()
        .map(|r| (r.server_request_id.as_str(), r))
        .collect();

    let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
    // Each text read by the content rules as its request ended, then dropped, gives
    // what the rules find in every text kept whole.
    {
        let run = tokentrace_analyzer::run::Run::open(&out).expect("opens");
        let rules = RuleSet::builtin("default").expect("rules");
        let bounds = tokentrace_analyzer::score::Bounds {
            memory_values: None,
            whole_texts: true,
        };
        let (whole, _) = tokentrace_analyzer::score::score_run_with(&run, &rules, false, bounds)
            .expect("scored with whole texts");
        assert_eq!(
            serde_json::to_string(&whole.cells).expect("json"),
            serde_json::to_string(&s.cells).expect("json")
        );
    }
    let (mut leaks, mut stops, mut retries) = (0, 0, 0i64);
    for (key, dir) in list_cells(&out).expect("cells") {
        let requests = read_table::<Requests>(&dir.join("requests.parquet")).expect("requests");
        retries += requests
            .iter()
            .filter_map(|r| r.retries)
            .map(i64::from)
            .sum::<i64>();
        if key.phase != Phase::Decode {
            continue;
        }
        let cell = s.cells.iter().find(|c| c.key() == key).expect("cell");
        let f = cell.figures.as_ref().expect("figures");
        let (open, close) = window(&dir);
        let truth_of = |r: &tokentrace_schemas::tables::RequestRow| {
            r.server_request_id
                .as_deref()
                .and_then(|sid| by_sid.get(sid).copied())
        };
        let in_scope: Vec<_> = requests
            .iter()
            .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
            .filter(|r| r.sent_ns.is_some_and(|t| t < close) && r.end_ns.is_none_or(|e| e >= open))
            .collect();
        let outcome = |what: &str| {
            in_scope
                .iter()
                .filter(|r| truth_of(r).is_some_and(|t| t.outcome == what))
                .count() as i64
        };
        // A request cancelled at the cell's end may have streamed too little of its
        // fault to be found: the finished ones must be, and none beyond those with the
        // fault.
        let bounds = |what: &str| {
            let finished = in_scope
                .iter()
                .filter(|r| r.end_reason.as_str().starts_with("finished"))
                .filter(|r| truth_of(r).is_some_and(|t| t.outcome == what))
                .count() as i64;
            (finished, outcome(what))
        };
        let (leaked, stopped) = (bounds("fault:script_leak"), bounds("fault:stop_early"));
        eprintln!(
            "{key}: script mix {:?} (truth {leaked:?}), stop early {:?} (truth {stopped:?}), of {}",
            f.script_mix_requests,
            f.stop_early_requests,
            in_scope.len()
        );
        let within = |v: Option<i64>, (lo, hi): (i64, i64)| v.is_some_and(|v| lo <= v && v <= hi);
        assert!(within(f.script_mix_requests, leaked), "{key}");
        assert!(within(f.stop_early_requests, stopped), "{key}");
        assert_eq!(f.empty_output_requests, Some(0), "{key}");
        assert_eq!(
            f.content_flags,
            Some(f.script_mix_requests.unwrap_or(0) + f.stop_early_requests.unwrap_or(0)),
            "{key}"
        );
        let (leaked, stopped) = (
            f.script_mix_requests.unwrap_or(0),
            f.stop_early_requests.unwrap_or(0),
        );
        leaks += leaked;
        stops += stopped;
        if leaked > 0 {
            let w = cell
                .warnings
                .iter()
                .find_map(|w| match w {
                    Warning::Content(c) if c.check == "script_mix" => Some(c),
                    _ => None,
                })
                .expect("script-mix warning");
            assert!(
                w.findings[0]
                    .excerpt
                    .chars()
                    .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
                "{:?}",
                w.findings[0]
            );
            assert!(w.findings[0].detail.contains("Han"), "{:?}", w.findings[0]);
        }

        // Reconnects: per worker, requests after its first in the cell that came on
        // another connection than the one before.
        let mut slots: BTreeMap<i32, Vec<_>> = BTreeMap::new();
        for r in requests
            .iter()
            .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
        {
            if let (Some(slot), Some(t)) = (r.slot, truth_of(r)) {
                slots
                    .entry(slot)
                    .or_default()
                    .push((r.sent_ns, t.connection));
            }
        }
        let changes: i64 = slots
            .values_mut()
            .map(|v| {
                v.sort_unstable();
                v.windows(2).filter(|w| w[0].1 != w[1].1).count() as i64
            })
            .sum();
        eprintln!("{key}: reconnects {:?} (truth {changes})", f.reconnects);
        assert_eq!(f.reconnects, Some(changes), "{key}");
        assert!(
            changes > 0,
            "{key}: the keep-alive limit closed connections"
        );
        // Without speculative decoding (the simulator then has no such counters, as
        // vLLM), the figures are missing with the reason.
        assert!(f.spec_acceptance_rate.is_none());
        let why = &f.unavailable["spec_acceptance_rate"];
        assert!(
            why.contains("vllm:spec_decode_num_accepted_tokens_total"),
            "{why}"
        );
    }
    assert!(
        leaks > 0 && stops > 0,
        "the faults fired: {leaks} leaks, {stops} stops"
    );
    // Every generation request the simulator dropped was sent again by the recorder: the
    // drops on connections that carried generation requests (scrapes and probes have
    // connections of their own).
    let generation: BTreeSet<i64> = truth.iter().filter_map(|r| r.connection).collect();
    let dropped_generation = dropped_on
        .iter()
        .filter(|c| generation.contains(&(**c as i64)))
        .count() as i64;
    eprintln!(
        "retries {retries}, generation requests dropped by the simulator {dropped_generation} (all drops {})",
        dropped_on.len()
    );
    assert!(retries > 0);
    assert_eq!(retries, dropped_generation);

    // Made a verdict, the findings take the cells out of the matrix.
    let rules_file = tmp.path().join("strict-content.toml");
    std::fs::write(
        &rules_file,
        "name = \"strict-content\"\nversion = \"1\"\ndescription = \"content findings are verdicts\"\nextends = \"default\"\n\n[content]\nverdict = true\n",
    )
    .expect("rules");
    let strict = RuleSet::load(rules_file.to_str().expect("utf-8")).expect("rules");
    let s = score_dir(&out, &strict).expect("scored");
    let bad = s
        .cells
        .iter()
        .filter(|c| c.phase == Phase::Decode)
        .filter(|c| c.verdict == Some(Verdict::BadOutput))
        .count();
    assert!(bad > 0, "no cell was Bad output");
}
