//! Scoring a run folder: cell by cell, each complete cell's tables read by the trace's
//! own reader into the plain per-cell data, judged by the polars-free scorer
//! (`tokentrace_score::judge`, the same code the recorder's live view runs) and dropped,
//! so memory holds a few cells at a time, not the run. (The tests hold it against an
//! oracle under `analyzer/tests/`: the whole run loaded at once with polars.)

pub use tokentrace_score::judge::{Cell, MAX_EVIDENCE, content};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_score::contract::CellScore;
use tokentrace_score::judge::{self, RunFlags};
use tokentrace_score::presets::Preset;
use tokentrace_score::stages::{self, Stage};

use crate::contract::Scoring;
use crate::error::Result;
use crate::rules::RuleSet;
use crate::run::{Run, Verify};
use crate::trace::{self, CellTrace};

/// Scores the run folder at `dir` under `rules`, its files checked against their
/// checksums first.
pub fn score_dir(dir: &Path, rules: &RuleSet) -> Result<Scoring> {
    score_dir_with(dir, rules, Verify::Checksums)
}

/// Scores the run folder at `dir` under `rules`, checking its checksums or not.
pub fn score_dir_with(dir: &Path, rules: &RuleSet, verify: Verify) -> Result<Scoring> {
    score(&Run::open_with(dir, verify)?, rules)
}

/// Scores an opened run under `rules`.
pub fn score(run: &Run, rules: &RuleSet) -> Result<Scoring> {
    score_run(run, rules, false).map(|(s, _)| s)
}

/// The gauges' names `rules` read for `run`'s engine, and every series to load: the
/// preset's and the recorder's own lag.
fn preset(run: &Run, rules: &RuleSet) -> Result<(Preset, Vec<String>)> {
    let preset = rules
        .metrics
        .preset(run.manifest.engine.name.as_deref())
        .map_err(|message| crate::Error::Rules {
            path: rules.name.clone().into(),
            message,
        })?;
    let mut series = preset.series();
    series.push(tokentrace_schemas::protocol::CLIENT_LAG_METRIC.to_string());
    Ok((preset, series))
}

/// An imported run's scoring: each complete cell's figures as imported (the rule set is
/// not used: the figures are the other tool's); a cell whose figures do not read is
/// listed as incomplete with the reason.
fn imported(run: &Run, imported: &tokentrace_schemas::manifest::Imported) -> Scoring {
    use tokentrace_score::contract::CellScoreState;
    let mut cells: Vec<CellScore> = run
        .cells
        .iter()
        .map(|c| {
            let key = c.key();
            let read = match (c, run.cell_dir(key)) {
                (Cell::Complete(_), Some(dir)) => {
                    let path = dir.join(tokentrace_score::imported::FIGURES_FILE);
                    std::fs::read(&path)
                        .map_err(|e| format!("{}: {e}", path.display()))
                        .and_then(|b| {
                            serde_json::from_slice::<CellScore>(&b)
                                .map_err(|e| format!("{}: {e}", path.display()))
                        })
                        .and_then(|s| {
                            if s.key() == key {
                                Ok(s)
                            } else {
                                Err(format!("{}: the figures of another cell", path.display()))
                            }
                        })
                }
                (Cell::Incomplete(_, reason), _) => Err(reason.clone()),
                (Cell::Complete(_), None) => Err("no cell folder".to_string()),
            };
            read.unwrap_or_else(|reason| {
                judge::new_cell(key, CellScoreState::Incomplete, Some(reason))
            })
        })
        .collect();
    // A cell the manifest lists whose folder is gone is listed, not dropped.
    for entry in &run.manifest.cells {
        let key = entry.key();
        if !cells.iter().any(|c| c.key() == key) {
            cells.push(judge::unscored(key, entry.status, entry.reason.clone()));
        }
    }
    let mut s = tokentrace_score::imported::scoring(&run.manifest, imported, cells);
    s.run.checksums_skipped = run.verify == Verify::Skip;
    s
}

/// What one cell gave: its score, the warm-up prefill cell it measures (if any), its
/// share of the run-wide flags, and its drill-down trace when asked for.
struct CellResult {
    key: CellKey,
    score: CellScore,
    warmup: Option<(CellKey, CellScore)>,
    flags: RunFlags,
    trace: Option<CellTrace>,
}

/// Scores an opened run under `rules` cell by cell (see the module's doc); with
/// `traces`, also each decode and replay cell's drill-down trace for the HTML page.
/// Cells run on up to as many threads as the machine has cores, each holding one cell's
/// data at a time; the result does not depend on their order.
pub fn score_run(
    run: &Run,
    rules: &RuleSet,
    traces: bool,
) -> Result<(Scoring, BTreeMap<CellKey, CellTrace>)> {
    score_run_with(run, rules, traces, Bounds::default())
}

