//! `tokentrace catalog` on a small fleet: two simulator runs, a synthetic vLLM run and
//! a matrix of the reference tool's imported, in nested folders, become one Parquet table with a row per run × cell; every row's
//! facts and figures are its run's JSON scoring's; a folder that is not a sound run is
//! named on stderr and left out, the others kept.

use std::path::Path;
use std::process::Command;

use polars::prelude::*;
use tokentrace_schemas::layout::{CellKey, Phase};

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/runs")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read").flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).expect("copy");
        }
    }
}

fn tokentrace(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(args)
        .output()
        .expect("runs")
}

#[test]
fn a_fleet_becomes_one_table() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fleet = tmp.path().join("fleet");
    copy_dir(&fixtures().join("sim-chat"), &fleet.join("sim/chat"));
    copy_dir(
        &fixtures().join("sim-completions"),
        &fleet.join("sim/completions"),
    );
    copy_dir(&fixtures().join("sim-open"), &fleet.join("sim/open"));
    let keys = [
        CellKey::new(Phase::Decode, 1024, 1),
        CellKey::new(Phase::Decode, 1024, 4),
    ];
    tokentrace_testkit::synth::write_run(&fleet.join("vllm/nightly-1"), "run-synth", &keys, 2000)
        .expect("synthetic run");
    // A matrix of the reference tool's, imported: its figures are that tool's.
    let imported = fleet.join("vllm/lib-0.4.18");
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/refbench/0.4.18-mock-complete.json");
    let done = tokentrace(&[
        "import",
        file.to_str().expect("utf-8"),
        "--out",
        imported.to_str().expect("utf-8"),
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let out = tmp.path().join("runs.parquet");
    let fleet_s = fleet.to_str().expect("utf-8");
    let done = tokentrace(&["catalog", fleet_s, "--out", out.to_str().expect("utf-8")]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let said = String::from_utf8_lossy(&done.stdout).to_string();
    assert!(
        said.ends_with("rows from 5 runs under rule set default@1.8.0\n"),
        "{said}"
    );

    let df = LazyFrame::scan_parquet(
        PlRefPath::new(out.to_str().expect("utf-8")),
        ScanArgsParquet::default(),
    )
    .and_then(LazyFrame::collect)
    .expect("read back");
    let text = |name: &str| -> Vec<Option<String>> {
        df.column(name)
            .expect(name)
            .str()
            .expect("text")
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    };
    let numbers = |name: &str| -> Vec<Option<f64>> {
        df.column(name)
            .expect(name)
            .f64()
            .expect("number")
            .iter()
            .collect()
    };
    let ints = |name: &str| -> Vec<Option<i64>> {
        df.column(name)
            .expect(name)
            .i64()
            .expect("integer")
            .iter()
            .collect()
    };
    let (location, engine, phase, verdict) = (
        text("location"),
        text("engine"),
        text("phase"),
        text("verdict"),
    );
    let from = text("figures_from");
    let (context, concurrency, rate, ttft) = (
        ints("context"),
        ints("concurrency"),
        numbers("total_tok_s"),
        numbers("ttft_ms_median"),
    );
    let offered = numbers("rate");
    let mut engines: Vec<String> = engine.iter().flatten().cloned().collect();
    engines.sort();
    engines.dedup();
    assert_eq!(engines, ["tokentrace-sim", "vllm"]);

    // Row for row, each run's JSON scoring, in the order the runs were found.
    let mut row = 0;
    for rel in [
        "sim/chat",
        "sim/completions",
        "sim/open",
        "vllm/lib-0.4.18",
        "vllm/nightly-1",
    ] {
        let run = fleet.join(rel);
        let json = tokentrace(&["report", run.to_str().expect("utf-8"), "--format", "json"]);
        let s: serde_json::Value = serde_json::from_slice(&json.stdout).expect("scoring");
        for c in s["cells"].as_array().expect("cells") {
            assert_eq!(location[row].as_deref(), run.to_str(), "row {row}");
            assert_eq!(phase[row].as_deref(), c["phase"].as_str(), "row {row}");
            assert_eq!(context[row], c["context"].as_i64(), "row {row}");
            assert_eq!(concurrency[row], c["concurrency"].as_i64(), "row {row}");
            // A rate cell's offered rate in requests per second; null for other cells.
            let want_offered = c["rate"].as_str().map(|r| {
                tokentrace_schemas::Rate::parse(r)
                    .expect("a rate")
                    .per_second()
            });
            assert_eq!(offered[row], want_offered, "row {row}");
            assert_eq!(verdict[row].as_deref(), c["verdict"].as_str(), "row {row}");
            // (serde_json's default float parsing may be one ulp off: a relative 1e-12.)
            let same = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-12 * a.abs().max(b.abs()),
                (a, b) => a.is_none() && b.is_none(),
            };
            let (want_rate, want_ttft) = (
                c["figures"]["total_tok_s"].as_f64(),
                c["figures"]["ttft_ms"]["median"].as_f64(),
            );
            assert!(
                same(rate[row], want_rate),
                "row {row}: {:?} vs {want_rate:?}",
                rate[row]
            );
            assert!(
                same(ttft[row], want_ttft),
                "row {row}: {:?} vs {want_ttft:?}",
                ttft[row]
            );
            assert_eq!(engine[row].as_deref(), s["run"]["engine"].as_str());
            let want_from = if rel == "vllm/lib-0.4.18" {
                "llm-inference-bench 0.4.18"
            } else {
                "tokentrace"
            };
            assert_eq!(from[row].as_deref(), Some(want_from), "row {row}");
            row += 1;
        }
    }
    assert_eq!(row, df.height(), "no other rows");

    // A folder with a broken manifest is named and left out; the rest is written.
    std::fs::create_dir_all(fleet.join("broken")).expect("mkdir");
    std::fs::write(fleet.join("broken/manifest.json"), b"{").expect("write");
    let partial = tokentrace(&["catalog", fleet_s, "--out", out.to_str().expect("utf-8")]);
    assert_eq!(partial.status.code(), Some(1));
    let err = String::from_utf8_lossy(&partial.stderr);
    assert!(err.contains("broken: not catalogued:"), "{err}");
    assert!(String::from_utf8_lossy(&partial.stdout).contains(&format!("{row} rows from 5 runs")));
}
