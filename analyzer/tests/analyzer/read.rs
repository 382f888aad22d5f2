//! The two ways to the rules' data agree: the analyzer's polars loading of a whole run,
//! and the trace's own reader cell by cell (the recorder's live view and `watch`).

use std::path::Path;

use tokentrace_analyzer::RuleSet;
use tokentrace_analyzer::load::{self, Loaded, Loads};
use tokentrace_analyzer::run::{CellState, Run};

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
