//! The JSON scoring validates against the committed schema (analyzer/schema/), and the
//! schema is strict enough to refuse a scoring with an unknown or missing field.

use tokentrace_analyzer::{RuleSet, report, score_dir};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_testkit::synth::{self, DecodeSpec};

fn validator() -> jsonschema::Validator {
    let text = include_str!("../../schema/scoring.schema.json");
    let schema: serde_json::Value = serde_json::from_str(text).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("schema compiles")
}

#[test]
fn real_output_validates_and_the_schema_is_strict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = [
        CellKey::new(Phase::Decode, 1024, 1),
        CellKey::new(Phase::Decode, 1024, 2),
        CellKey::new(Phase::Decode, 1024, 4),
    ];
    synth::write_decode_cell(dir.path(), &DecodeSpec::new(keys[0], 5_000)).expect("cell");
    synth::write_decode_cell(
        dir.path(),
        &DecodeSpec {
            failing: Some(0),
            looping: Some((1, "over and over and over again, ".to_string())),
            waiting: 1.0,
            ..DecodeSpec::new(keys[1], 9_000)
        },
    )
    .expect("cell");
    // The third cell is listed but never recorded: an unscored cell.
    let mut m = synth::manifest("schema", &keys);
    m.cells[2].status = tokentrace_schemas::manifest::CellStatus::Skipped;
    m.cells[2].reason = Some("over max_model_len".to_string());
    m.write(dir.path()).expect("manifest");
    let v = validator();
    for rules in ["reference", "default"] {
        let s = score_dir(dir.path(), &RuleSet::builtin(rules).expect("rules")).expect("scored");
        let json: serde_json::Value = serde_json::from_str(&report::json(&s)).expect("json");
        let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{rules}: {errors:#?}");
        // Every kind of evidence this run produces is in it.
        let evidence = json["cells"][1]["evidence"].to_string();
        for rule in ["failed_stream", "loop", "waiting_mean_above"] {
            assert!(evidence.contains(rule), "{evidence}");
        }
        assert_eq!(json["cells"][2]["state"], "skipped");

        let mut extra = json.clone();
        extra["cells"][0]["figures"]["surprise"] = 1.into();
        assert!(!v.is_valid(&extra));
        let mut missing = json.clone();
        missing["cells"][1]["evidence"][0]
            .as_object_mut()
            .expect("object")
            .remove("request_id");
        assert!(!v.is_valid(&missing));
        let mut wrong = json.clone();
        wrong["cells"][0]["verdict"] = "fine".into();
        assert!(!v.is_valid(&wrong));
    }
}

#[test]
fn cache_evidence_and_warnings_validate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefill = CellKey::new(Phase::Prefill, 2048, 1);
    let decode = CellKey::new(Phase::Decode, 2048, 4);
    synth::write_prefill_cell_cached(dir.path(), prefill, 2_000_000, 2047).expect("prefill");
    synth::write_decode_cell(
        dir.path(),
        &DecodeSpec {
            cold: Some((1, 20_000_000_000)),
            buffered: Some((2, 500_000_000)),
            ..DecodeSpec::new(decode, 15_000)
        },
    )
    .expect("decode");
    synth::manifest("cache", &[prefill, decode])
        .write(dir.path())
        .expect("manifest");
    let v = validator();
    for rules in ["reference", "default", "default@1.0.0"] {
        let s = score_dir(dir.path(), &RuleSet::builtin(rules).expect("rules")).expect("scored");
        let json: serde_json::Value = serde_json::from_str(&report::json(&s)).expect("json");
        let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{rules}: {errors:#?}");
    }
    let s = score_dir(dir.path(), &RuleSet::builtin("default").expect("rules")).expect("scored");
    let json = report::json(&s);
    assert!(json.contains("\"scout_cached\"") && json.contains("\"cold_prefill\""));
    assert!(json.contains("\"rechunked\""), "{json}");
}

/// A run with burst and rate cells scores into the same schema: the cell's rate, the
/// rate cells' figures (offered rate, schedule lag, SLO) and the run's settings.
#[test]
fn burst_and_rate_cells_validate() {
    use tokentrace_schemas::Rate;
    use tokentrace_schemas::manifest::{BurstConfig, RateConfig};
    use tokentrace_schemas::schedule::Arrival;
    let dir = tempfile::tempdir().expect("tempdir");
    let rate = Rate::parse("4").expect("rate");
    let keys = [
        CellKey::new(Phase::Burst, 1024, 2),
        CellKey::rate(1024, rate),
    ];
    for k in keys {
        synth::write_decode_cell(dir.path(), &DecodeSpec::new(k, 3_000)).expect("cell");
    }
    let mut m = synth::manifest("schema", &keys);
    m.config.burst = Some(BurstConfig { requests: 8 });
    m.config.rate = Some(RateConfig {
        rates: vec![rate],
        arrival: Arrival::Poisson,
        seed: 3,
        requests: Some(8),
        duration_ns: None,
        max_concurrency: Some(4),
    });
    m.write(dir.path()).expect("manifest");
    let s = score_dir(dir.path(), &RuleSet::builtin("default").expect("rules")).expect("scored");
    let json: serde_json::Value = serde_json::from_str(&report::json(&s)).expect("json");
    let errors: Vec<String> = validator()
        .iter_errors(&json)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(json["cells"][1]["rate"], "4");
    assert_eq!(json["cells"][1]["figures"]["offered_rate"], 4.0);
    assert!(
        json["cells"][1]["figures"]["slo_met"].is_boolean(),
        "{json}"
    );
    assert_eq!(json["run"]["rate"]["max_concurrency"], 4);
    assert_eq!(json["run"]["burst_requests"], 8);
}
