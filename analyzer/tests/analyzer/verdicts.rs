//! Each verdict fires on the synthetic cell built to trigger it, carries its evidence,
//! and leaves the other cells valid; thresholds come from the rule set.

use std::path::Path;

use tokentrace_analyzer::contract::{Evidence, Scoring, Verdict, Warning};
use tokentrace_analyzer::rules::{Channel, parse};
use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_testkit::synth::{self, DecodeSpec};

const CYCLE: &str = "and then the model says the very same sentence once again. ";

fn key(concurrency: u32) -> CellKey {
    CellKey::new(Phase::Decode, 2048, concurrency)
}

/// Five decode cells: valid, failing, looping, waiting 0.2 on average, running short.
fn write_run(dir: &Path) {
    let specs = [
        DecodeSpec::new(key(1), 6_000),
        DecodeSpec {
            failing: Some(1),
            ..DecodeSpec::new(key(2), 12_000)
        },
        DecodeSpec {
            looping: Some((2, CYCLE.to_string())),
            ..DecodeSpec::new(key(3), 15_000)
        },
        DecodeSpec {
            waiting: 0.2,
            ..DecodeSpec::new(key(4), 15_000)
        },
        DecodeSpec {
            running: Some(4.0),
            ..DecodeSpec::new(key(8), 20_000)
        },
    ];
    for s in &specs {
        synth::write_decode_cell(dir, s).expect("cell");
    }
    let keys: Vec<CellKey> = specs.iter().map(|s| s.key).collect();
    synth::manifest("verdicts", &keys)
        .write(dir)
        .expect("manifest");
}

fn verdicts(s: &Scoring) -> Vec<(u32, Option<Verdict>)> {
    s.cells.iter().map(|c| (c.concurrency, c.verdict)).collect()
}

#[test]
fn each_rule_fires_on_its_cell_with_evidence() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_run(dir.path());
    let s = score_dir(dir.path(), &RuleSet::builtin("reference").expect("rules")).expect("scored");
    assert_eq!(
        verdicts(&s),
        vec![
            (1, Some(Verdict::Valid)),
            (2, Some(Verdict::Error)),
            (3, Some(Verdict::Looped)),
            (4, Some(Verdict::RequestsQueued)),
            (8, Some(Verdict::RequestsQueued)),
        ]
    );
    let cell = |n: u32| s.cells.iter().find(|c| c.concurrency == n).expect("cell");
    assert!(cell(1).evidence.is_empty());
    match &cell(2).evidence[..] {
        [
            Evidence::FailedStream {
                end_reason, error, ..
            },
        ] => {
            assert_eq!(end_reason, "stream_error");
            assert_eq!(error.as_deref(), Some("synthetic failure"));
        }
        other => panic!("{other:?}"),
    }
    let loops: Vec<_> = cell(3)
        .evidence
        .iter()
        .map(|e| match e {
            Evidence::Loop(l) => l,
            other => panic!("{other:?}"),
        })
        .collect();
    // Both channels of the looping request repeat the cycle.
    assert_eq!(
        loops.iter().map(|l| l.channel).collect::<Vec<_>>(),
        vec![Channel::Content, Channel::Reasoning]
    );
    for l in &loops {
        assert_eq!(l.cycle_chars, CYCLE.chars().count());
        assert!(l.cycles >= 4 && l.span_chars >= 4096, "{l:?}");
        assert!(CYCLE.contains(l.cycle_excerpt.trim()), "{l:?}");
    }
    // Waiting 0.2 at every scrape: the mean and the samples are above 0.
    let rules: Vec<&str> = cell(4)
        .evidence
        .iter()
        .map(|e| match e {
            Evidence::WaitingMeanAbove { .. } => "mean",
            Evidence::WaitingSampleAbove { .. } => "sample",
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(rules, ["mean", "sample"]);
    match &cell(8).evidence[..] {
        [
            Evidence::RunningNeverReachedN {
                max, concurrency, ..
            },
            Evidence::RunningMeanBelow {
                mean, threshold, ..
            },
        ] => {
            assert_eq!((*max, *concurrency), (4.0, 8));
            assert_eq!((*mean, *threshold), (4.0, 7.6));
        }
        other => panic!("{other:?}"),
    }
    // A looped or failed cell shows no throughput in the report; its figures stay in JSON.
    assert!(
        cell(3)
            .figures
            .as_ref()
            .is_some_and(|f| f.output_tokens > 0)
    );
}

#[test]
fn thresholds_are_parameters() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_run(dir.path());
    // The default rule set wants half a request waiting on average: 0.2 is not queued.
    let s = score_dir(dir.path(), &RuleSet::builtin("default").expect("rules")).expect("scored");
    assert_eq!(s.cells[3].verdict, Some(Verdict::Valid));
    // A loop needs 4,096 characters; at 10 million the looping cell is only suspected.
    let lenient = parse(
        "name = \"lenient\"\nversion = \"1\"\nextends = \"reference\"\n\
         [looped]\nmin_span_chars = 10000000\nsuspect_min_span_chars = 1024\n",
        Path::new("lenient.toml"),
    )
    .expect("rules");
    let s = score_dir(dir.path(), &lenient).expect("scored");
    assert_eq!(s.cells[2].verdict, Some(Verdict::Valid));
    assert!(
        s.cells[2]
            .warnings
            .iter()
            .any(|w| matches!(w, Warning::SuspectedLoop(_))),
        "{:?}",
        s.cells[2].warnings
    );
    // Errors only from the window vs any request: the same here (all in the window).
    assert_eq!(s.cells[1].verdict, Some(Verdict::Error));
}

