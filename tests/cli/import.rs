//! `tokentrace import`: the reference tool's results files (0.4.18 captured from the tool
//! itself, 0.6.0 built from its writer's code: fixtures/refbench/README.md) become run
//! folders whose every figure is the file's; report, check and rescore read them; bad
//! files exit 2 naming what was expected.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::report::tokentrace;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/refbench")
        .join(name)
}

/// Imports `file` into `dir/run`: the run folder, and what the command printed.
fn import(file: &Path, dir: &Path) -> (PathBuf, String) {
    let run = dir.join("run");
    let (code, out, err) = tokentrace(&[
        "import",
        file.to_str().expect("utf-8"),
        "--out",
        run.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    (run, format!("{out}{err}"))
}

/// The run's JSON scoring, checked against the committed schema.
fn scoring(run: &Path) -> Value {
    let (code, out, err) =
        tokentrace(&["report", run.to_str().expect("utf-8"), "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).expect("the scoring");
    crate::report::assert_schema_valid(&json, &run.display().to_string());
    json
}

fn source(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name)).expect("fixture")).expect("json")
}

/// The scoring's cell of `phase`, `context`, `concurrency`.
fn cell<'a>(s: &'a Value, phase: &str, context: u64, concurrency: u64) -> &'a Value {
    s["cells"]
        .as_array()
        .and_then(|c| {
            c.iter().find(|c| {
                c["phase"] == phase && c["context"] == context && c["concurrency"] == concurrency
            })
        })
        .unwrap_or_else(|| panic!("no {phase} cell {context} × {concurrency}"))
}

/// A statistic of the file in seconds against a summary in ms: the tool's 0 is "no data".
fn same_ms(what: &str, file: &Value, ms: &Value) {
    let s = file.as_f64().expect("a number");
    if s > 0.0 {
        let got = ms.as_f64().unwrap_or(f64::NAN);
        assert!(
            (got - s * 1e3).abs() <= 1e-9 * got.abs().max(1.0),
            "{what}: {got} ms, the file {s} s"
        );
    } else {
        assert!(ms.is_null(), "{what}: {ms}, the file has no data");
    }
}

