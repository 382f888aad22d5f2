//! The Markdown report as a reader meets it (issue 14): a model served from a file path
//! is named by its file name, an engine without a version leaves no empty field or
//! doubled separator, token counting is said in words, the legend names only the
//! verdicts present, and a queued cell's note is one line.

use tokentrace_analyzer::report::{Format, model_display_name, render};
use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_testkit::synth::{self, DecodeSpec};

const GGUF: &str = "/root/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn markdown() -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = [
        CellKey::new(Phase::Decode, 1024, 1),
        CellKey::new(Phase::Decode, 1024, 4),
    ];
    synth::write_decode_cell(dir.path(), &DecodeSpec::new(keys[0], 3_000)).expect("cell");
    let queued = DecodeSpec {
        waiting: 2.0,
        running: Some(2.0),
        ..DecodeSpec::new(keys[1], 6_000)
    };
    synth::write_decode_cell(dir.path(), &queued).expect("cell");
    let mut m = synth::manifest("report", &keys);
    m.model = GGUF.to_string();
    m.engine.version = None;
    m.write(dir.path()).expect("manifest");
    let s = score_dir(dir.path(), &RuleSet::builtin("default").expect("rules")).expect("scored");
    render(&s, Format::Markdown)
}

#[test]
fn a_path_model_id_is_shown_by_its_file_name() {
    assert_eq!(model_display_name(GGUF), "SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(
        model_display_name("deepseek-ai/DeepSeek-V4-Flash"),
        "deepseek-ai/DeepSeek-V4-Flash",
        "an org/name id is a name"
    );
    let md = markdown();
    assert!(
        md.contains("**SmolLM2-135M-Instruct.Q4_1.gguf** on"),
        "{md}"
    );
    assert!(md.contains(&format!("- Served model: {GGUF}")), "{md}");
}

#[test]
fn the_report_has_no_empty_fields_or_jargon() {
    let md = markdown();
    for bad in [
        "  ·",
        "·  ",
        "· ·",
        "unknown version",
        "one_per_chunk",
        "token_ids",
        ": \n",
        "|\n\n\n",
    ] {
        assert!(!md.contains(bad), "`{bad}` in:\n{md}");
    }
    assert!(
        md.contains("vllm · 1 context (1K) × 2 concurrency levels"),
        "{md}"
    );
    assert!(md.contains("- Version: not reported by the server"), "{md}");
    assert!(md.contains("- Tokens recorded as: "), "{md}");
}

#[test]
fn the_legend_names_only_the_verdicts_present_and_each_note_is_one_line() {
    let md = markdown();
    assert!(
        md.contains("Requests queued: the server could not run"),
        "{md}"
    );
    assert!(!md.contains("Looped: the model kept"), "{md}");
    assert!(!md.contains("Error: a stream failed"), "{md}");
    let notes: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("- Decode 1K × 4:"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("requests waited on average")
            && notes[0].ends_with("samples in the JSON scoring"),
        "{}",
        notes[0]
    );
}