#[test]
fn scoring_is_deterministic() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_run(dir.path());
    let rules = RuleSet::builtin("reference").expect("rules");
    let a = tokentrace_analyzer::report::json(&score_dir(dir.path(), &rules).expect("a"));
    let b = tokentrace_analyzer::report::json(&score_dir(dir.path(), &rules).expect("b"));
    assert_eq!(a, b);
}

/// A scout answered from the prefix cache is never a Valid prefill, and a decode request
/// that prefilled cold is named; the default set keeps it out of the TTFT median, the
/// reference set keeps it in (default 1.0.0 predates both checks).
#[test]
fn a_cached_scout_and_a_cold_decode_request_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefill = CellKey::new(Phase::Prefill, 2048, 1);
    synth::write_prefill_cell_cached(dir.path(), prefill, 2_000_000, 2047).expect("prefill");
    // Request 1 of 4 prefilled cold: 20 s before its first token.
    let decode = DecodeSpec {
        cold: Some((1, 20_000_000_000)),
        ..DecodeSpec::new(key(4), 15_000)
    };
    synth::write_decode_cell(dir.path(), &decode).expect("decode");
    synth::manifest("cache", &[prefill, key(4)])
        .write(dir.path())
        .expect("manifest");
    let score = |rules: &str| {
        score_dir(dir.path(), &RuleSet::builtin(rules).expect("rules")).expect("scored")
    };
    let ttft = |s: &Scoring| {
        s.cells[1]
            .figures
            .as_ref()
            .and_then(|f| f.ttft_ms.median)
            .expect("ttft")
    };

    let default = score("default");
    let scout = &default.cells[0];
    assert_eq!(scout.verdict, Some(Verdict::PrefillCached));
    assert!(matches!(
        scout.evidence[..],
        [Evidence::ScoutCached {
            cached_tokens: 2047,
            prompt_tokens: 2048,
            ..
        }]
    ));
    let cold: Vec<_> = default.cells[1]
        .warnings
        .iter()
        .filter_map(|w| match w {
            Warning::ColdPrefill {
                requests,
                excluded_from_ttft,
                ..
            } => Some((requests.clone(), *excluded_from_ttft)),
            _ => None,
        })
        .collect();
    assert_eq!(cold.len(), 1, "{:?}", default.cells[1].warnings);
    let (requests, excluded) = &cold[0];
    assert!(excluded);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].cached_tokens, 0);
    assert!(requests[0].ttft_ms.is_some_and(|t| t >= 20_000.0));
    let md = tokentrace_analyzer::report::render(
        &default,
        tokentrace_analyzer::report::Format::Markdown,
    );
    assert!(md.contains("| 2K | — | — | Served from cache |"), "{md}");
    assert!(md.contains("prefilled cold"), "{md}");

    let reference = score("reference");
    assert_eq!(reference.cells[0].verdict, Some(Verdict::PrefillCached));
    assert!(reference.cells[1].warnings.iter().any(|w| matches!(
        w,
        Warning::ColdPrefill {
            excluded_from_ttft: false,
            ..
        }
    )));
    let old = score("default@1.0.0");
    assert_eq!(
        old.cells[0].verdict,
        Some(Verdict::Valid),
        "1.0.0 had no cache check"
    );
    // The cold request's 20 s is in the 1.0.0 median's input; not in 1.1.0's.
    let (with_cold, without) = (ttft(&old), ttft(&default));
    assert!(
        without < 200.0 && without <= with_cold,
        "{without} vs {with_cold}"
    );
}

