//! Loops found by the rules as they are written (issue 14): cycles of several thousand
//! characters, a cycle beyond every cap, Unicode, and every chunking of one text.

use std::path::Path;

use tokentrace_analyzer::contract::{Evidence, LoopEvidence, Scoring, Verdict, Warning};
use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_testkit::synth::{self, DecodeSpec};

/// A passage of `chars` characters without repeats of its own: pseudo-random words from
/// `alphabet`.
fn passage(chars: usize, alphabet: &[char], seed: u64) -> String {
    let mut x = seed;
    let mut out = String::new();
    while out.chars().count() < chars {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let len = 2 + (x >> 60) as usize % 7;
        for i in 0..len {
            let pick = (x >> (8 * (i % 7))) as usize % alphabet.len();
            out.push(alphabet[pick]);
        }
        out.push(' ');
    }
    out.chars().take(chars).collect()
}

fn latin() -> Vec<char> {
    ('a'..='z').collect()
}

/// One 2-stream cell whose first request streams `cycle` over and over, `chunk`
/// characters per event, `total` characters in all; no reasoning channel. One token per
/// event, 20,000 tokens per request: a text of 20,000 characters fits one per event.
fn run(dir: &Path, cycle: &str, chunk: usize, total: usize) -> Scoring {
    let spec = DecodeSpec {
        looping: Some((0, cycle.to_string())),
        looping_chunks: Some((chunk, total)),
        reasoning_share: 0.0,
        spec_tokens: 0,
        max_tokens: 20_000,
        ..DecodeSpec::new(CellKey::new(Phase::Decode, 2048, 2), 40_000)
    };
    synth::write_decode_cell(dir, &spec).expect("cell");
    synth::manifest("loops", &[spec.key])
        .write(dir)
        .expect("manifest");
    score_dir(dir, &RuleSet::builtin("reference").expect("rules")).expect("scored")
}

fn score(cycle: &str, chunk: usize, total: usize) -> Scoring {
    let dir = tempfile::tempdir().expect("tempdir");
    run(dir.path(), cycle, chunk, total)
}

fn the_loop(s: &Scoring) -> &LoopEvidence {
    match &s.cells[0].evidence[..] {
        [Evidence::Loop(l)] => l,
        other => panic!("{other:?}"),
    }
}

fn suspected(s: &Scoring) -> Vec<&LoopEvidence> {
    s.cells[0]
        .warnings
        .iter()
        .filter_map(|w| match w {
            Warning::SuspectedLoop(l) => Some(l),
            _ => None,
        })
        .collect()
}

#[test]
fn passages_of_several_thousand_characters_repeated_four_times_are_loops() {
    for len in [5_000usize, 7_500, 10_000] {
        let cycle = passage(len, &latin(), len as u64);
        let s = score(&cycle, 300, 4 * len + 100);
        assert_eq!(s.cells[0].verdict, Some(Verdict::Looped), "{len}");
        let l = the_loop(&s);
        assert_eq!(
            (l.cycle_chars, l.cycles, l.start_char),
            (len, 4, 0),
            "{l:?}"
        );
        // The partial final cycle (100 characters) counts toward the span.
        assert_eq!(l.span_chars, 4 * len + 100, "{l:?}");
    }
    // Three and a half times is not a loop (four whole cycles are needed), but suspect.
    let cycle = passage(6_000, &latin(), 6);
    let s = score(&cycle, 300, 21_000);
    assert_eq!(s.cells[0].verdict, Some(Verdict::Valid));
    let warned = suspected(&s);
    assert_eq!(warned.len(), 1);
    assert_eq!((warned[0].cycle_chars, warned[0].cycles), (6_000, 3));
}

#[test]
fn a_cycle_longer_than_any_cap_is_suspected() {
    let cycle = passage(20_000, &latin(), 20);
    let s = score(&cycle, 500, 60_000);
    assert_eq!(s.cells[0].verdict, Some(Verdict::Valid), "beyond the cap");
    let warned = suspected(&s);
    assert_eq!(warned.len(), 1, "{:?}", s.cells[0].warnings);
    assert_eq!((warned[0].cycle_chars, warned[0].cycles), (20_000, 3));
    assert_eq!(warned[0].span_chars, 60_000);
}

#[test]
fn unicode_cycles_are_counted_in_characters() {
    let alphabet: Vec<char> = "数学は美しい。🙂日本語のテキスト€ßçñ".chars().collect();
    let cycle = passage(5_000, &alphabet, 5);
    let s = score(&cycle, 97, 4 * 5_000 + 1_000);
    assert_eq!(s.cells[0].verdict, Some(Verdict::Looped));
    let l = the_loop(&s);
    assert_eq!((l.cycle_chars, l.cycles, l.span_chars), (5_000, 4, 21_000));
    assert!(cycle.starts_with(&l.cycle_excerpt), "{l:?}");
}

#[test]
fn the_verdict_and_evidence_do_not_depend_on_chunking() {
    let cycle = passage(4_500, &latin(), 45);
    let total = 4 * 4_500 + 321;
    let first = score(&cycle, 1, total);
    assert_eq!(first.cells[0].verdict, Some(Verdict::Looped));
    for chunk in [2usize, 3, 7, 64, 999, 4_500, 4_501, 10_000, total] {
        let s = score(&cycle, chunk, total);
        assert_eq!(s.cells[0].verdict, first.cells[0].verdict, "chunk {chunk}");
        assert_eq!(
            s.cells[0].evidence, first.cells[0].evidence,
            "chunk {chunk}"
        );
        assert_eq!(
            s.cells[0].warnings, first.cells[0].warnings,
            "chunk {chunk}"
        );
    }
}

#[test]
fn a_rule_set_can_leave_the_partial_final_cycle_out_of_the_span() {
    let whole = tokentrace_analyzer::rules::parse(
        "name = \"whole\"\nversion = \"1\"\nextends = \"reference\"\n\
         [looped]\npartial_cycle_in_span = false\n",
        Path::new("whole.toml"),
    )
    .expect("rules");
    let cycle = passage(5_000, &latin(), 50);
    let dir = tempfile::tempdir().expect("tempdir");
    let with_partial = run(dir.path(), &cycle, 300, 4 * 5_000 + 700);
    assert_eq!(the_loop(&with_partial).span_chars, 20_700);
    let s = score_dir(dir.path(), &whole).expect("scored");
    let l = the_loop(&s);
    assert_eq!((l.span_chars, l.cycles), (20_000, 4));
}
