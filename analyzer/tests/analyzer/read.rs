//! The two ways to the rules' data agree: the analyzer's polars loading of a whole run,
//! and the trace's own reader cell by cell (the recorder's live view and `watch`); and
//! cells scored live one by one as they commit score as the whole run does offline.

use std::path::Path;

use tokentrace_analyzer::RuleSet;
use tokentrace_analyzer::load::{self, Loaded, Loads};
use tokentrace_analyzer::run::{CellState, Run};
use tokentrace_schemas::layout::Phase;
use tokentrace_score::live;

fn series(run: &Run) -> Vec<String> {
    let rules = RuleSet::load("default").expect("built-in rules");
    let preset = rules
        .metrics
        .preset(run.manifest.engine.name.as_deref())
        .expect("preset");
    let mut series = preset.series();
    series.push(tokentrace_schemas::protocol::CLIENT_LAG_METRIC.to_string());
    series
}

#[test]
fn polars_and_row_reading_give_the_same_data() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/runs");
    for name in ["sim-chat", "sim-completions", "sim-open"] {
        let run = Run::open(&root.join(name)).expect("fixture run opens");
        let series = series(&run);
        let by_polars = load::load(&run, &series, Loads::Scoring).expect("polars load");
        let mut by_rows = Loaded::default();
        let mut cells = 0;
        for state in &run.cells {
            if let CellState::Complete { key, dir, .. } = state {
                tokentrace_score::read::cell(dir, *key, &series, &mut by_rows).expect("row read");
                cells += 1;
            }
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
            if let CellState::Complete { key, .. } = state {
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
