//! GPU telemetry and found facts, end to end: a simulated box behind the same trait as
//! NVML gives `gpu.parquet` rows and per-cell power and tokens-per-joule figures; a run
//! without NVML has no such table and its report says so; host, GPU and engine facts
//! reach the manifest and the report, and `--describe` overrides them.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use tokentrace_recorder::observe::gpu::{Nvml, SimulatedGpus};
use tokentrace_recorder::run::runner;
use tokentrace_recorder::run::session::GpuChoice;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{Phase, list_cells};
use tokentrace_schemas::manifest::{Manifest, fact};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::Gpu;
use tokentrace_sim::{Profile, SimServer};

use crate::record::options;

fn report(run: &Path, format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(["report", run.to_str().expect("utf-8"), "--format", format])
        .output()
        .expect("report runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

async fn record(gpus: GpuChoice, describe: Vec<(String, String)>, out: &Path) -> Manifest {
    let sim = SimServer::start(
        Profile::load("tiny").expect("tiny"),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("sim");
    let mut opts = options(&sim.url(), out);
    opts.gpus = gpus;
    opts.describe.extend(describe);
    let m = runner::record(&opts, |_| {}).await.expect("recorded");
    sim.stop();
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_box_gives_power_and_tokens_per_joule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let (idle_w, busy_w) = (100.0, 500.0);
    let box2 = Arc::new(SimulatedGpus::new(
        2,
        "NVIDIA H200",
        141 << 30,
        idle_w,
        busy_w,
    ));
    let m = record(
        GpuChoice::Given(box2),
        vec![("engine.quantization".into(), "fp8".into())],
        &out,
    )
    .await;

    // Facts: the simulated GPUs, this host, the engine's info series, the override.
    let facts = &m.facts;
    assert_eq!(fact(facts, "gpu.count"), Some("2"));
    assert_eq!(fact(facts, "gpu.name"), Some("NVIDIA H200 (simulated)"));
    assert!(fact(facts, "host.cpus").is_some(), "{facts:?}");
    assert_eq!(fact(facts, "engine.block_size"), Some("16"), "{facts:?}");
    // tiny's 20,000 tokens of KV cache, as 1,250 blocks of 16 in vLLM's cache config.
    assert_eq!(fact(facts, "engine.kv_cache_tokens"), Some("20000"));
    let q = facts
        .iter()
        .find(|f| f.key == "engine.quantization")
        .expect("override");
    assert_eq!((q.value.as_str(), q.source.as_str()), ("fp8", "--describe"));

    // Telemetry: every cell has a row per GPU per sample.
    for (key, dir) in list_cells(&out).expect("cells") {
        let rows = read_table::<Gpu>(&dir.join("gpu.parquet")).expect("gpu.parquet");
        assert!(
            rows.len() >= 4 && rows.len().is_multiple_of(2),
            "{key:?}: {} rows",
            rows.len()
        );
        assert!(
            rows.iter()
                .all(|r| r.power_w.is_some() && r.energy_mj.is_some())
        );
    }

    // Figures: the window's draw is both GPUs busy; tokens per joule is tok/s over it.
    let json: serde_json::Value = serde_json::from_str(&report(&out, "json")).expect("json");
    assert_eq!(json["run"]["gpu_telemetry"], true);
    let mut decode = 0;
    for c in json["cells"].as_array().expect("cells") {
        if c["phase"] != Phase::Decode.as_str() {
            continue;
        }
        decode += 1;
        let f = &c["figures"];
        let power = f["gpu_power_w"].as_f64().expect("power");
        // (Energy counters are whole millijoules: a rounding's worth above the draw.)
        assert!(
            power > 2.0 * idle_w && power <= 2.0 * busy_w * 1.001,
            "{power} W"
        );
        let rate = f["total_tok_s"].as_f64().expect("rate");
        let per_joule = f["tokens_per_joule"].as_f64().expect("tok/J");
        assert!(
            (per_joule - rate / power).abs() < 1e-9,
            "{per_joule} vs {rate}/{power}"
        );
    }
    assert_eq!(decode, 2);
    let md = report(&out, "md");
    let section = &md[md.find("## GPU power").expect("power section")..];
    assert!(
        section.contains(" W · ") && section.contains(" tok/J"),
        "{section}"
    );
    assert!(
        md.contains("**sim-tiny** on loopback") || md.contains(" on loopback"),
        "{md}"
    );
    assert!(md.contains("- GPU: NVIDIA H200 (simulated)"), "{md}");
    assert!(md.contains("- Block size: 16"), "{md}");
    assert!(md.contains("- Quantization: fp8"), "{md}");
    let csv = report(&out, "csv");
    assert!(
        csv.lines().next().is_some_and(
            |h| h.contains(",gpu_power_w,tokens_per_joule,") && h.ends_with(",warnings")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nvml_there_is_no_gpu_table_and_the_report_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let nvml = Nvml::load();
    let choice = if nvml.is_ok() {
        // A host with NVIDIA's library: the off switch gives the same absence.
        GpuChoice::Off
    } else {
        GpuChoice::Auto
    };
    let m = record(choice, Vec::new(), &out).await;
    let telemetry = fact(&m.facts, "gpu.telemetry").expect("says why");
    assert!(telemetry.starts_with("none: "), "{telemetry}");
    assert!(fact(&m.facts, "gpu.count").is_none());
    for (_, dir) in list_cells(&out).expect("cells") {
        assert!(!dir.join("gpu.parquet").exists());
    }
    let md = report(&out, "md");
    let why = telemetry.trim_start_matches("none: ");
    assert!(
        md.contains(&format!(
            "No GPU telemetry: the recorder had none ({why}), so there are no power or tokens-per-joule figures."
        )),
        "{md}"
    );
    if let Err(e) = nvml {
        assert_eq!(why, e, "the reason is NVML's own");
    }
}