/// A request that came through a buffering proxy (its events released every 500 ms,
/// ~50 to a read) is warned of as re-chunked by the network, and default 1.7.0 leaves it
/// out of TTFT, time between tokens and ITL but keeps its tokens in total tok/s; default
/// 1.6.0 has no such rule and scores it as before.
#[test]
fn a_stream_the_network_buffered_is_named_and_kept_out_of_latency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = DecodeSpec {
        buffered: Some((2, 500_000_000)),
        ..DecodeSpec::new(key(4), 15_000)
    };
    synth::write_decode_cell(dir.path(), &spec).expect("decode");
    synth::manifest("buffered", &[key(4)])
        .write(dir.path())
        .expect("manifest");
    let score = |rules: &str| {
        score_dir(dir.path(), &RuleSet::builtin(rules).expect("rules")).expect("scored")
    };
    let (new, old) = (score("default"), score("default@1.6.0"));
    let found: Vec<_> = new.cells[0]
        .warnings
        .iter()
        .filter_map(|w| match w {
            Warning::Rechunked(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "{:?}", new.cells[0].warnings);
    let e = &found[0];
    assert_eq!(e.fault, "buffering");
    assert_eq!((e.requests.len(), e.more), (1, 0), "{e:?}");
    assert!(e.of >= 4, "{e:?}");
    let r = &e.requests[0];
    assert!(r.token_events >= 40 * r.reads, "{r:?}");
    assert!(r.largest_read >= 40, "{r:?}");
    assert!(e.excluded_from_latency);
    // The synthetic server's own pace, from its counter and gauge: a step every 10 ms.
    let server = e.server_token_interval_ms.expect("the server's pace");
    assert!((9.0..=11.0).contains(&server), "{server}");
    assert!(
        !old.cells[0]
            .warnings
            .iter()
            .any(|w| w.kind() == "rechunked")
    );
    let figures = |s: &Scoring| s.cells[0].figures.clone().expect("figures");
    let (f_new, f_old) = (figures(&new), figures(&old));
    assert_eq!(f_new.ttft_ms.n + 1, f_old.ttft_ms.n);
    assert_eq!(
        f_new.time_between_tokens_ms.n + 1,
        f_old.time_between_tokens_ms.n
    );
    assert!(f_new.itl_ms.n < f_old.itl_ms.n);
    // Its gaps of 0 and ~500 ms are gone from ITL: what is left is the server's steps.
    let (max_new, max_old) = (f_new.itl_ms.max, f_old.itl_ms.max);
    assert!(
        max_new.is_some_and(|m| m < 20.0) && max_old.is_some_and(|m| m > 100.0),
        "{max_new:?} {max_old:?}"
    );
    assert_eq!(f_new.total_tok_s, f_old.total_tok_s);
    assert_eq!(f_new.output_tokens, f_old.output_tokens);
    let md =
        tokentrace_analyzer::report::render(&new, tokentrace_analyzer::report::Format::Markdown);
    assert!(md.contains("the network re-chunked 1 of"), "{md}");
}

/// Issue 14: a 3-stream cell whose scrapes all read 3 running and none waiting, but for
/// the ones given: (scrape index, running, waiting).
fn dip_run(dir: &Path, overrides: Vec<(usize, f64, f64)>) {
    let spec = DecodeSpec {
        scrape_overrides: overrides,
        ..DecodeSpec::new(key(3), 2_400)
    };
    synth::write_decode_cell(dir, &spec).expect("cell");
    synth::manifest("dip", &[spec.key])
        .write(dir)
        .expect("manifest");
}

fn queue_evidence(s: &Scoring) -> Vec<&'static str> {
    s.cells[0]
        .evidence
        .iter()
        .map(|e| match e {
            Evidence::RunningNeverReachedN { .. } => "never_reached",
            Evidence::RunningMeanBelow { .. } => "running_mean",
            Evidence::WaitingMeanAbove { .. } => "waiting_mean",
            Evidence::WaitingSampleAbove { .. } => "waiting_sample",
            _ => "other",
        })
        .collect()
}