#[test]
fn every_figure_equals_the_source_files() {
    for name in [
        "0.4.18-mock-complete.json",
        "0.4.18-mock-interrupted.json",
        "0.4.18-mock-http500.json",
        "0.6.0-built-from-code.json",
        "0.6.0-loop-built-from-code.json",
        "0.4.18-sim-burst.json",
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (run, _) = import(&fixture(name), tmp.path());
        // The file is kept byte for byte, and the manifest names it.
        let kept = std::fs::read(run.join("source").join(name)).expect("kept");
        assert_eq!(
            kept,
            std::fs::read(fixture(name)).expect("fixture"),
            "{name}"
        );
        let m: Value =
            serde_json::from_slice(&std::fs::read(run.join("manifest.json")).expect("manifest"))
                .expect("json");
        assert_eq!(m["schema_version"], 4, "{name}");
        assert_eq!(m["imported"]["tool"], "llm-inference-bench");
        assert_eq!(m["imported"]["file"], name);
        let src = source(name);
        assert_eq!(m["imported"]["version"], src["metadata"]["version"]);
        let s = scoring(&run);
        assert_eq!(s["rules"]["name"], "llm-inference-bench", "{name}");
        let cells = src["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| ("decode", r))
            .chain(
                src["burst_results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| ("burst", r)),
            );
        for (phase, r) in cells {
            let (ctx, n) = (r["context_tokens"].as_u64(), r["concurrency"].as_u64());
            let c = cell(&s, phase, ctx.expect("context"), n.expect("concurrency"));
            let f = &c["figures"];
            let what = |k: &str| format!("{name} {ctx:?}×{n:?} {k}");
            let tps = r["aggregate_tps"].as_f64().expect("tps");
            if c["verdict"] == "error" || c["verdict"] == "looped" || tps < 0.0 {
                assert!(f["total_tok_s"].is_null(), "{}", what("tok/s"));
            } else {
                assert_eq!(f["total_tok_s"].as_f64(), Some(tps), "{}", what("tok/s"));
                assert_eq!(
                    f["per_request_tok_s"]["median"].as_f64(),
                    r["per_request_avg_tps"].as_f64().filter(|x| *x > 0.0),
                    "{}",
                    what("per request")
                );
            }
            for (stem, figure) in [
                ("ttft", "ttft_ms"),
                ("inter_token_latency", "time_between_tokens_ms"),
                ("request_latency", "e2e_latency_ms"),
            ] {
                same_ms(&what(stem), &r[format!("{stem}_p50")], &f[figure]["median"]);
                same_ms(
                    &what(stem),
                    &r[format!("{stem}_p90")],
                    &f[figure]["percentiles"]["p90"],
                );
                same_ms(
                    &what(stem),
                    &r[format!("{stem}_p99")],
                    &f[figure]["percentiles"]["p99"],
                );
            }
            let running = r["avg_running_reqs"].as_f64().expect("running");
            if running > 0.0 {
                assert_eq!(
                    f["active_requests"].as_f64(),
                    Some(running),
                    "{}",
                    what("active")
                );
            }
            assert_eq!(f["completed_requests"], r["completed_request_count"]);
            assert_eq!(f["output_tokens"], r["client_output_tokens"]);
            if phase == "burst" {
                let completed = r["completed_request_count"].as_f64().expect("completed");
                let seconds = r["measurement_seconds"].as_f64().expect("seconds");
                assert_eq!(f["request_rate"].as_f64(), Some(completed / seconds));
            }
            // The tool's own verdict.
            let want = if r["loop_detected"] == true {
                "looped"
            } else if r["request_count"] == 0 && r["num_errors"].as_u64() > Some(0) {
                "error"
            } else if r["capacity_limited"] == true {
                "requests_queued"
            } else {
                "valid"
            };
            assert_eq!(c["verdict"], want, "{}", what("verdict"));
        }
        for (ctx, p) in src["prefill"].as_object().expect("prefill") {
            let c = cell(&s, "prefill", ctx.parse().expect("context"), 1);
            let f = &c["figures"];
            assert_eq!(f["prompt_tok_s"], p["tok_per_sec"], "{name} prefill {ctx}");
            same_ms("prefill ttft", &p["ttft_seconds"], &f["ttft_ms"]["median"]);
        }
        // check verifies it; rescore refuses it, saying why.
        let dir = run.to_str().expect("utf-8");
        let (code, out, err) = tokentrace(&["check", dir]);
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(out.contains("checksums verified"), "{out}");
        let (code, _, err) = tokentrace(&["rescore", dir]);
        assert_eq!(code, 1, "{name}: {err}");
        assert!(
            err.contains("not re-scorable") && err.contains("no trace to score"),
            "{err}"
        );
        assert!(!run.join("results").exists());
    }
}

#[test]
fn the_report_says_where_the_figures_came_from() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, said) = import(&fixture("0.4.18-mock-complete.json"), tmp.path());
    assert!(
        said.contains("imported llm-inference-bench 0.4.18 (3 cells)"),
        "{said}"
    );
    let (code, md, err) = tokentrace(&["report", run.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        md.contains(
            "imported from llm-inference-bench 0.4.18: figures as that tool computed them; not re-scorable"
        ),
        "{md}"
    );
    assert!(
        md.contains("| 1K | 91.3 · 54 ms TTFT | 183.1 · Requests queued"),
        "{md}"
    );
    assert!(
        md.contains("llm-inference-bench says capacity-limited"),
        "{md}"
    );
    assert!(
        md.contains("- Imported from: 0.4.18-mock-complete.json (SHA-256 "),
        "{md}"
    );
    // Nothing records into it or reparses it.
    let dir = run.to_str().expect("utf-8");
    let other = tmp.path().join("reparsed");
    let (code, _, err) = tokentrace(&["reparse", dir, "--out", other.to_str().expect("utf-8")]);
    assert_ne!(code, 0);
    assert!(
        err.contains("imported from llm-inference-bench 0.4.18: no raw capture"),
        "{err}"
    );
    let (code, _, err) = tokentrace(&[
        "record",
        "--out",
        dir,
        "--resume",
        "--sim-profile",
        "tiny",
        "--contexts",
        "1K",
        "--concurrency",
        "1",
        "--duration",
        "1s",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains(
            "imported from llm-inference-bench 0.4.18: its cells hold that tool's figures"
        ),
        "{err}"
    );
    assert!(!other.exists());
    // Nor is it followed as a recording.
    let (code, _, err) = tokentrace(&["watch", dir, "--display", "plain"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("imported from llm-inference-bench 0.4.18: no recording to follow"),
        "{err}"
    );
    let (code, _, err) = tokentrace(&["sim", "--replay", dir, "--listen", "127.0.0.1:0"]);
    assert_ne!(code, 0);
    assert!(err.contains("imported from llm-inference-bench 0.4.18: its cells hold that tool's figures, no recorded streams"), "{err}");
    // An interrupted run is imported and said to be.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, said) = import(&fixture("0.4.18-mock-interrupted.json"), tmp.path());
    assert!(
        said.contains("the llm-inference-bench run was interrupted"),
        "{said}"
    );
    let (_, md, _) = tokentrace(&["report", run.to_str().expect("utf-8")]);
    assert!(md.contains("the run was interrupted"), "{md}");
}

#[test]
fn a_server_with_credentials_is_kept_without_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut v = source("0.6.0-built-from-code.json");
    let secret = "http://alice:hunter2@10.0.0.5:8000/v1?api_key=sk-abc123";
    v["metadata"]["server"] = secret.into();
    v["startup_diagnostics"]["server_url"] = secret.into();
    let file = tmp.path().join("results.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
    let (run, _) = import(&file, tmp.path());
    let m: Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(
        m["target"]["url"],
        "http://10.0.0.5:8000/v1?api_key=<redacted>"
    );
    let s = scoring(&run);
    assert_eq!(
        s["run"]["target"],
        "http://10.0.0.5:8000/v1?api_key=<redacted>"
    );
}

#[test]
fn an_unknown_version_is_imported_by_the_fields_it_shares() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut v = source("0.6.0-built-from-code.json");
    v["metadata"]["version"] = "0.7.3".into();
    v["results"][0]["joules_per_token"] = 0.4.into();
    v["gpu_timeline"] = Value::Array(Vec::new());
    let file = tmp.path().join("results-0.7.3.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
    let (run, said) = import(&file, tmp.path());
    assert!(
        said.contains("0.7.3 is not a version whose results file was read here")
            && said.contains("skipped: gpu_timeline, results[].joules_per_token"),
        "{said}"
    );
    let m: Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(
        m["imported"]["skipped"],
        serde_json::json!(["gpu_timeline", "results[].joules_per_token"])
    );
    let s = scoring(&run);
    let first = &v["results"][0];
    let c = cell(
        &s,
        "decode",
        first["context_tokens"].as_u64().expect("context"),
        first["concurrency"].as_u64().expect("concurrency"),
    );
    assert_eq!(c["figures"]["total_tok_s"], first["aggregate_tps"]);
}

#[test]
fn files_that_are_not_results_exit_2_naming_what_was_expected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let good = std::fs::read(fixture("0.4.18-mock-complete.json")).expect("fixture");
    let v: Value = serde_json::from_slice(&good).expect("json");
    let mut wrong_type = v.clone();
    wrong_type["results"][1]["ttft_p50"] = "fast".into();
    let mut empty = v.clone();
    empty["results"] = Value::Array(Vec::new());
    empty["prefill"] = Value::Object(Default::default());
    let in_progress = serde_json::json!({
        "signature": {"version": "0.6.0"},
        "timestamp": "2026-05-20T14:03:27",
        "results": [],
        "burst_results": [],
        "prefill_results": {}
    });
    let cases: [(&str, Vec<u8>, &str); 6] = [
        (
            "truncated",
            good[..good.len() / 2].to_vec(),
            "not JSON (EOF while parsing",
        ),
        (
            "wrong-type",
            serde_json::to_vec(&wrong_type).expect("json"),
            "results[1].ttft_p50: expected a number, found a string",
        ),
        (
            "empty",
            serde_json::to_vec(&empty).expect("json"),
            "no results: the file holds no prefill, decode or burst cell",
        ),
        (
            "in-progress",
            serde_json::to_vec(&in_progress).expect("json"),
            "a checkpoint of a run still in progress",
        ),
        (
            "other",
            br#"{"format": "tokentrace.scoring", "cells": []}"#.to_vec(),
            "not an llm-inference-bench results file: expected a JSON object with `metadata`, `results` and `summary_table`",
        ),
        (
            "p2pmark",
            br#"{"metadata": {"version": "0.4.18", "mode": "p2pmark_only"}, "p2pmark": {}}"#
                .to_vec(),
            "a `p2pmark_only` report of llm-inference-bench, not a decode matrix",
        ),
    ];
    for (name, bytes, says) in cases {
        let file = tmp.path().join(format!("{name}.json"));
        std::fs::write(&file, bytes).expect("write");
        let run = tmp.path().join(format!("run-{name}"));
        let (code, out, err) = tokentrace(&[
            "import",
            file.to_str().expect("utf-8"),
            "--out",
            run.to_str().expect("utf-8"),
        ]);
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(err.contains(&format!("{name}.json")), "{name}: {err}");
        assert!(!run.exists(), "{name}: a folder was written");
    }
}

/// The reference tool (0.4.18) and tokentrace recorded the same simulator profile and
/// matrix (`bench/parity.sh 1k 1,4 10`): the diff of the imported file and tokentrace's
/// run, scored under `reference`, shows what parity.sh printed: verdicts equal, total
/// tok/s within 5% (0.6% and 0.1%), each side's figure its own tool's.
#[test]
fn an_imported_run_beside_a_recorded_one_in_diff() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, _) = import(&fixture("0.4.18-sim.json"), tmp.path());
    let recorded = fixture("0.4.18-sim-tokentrace-run");
    let (code, out, err) = tokentrace(&[
        "diff",
        run.to_str().expect("utf-8"),
        recorded.to_str().expect("utf-8"),
        "--rules",
        "reference",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let d: Value = serde_json::from_str(&out).expect("the diff");
    assert_eq!(d["verdicts_changed"], serde_json::json!([]), "{d:#}");
    assert_eq!(d["only_in_a"], serde_json::json!([]));
    assert_eq!(d["only_in_b"], serde_json::json!([]));
    let src = source("0.4.18-sim.json");
    let ours = scoring(&recorded);
    let mut decode = 0;
    for c in d["figures_changed"].as_array().expect("cells") {
        if c["cell"]["phase"] != "decode" {
            continue;
        }
        decode += 1;
        let (ctx, n) = (&c["cell"]["context"], &c["cell"]["concurrency"]);
        let tps = c["figures"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["figure"] == "total_tok_s"))
            .expect("total tok/s");
        let file = src["results"]
            .as_array()
            .and_then(|r| {
                r.iter()
                    .find(|r| &r["context_tokens"] == ctx && &r["concurrency"] == n)
            })
            .expect("the file's cell");
        assert_eq!(tps["a"], file["aggregate_tps"]);
        let recorded_cell = cell(
            &ours,
            "decode",
            ctx.as_u64().expect("context"),
            n.as_u64().expect("concurrency"),
        );
        let b = tps["b"].as_f64().expect("b");
        let own = recorded_cell["figures"]["total_tok_s"]
            .as_f64()
            .expect("ours");
        assert!((b / own - 1.0).abs() < 1e-3, "{b} vs {own} (default rules)");
        let ratio = tps["relative"].as_f64().expect("ratio");
        assert!(ratio.abs() < 0.05, "{ctx} × {n}: {ratio}");
    }
    assert_eq!(decode, 2);
    // The HTML comparison puts them side by side, the imported run's header saying so.
    let page = tmp.path().join("compare.html");
    let (code, _, err) = tokentrace(&[
        "report",
        run.to_str().expect("utf-8"),
        recorded.to_str().expect("utf-8"),
        "--format",
        "html",
        "--out",
        page.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(
        html.contains("imported from llm-inference-bench 0.4.18"),
        "the page does not say where A's figures came from"
    );
    assert!(
        html.contains("745.1") && html.contains("746.0"),
        "both matrices"
    );
}

/// 0.6.1 on, a failed stream invalidates its cell: `aggregate_tps` −4.0, the message in
/// `failure_reason` (its `finish_error_cell`), the summary null. Built from the 0.6.0
/// fixture as that writer would change it.
#[test]
fn a_failed_stream_of_0_6_1_is_an_error_cell_with_its_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut v = source("0.6.0-built-from-code.json");
    v["metadata"]["version"] = "0.6.1".into();
    let first = &mut v["results"][0];
    first["aggregate_tps"] = (-4.0).into();
    first["failure_reason"] = "engine disconnected: HTTP 502".into();
    first["aggregate_source"] = "invalid_stream_failure".into();
    let (ctx, n) = (
        first["context_tokens"].as_u64().expect("context"),
        first["concurrency"].as_u64().expect("concurrency"),
    );
    let file = tmp.path().join("results-0.6.1.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
    let (run, said) = import(&file, tmp.path());
    assert!(
        !said.contains("warning"),
        "0.6.1 is a known version: {said}"
    );
    let s = scoring(&run);
    let c = cell(&s, "decode", ctx, n);
    assert_eq!(c["verdict"], "error");
    assert!(c["figures"]["total_tok_s"].is_null());
    assert_eq!(c["evidence"][0]["rule"], "imported");
    assert_eq!(
        c["evidence"][0]["said"],
        "llm-inference-bench: a stream failed: engine disconnected: HTTP 502"
    );
}
