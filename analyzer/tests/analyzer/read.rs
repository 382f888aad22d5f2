//! The product's way to the rules' data, the trace's own reader cell by cell (the
//! analyzer, the recorder's live view and `watch`), agrees with the oracle's polars load
//! of a whole run; and cells scored live one by one as they commit score as the whole
//! run does offline.

use std::path::Path;

use tokentrace_analyzer::RuleSet;
use tokentrace_analyzer::run::{Cell, Run};
use tokentrace_schemas::layout::Phase;
use tokentrace_score::data::Loaded;
use tokentrace_score::live;

use crate::oracle::{self, Loads};

fn series(run: &Run) -> Vec<String> {
    oracle::series(run, &RuleSet::load("default").expect("built-in rules"))
}

#[test]
fn polars_and_row_reading_give_the_same_data() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/runs");
    for name in ["sim-chat", "sim-completions", "sim-open"] {
        let run = Run::open(&root.join(name)).expect("fixture run opens");
        let series = series(&run);
        let by_polars = oracle::load(&run, &series, Loads::Scoring).expect("polars load");
        let mut by_rows = Loaded::default();
        let mut cells = 0;
        for (key, dir) in run.complete_cells() {
            tokentrace_score::read::cell(dir, key, &series, false, &mut by_rows).expect("row read");
            cells += 1;
        }
        assert!(cells > 3, "{name}: {cells} complete cells");
        assert!(
            !by_rows.text.is_empty() && !by_rows.gaps.is_empty(),
            "{name}: no text or gaps"
        );
        assert!(!by_rows.samples.is_empty(), "{name}: no gauge samples");
        // Debug text: NaN samples (a lag series without its max) compare equal there.
        let (a, b) = (format!("{by_polars:#?}"), format!("{by_rows:#?}"));
        if a != b {
            let line = a
                .lines()
                .zip(b.lines())
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            panic!(
                "{name}: the two loads differ from line {line}:\npolars: {:?}\nrows:   {:?}",
                a.lines().nth(line),
                b.lines().nth(line)
            );
        }
    }
}

#[test]
fn cells_scored_one_by_one_as_they_commit_match_the_offline_scoring() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/runs");
    for name in ["sim-chat", "sim-completions", "sim-open"] {
        let run = Run::open(&root.join(name)).expect("fixture run opens");
        let offline = tokentrace_analyzer::score(&run, &RuleSet::load("default").expect("rules"))
            .expect("scores");
        let mut board = live::Board::new(&run.manifest).expect("board");
        for state in &run.cells {
            if let Cell::Complete(key) = state {
                board
                    .add(&run.manifest, &run.dir, *key)
                    .expect("live score");
            }
        }
        let mut compared = 0;
        for cell in offline.cells.iter().filter(|c| c.figures.is_some()) {
            let live = board
                .get(&cell.key())
                .unwrap_or_else(|| panic!("{name}: {} not scored live", cell.key()));
            // Capacity is judged across a run's rate cells, never one by one.
            let json = |c: &tokentrace_analyzer::contract::CellScore| {
                let mut f = c.figures.clone();
                if let Some(f) = &mut f {
                    f.capacity = None;
                }
                serde_json::to_string(&(c.verdict, f)).expect("serializes")
            };
            assert_eq!(json(live), json(cell), "{name}: {}", cell.key());
            if cell.key().phase == Phase::Decode {
                assert_eq!(
                    live::matrix_cell(live).replace(" · ", "|"),
                    matrix_text_with_hints(cell),
                    "{name}: {}",
                    cell.key()
                );
            }
            compared += 1;
        }
        assert!(compared > 3, "{name}: {compared} cells compared");
    }
}

/// The report's matrix text with the verdict as its live hint.
fn matrix_text_with_hints(c: &tokentrace_analyzer::contract::CellScore) -> String {
    let (tok_s, verdict, ttft) =
        tokentrace_analyzer::figures::matrix_parts(c).expect("a decode cell with figures");
    let mut parts = vec![tok_s];
    parts.extend(verdict.and_then(live::hint).map(str::to_string));
    parts.push(ttft.trim_end_matches(" TTFT").to_string());
    parts.join("|")
}

/// The scoring cell by cell (each cell's tables read block by block, then dropped) and
/// the scoring of the whole run loaded at once by polars, on the same run: equal
/// figures, verdicts and drill-down traces; cell by cell with the per-token columns in
/// memory, past a memory limit of 7 values (written to a temporary file, their
/// percentiles selected in passes over it), and with every text kept whole (the oracle
/// keeps them; cell by cell, each is read by the text rules as it ends and dropped).
fn assert_streaming_matches_in_memory(run: &Run, what: &str) {
    use tokentrace_analyzer::score::Bounds;
    let small = Bounds {
        memory_values: Some(7),
        whole_texts: false,
    };
    let whole_texts = Bounds {
        memory_values: None,
        whole_texts: true,
    };
    for (rules, bounds) in [
        ("default", Bounds::default()),
        ("reference", Bounds::default()),
        ("default", small),
        ("reference", small),
        ("default", whole_texts),
    ] {
        let rules = RuleSet::load(rules).expect("built-in rules");
        let (streamed, traces) =
            tokentrace_analyzer::score::score_run_with(run, &rules, true, bounds)
                .expect("scored cell by cell");
        let (whole, loaded) =
            oracle::score_loaded(run, &rules, Loads::Traces).expect("scored whole");
        let json =
            |s: &tokentrace_analyzer::Scoring| serde_json::to_string_pretty(s).expect("serializes");
        assert_eq!(
            json(&streamed),
            json(&whole),
            "{what}, rules {}",
            rules.id()
        );
        assert_eq!(
            traces,
            oracle::traces_of(&whole, &loaded),
            "{what}, rules {}",
            rules.id()
        );
        let drawn = whole
            .cells
            .iter()
            .any(|c| matches!(c.key().phase, Phase::Decode | Phase::Replay) && c.figures.is_some());
        assert_eq!(
            !traces.is_empty(),
            drawn,
            "{what}: traces of decode and replay cells"
        );
    }
}