#[test]
fn a_restart_that_one_scrape_lands_on_is_not_a_queue_under_default() {
    // As on llama.cpp with 3 slots: one scrape of the window lands on a closed-loop
    // restart and reads 1 running, nothing waiting.
    let dir = tempfile::tempdir().expect("tempdir");
    dip_run(dir.path(), vec![(1, 1.0, 0.0)]);
    let score = |name: &str| {
        score_dir(dir.path(), &RuleSet::builtin(name).expect("rules")).expect("scored")
    };
    let reference = score("reference");
    assert_eq!(reference.cells[0].verdict, Some(Verdict::RequestsQueued));
    match &reference.cells[0].evidence[..] {
        [Evidence::RunningMeanBelow { mean, samples, .. }] => {
            assert!(*samples >= 3 && *mean < 2.85, "{mean} over {samples}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        score("default@1.1.0").cells[0].verdict,
        Some(Verdict::RequestsQueued),
        "1.1.0 took the dip for a queue"
    );
    let default = score("default");
    assert_eq!(default.cells[0].verdict, Some(Verdict::Valid));
    assert!(default.cells[0].evidence.is_empty());
}

#[test]
fn a_short_running_gauge_with_requests_waiting_is_still_a_queue_under_default() {
    // Two scrapes see a request waiting and one fewer running: the waiting mean stays
    // under default's 0.5, the running mean (below 0.95 × 3) counts because requests
    // did wait.
    let dir = tempfile::tempdir().expect("tempdir");
    dip_run(dir.path(), vec![(1, 2.0, 1.0), (2, 2.0, 1.0)]);
    let default =
        score_dir(dir.path(), &RuleSet::builtin("default").expect("rules")).expect("scored");
    assert_eq!(default.cells[0].verdict, Some(Verdict::RequestsQueued));
    assert_eq!(queue_evidence(&default), ["running_mean"]);
    // One waiting scrape is not enough to corroborate.
    let dir = tempfile::tempdir().expect("tempdir");
    dip_run(dir.path(), vec![(1, 2.0, 1.0), (2, 2.0, 0.0)]);
    let default =
        score_dir(dir.path(), &RuleSet::builtin("default").expect("rules")).expect("scored");
    assert_eq!(default.cells[0].verdict, Some(Verdict::Valid));
}

/// Issue 14: a 4-stream cell with the recorder's lag over its first ten seconds.
fn lag_run(dir: &Path, seconds: Vec<(f64, u32)>, counts: bool) {
    let spec = DecodeSpec {
        lag_seconds: seconds,
        lag_counts: counts,
        ..DecodeSpec::new(key(4), 30_000)
    };
    synth::write_decode_cell(dir, &spec).expect("cell");
    synth::manifest("lag", &[spec.key])
        .write(dir)
        .expect("manifest");
}

fn lag_warnings(s: &Scoring) -> Vec<&Warning> {
    s.cells[0]
        .warnings
        .iter()
        .filter(|w| matches!(w, Warning::ClientLag { .. }))
        .collect()
}

#[test]
fn one_late_tick_is_a_figure_and_sustained_lag_a_warning() {
    let quiet = (0.3, 0);
    let score = |dir: &Path, name: &str| {
        score_dir(dir, &RuleSet::builtin(name).expect("rules")).expect("scored")
    };
    // One hiccup: a single tick 44 ms late among ten seconds of ticks.
    let mut hiccup = vec![quiet; 10];
    hiccup[3] = (44.0, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    lag_run(dir.path(), hiccup.clone(), true);
    for name in ["default", "reference"] {
        let s = score(dir.path(), name);
        assert!(
            lag_warnings(&s).is_empty(),
            "{name}: {:?}",
            s.cells[0].warnings
        );
        let f = s.cells[0].figures.as_ref().expect("figures");
        assert_eq!(f.client_tick_lateness_max_ms, Some(44.0), "{name}");
        let share = f.client_late_tick_share.expect("share");
        assert!((share - 0.001).abs() < 1e-12, "{name}: {share}");
    }
    assert_eq!(
        lag_warnings(&score(dir.path(), "default@1.1.0")).len(),
        1,
        "1.1.0 warned on the one tick"
    );
    // A run from a recorder without tick counts: only the latest tick is known.
    let dir = tempfile::tempdir().expect("tempdir");
    lag_run(dir.path(), hiccup, false);
    assert_eq!(lag_warnings(&score(dir.path(), "default")).len(), 1);
    // Sustained: every second has 5 of its 100 ticks 15 ms late.
    let dir = tempfile::tempdir().expect("tempdir");
    lag_run(dir.path(), vec![(15.0, 5); 10], true);
    let s = score(dir.path(), "default");
    match lag_warnings(&s)[..] {
        [
            Warning::ClientLag {
                late_tick_share: Some(share),
                late_tick_ms: Some(ms),
                late_tick_share_max: Some(max),
                ..
            },
        ] => {
            assert!((share - 0.05).abs() < 1e-12, "{share}");
            assert_eq!((*ms, *max), (10.0, 0.01));
        }
        ref other => panic!("{other:?}"),
    }
}

/// Issue 18: with the engine's KV-cache budget in the manifest, a queued cell's evidence
/// names it (its context × concurrency against the budget), in JSON and in the notes;
/// a Valid cell gets none.
#[test]
fn a_queued_cells_evidence_names_the_kv_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_run(dir.path());
    let mut m = tokentrace_schemas::manifest::Manifest::read(dir.path()).expect("manifest");
    m.facts.push(tokentrace_schemas::manifest::Fact::new(
        "engine.kv_cache_tokens",
        "10000",
        "metrics vllm:cache_config_info: num_gpu_blocks × block_size",
    ));
    m.write(dir.path()).expect("manifest");
    let s = score_dir(dir.path(), &RuleSet::builtin("reference").expect("rules")).expect("scored");
    let kv = |n: u32| {
        s.cells
            .iter()
            .find(|c| c.concurrency == n)
            .expect("cell")
            .evidence
            .iter()
            .find_map(|e| match e {
                Evidence::KvBudget {
                    need_tokens,
                    budget_tokens,
                    ..
                } => Some((*need_tokens, *budget_tokens)),
                _ => None,
            })
    };
    assert_eq!(kv(1), None, "valid: no queue to explain");
    assert_eq!(kv(4), Some((8192, 10000)));
    assert_eq!(kv(8), Some((16384, 10000)));
    let md = tokentrace_analyzer::report::render(&s, tokentrace_analyzer::report::Format::Markdown);
    assert!(
        md.contains(
            "its prompts take 16,384 tokens of KV cache, more than the server's 10,000 \
             (metrics vllm:cache_config_info: num_gpu_blocks × block_size)"
        ),
        "{md}"
    );
    assert!(md.contains("its prompts take 8,192 of the server's 10,000 tokens of KV cache"));
}