/// How a cell's data is held while it is scored. The default bounds memory; the tests
/// score through both ways and compare.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bounds {
    /// Values of each per-token column held in memory before the rest go to a
    /// temporary file (`None`: the default, 8 MiB a column).
    pub memory_values: Option<usize>,
    /// Keep every answer's text whole until the cell is judged, instead of reading
    /// each by the text rules as its last row comes and dropping it.
    pub whole_texts: bool,
}

/// [`score_run`], holding each cell's data as `bounds` says.
pub fn score_run_with(
    run: &Run,
    rules: &RuleSet,
    traces: bool,
    bounds: Bounds,
) -> Result<(Scoring, BTreeMap<CellKey, CellTrace>)> {
    if let Some(imported) = &run.manifest.imported {
        return Ok((self::imported(run, imported), BTreeMap::new()));
    }
    let (preset, series) = preset(run, rules)?;
    let mut cells = run.cells.clone();
    let in_warmup = judge::prefill_in_warmup(&run.manifest);
    let complete: Vec<(CellKey, &Path)> = run.complete_cells().collect();
    // A cell whose pages fail to decode gives the error as its reason to be incomplete.
    let load = |key: CellKey, dir: &Path| {
        // Each request's text read by the text rules as its last row comes, then
        // dropped (kept only where the loop evidence quotes it).
        let mut loaded = tokentrace_score::data::Loaded {
            memory_values: bounds.memory_values,
            text_rules: (!bounds.whole_texts).then(|| rules.clone()),
            ..Default::default()
        };
        stages::time(Stage::Load, || {
            tokentrace_score::read::cell(dir, key, &series, traces, &mut loaded)
        })
        .map(|()| loaded)
        .map_err(|e| e.to_string())
    };
    let one = |key: CellKey, dir: &Path| -> std::result::Result<CellResult, String> {
        let loaded = load(key, dir)?;
        let (score, warm) = stages::time(Stage::Rules, || {
            let score = judge::score_cell(key, &loaded, rules, &preset);
            // Every decode cell's first request, as its context's prefill: which one
            // counts is decided once all cells are in (a damaged one drops out).
            let warm = (in_warmup && key.phase == Phase::Decode).then(|| {
                let prefill = CellKey::new(Phase::Prefill, key.context, 1);
                (
                    prefill,
                    judge::score_warmup_prefill(prefill, key, &loaded, rules),
                )
            });
            (score, warm)
        });
        let trace = if traces {
            stages::time(Stage::Render, || {
                trace::cell_trace(&score, &loaded, &preset)
            })
        } else {
            None
        };
        Ok(CellResult {
            key,
            flags: RunFlags::of(&loaded),
            score,
            warmup: warm,
            trace,
        })
    };
    let results = in_parallel(&complete, |(key, dir)| one(*key, dir));
    let mut scored = BTreeMap::new();
    let mut candidates = BTreeMap::new();
    let mut flags = RunFlags::default();
    let mut traced = BTreeMap::new();
    for (r, (key, _)) in results.into_iter().zip(&complete) {
        let r = match r {
            Ok(r) => r,
            Err(reason) => {
                for c in cells.iter_mut().filter(|c| c.key() == *key) {
                    *c = Cell::Incomplete(*key, reason.clone());
                }
                continue;
            }
        };
        flags.merge(r.flags);
        if let Some(candidate) = r.warmup {
            candidates.insert(r.key, candidate);
        }
        if let Some(t) = r.trace {
            traced.insert(r.key, t);
        }
        scored.insert(r.key, r.score);
    }
    // Each context's prefill from the decode cell that measures it, among the cells
    // found sound.
    let warm: BTreeMap<CellKey, CellScore> = judge::warmup_prefills(&run.manifest, &cells)
        .into_iter()
        .filter_map(|(prefill, decode)| candidates.remove(&decode).map(|(_, s)| (prefill, s)))
        .collect();
    let mut scoring = stages::time(Stage::Rules, || {
        judge::assemble(&run.manifest, &cells, scored, warm, flags, rules, preset)
    });
    scoring.run.checksums_skipped = run.verify == Verify::Skip;
    Ok((scoring, traced))
}

/// `f` over `items` on up to as many threads as the machine has cores, each taking the
/// next item when done with its last (so at most that many are in hand at once); the
/// results in `items`' order. Not rayon, which opens the run's cells: the loop search
/// inside a cell's scoring runs on rayon's pool, and a rayon thread that waits there
/// steals other work, so cells scored on that pool could be in hand more than one per
/// thread (each holding its loaded data); these threads take a cell only when done.
fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(items.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let done: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, f(item)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for (i, r) in done.into_iter().flatten() {
        out[i] = Some(r);
    }
    out.into_iter().flatten().collect()
}