#[test]
fn fixture_runs_score_the_same_cell_by_cell_as_loaded_whole() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/runs");
    for name in ["sim-chat", "sim-completions", "sim-open"] {
        let run = Run::open(&root.join(name)).expect("fixture run opens");
        assert_streaming_matches_in_memory(&run, name);
    }
}

#[test]
fn cells_of_many_row_groups_and_parts_score_the_same_cell_by_cell_as_loaded_whole() {
    use tokentrace_schemas::layout::CellKey;
    use tokentrace_schemas::reader::open_table;
    use tokentrace_schemas::tables::Chunks;
    use tokentrace_schemas::writer::WriterLimits;
    use tokentrace_testkit::synth::{self, DecodeSpec};

    let dir = tempfile::tempdir().expect("tempdir");
    let limits = WriterLimits {
        batch_rows: 256,
        max_row_group_rows: 1_000,
        ..WriterLimits::default()
    };
    // Two cells' tables go on in parts of 3 row groups: requests straddle the files.
    let parted = WriterLimits {
        part_row_groups: 3,
        ..limits
    };
    let key = |n| CellKey::new(Phase::Decode, 4096, n);
    let specs = [
        DecodeSpec {
            limits,
            ..DecodeSpec::new(key(1), 4_000)
        },
        DecodeSpec {
            limits: parted,
            looping: Some((1, "the same words once more, and again: ".to_string())),
            ..DecodeSpec::new(key(4), 12_000)
        },
        // Its last two scrapes written in the wrong order: read grouped whole, once
        // every scrape before them was filed (and is taken back).
        DecodeSpec {
            limits,
            failing: Some(2),
            waiting: 0.5,
            scrapes_swapped: true,
            ..DecodeSpec::new(key(8), 16_000)
        },
        // A stream a proxy held and let go in bursts: under `default` its gaps are left
        // out of the ITL figures (the column read past the request's runs of gaps).
        DecodeSpec {
            limits: parted,
            buffered: Some((3, 200_000_000)),
            ..DecodeSpec::new(key(16), 40_000)
        },
    ];
    let prefill = CellKey::new(Phase::Prefill, 4096, 1);
    synth::write_prefill_cell(dir.path(), prefill, 200_000_000).expect("prefill cell");
    for s in &specs {
        synth::write_decode_cell(dir.path(), s).expect("decode cell");
    }
    let mut keys = vec![prefill];
    keys.extend(specs.iter().map(|s| s.key));
    synth::manifest("row-groups", &keys)
        .write(dir.path())
        .expect("manifest");
    // The writer caps a row group at 1,000 rows: more rows than that are several groups.
    // A parted table has more files than one, and more than one row group in each.
    for s in &specs {
        let cell = s.key.dir(dir.path());
        let chunks = open_table::<Chunks>(&cell.join("chunks.parquet")).expect("chunks");
        assert!(
            chunks.stamp().rows > 1_500,
            "{}: {:?}",
            s.key,
            chunks.stamp()
        );
        let parts = tokentrace_schemas::layout::later_parts(&cell.join("chunks.parquet"));
        assert_eq!(
            !parts.is_empty(),
            s.limits.part_row_groups == 3,
            "{}: {parts:?}",
            s.key
        );
    }
    let run = Run::open(dir.path()).expect("opens");
    assert_streaming_matches_in_memory(&run, "row groups");
    let s = tokentrace_analyzer::score(&run, &RuleSet::load("default").expect("rules"))
        .expect("scores");
    let verdict = |n| {
        s.cells
            .iter()
            .find(|c| c.key() == key(n))
            .and_then(|c| c.verdict)
    };
    assert_eq!(
        [verdict(1), verdict(4), verdict(8)],
        [
            Some(tokentrace_analyzer::contract::Verdict::Valid),
            Some(tokentrace_analyzer::contract::Verdict::Looped),
            Some(tokentrace_analyzer::contract::Verdict::Error),
        ]
    );
    let rechunked = s.cells.iter().find(|c| c.key() == key(16)).expect("cell");
    assert!(
        rechunked.warnings.iter().any(|w| w.kind() == "rechunked"),
        "{:?}",
        rechunked.warnings
    );
}
