//! The live view's scores: each committed cell read back and scored on its own by the
//! offline scorer under the newest `default` rules, as the cell commits. The recorder's
//! screen and `tokentrace watch` draw from it; the final verdicts are the report's.

use std::collections::BTreeMap;
use std::path::Path;

use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::Manifest;

use crate::contract::{CellScore, Verdict};
use crate::data::Loaded;
use crate::figures::{DASH, matrix_parts, opt, shown};
use crate::judge::{self, Cell};
use crate::numbers::{fixed, ms_whole, rate};
use crate::presets::Preset;
use crate::rules::RuleSet;

/// The rule set live hints are computed under.
pub const LIVE_RULES: &str = "default";

/// The scores of the cells committed so far.
#[derive(Debug)]
pub struct Board {
    rules: RuleSet,
    preset: Preset,
    series: Vec<String>,
    scores: BTreeMap<CellKey, CellScore>,
    /// With prefill measured during warm-up: each committed decode cell's first request
    /// scored as its context's prefill, and the decode cells committed so far, from which
    /// [`judge::warmup_prefills`] picks (as the report does).
    candidates: BTreeMap<CellKey, CellScore>,
    decode_cells: Vec<Cell>,
}

impl Board {
    /// A board for the run `m` describes (its engine picks the gauges' names).
    pub fn new(m: &Manifest) -> crate::Result<Board> {
        let rules = RuleSet::load(LIVE_RULES)?;
        let preset = rules
            .metrics
            .preset(m.engine.name.as_deref())
            .map_err(|message| crate::Error::Rules {
                path: LIVE_RULES.into(),
                message,
            })?;
        let mut series = preset.series();
        series.push(tokentrace_schemas::protocol::CLIENT_LAG_METRIC.to_string());
        Ok(Board {
            rules,
            preset,
            series,
            scores: BTreeMap::new(),
            candidates: BTreeMap::new(),
            decode_cells: Vec::new(),
        })
    }

    /// `name@version` of the rules the hints follow.
    pub fn rules_label(&self) -> String {
        format!("{}@{}", self.rules.name, self.rules.version)
    }

    /// Scores the committed cell `key` of the run in `run_dir` (whose manifest is `m`);
    /// returns how long it took to record (its first to its last lifecycle event). A
    /// prefill cell measured by warm-up is scored with its context's first decode cell.
    pub fn add(
        &mut self,
        m: &Manifest,
        run_dir: &Path,
        key: CellKey,
    ) -> tokentrace_schemas::Result<Option<std::time::Duration>> {
        // Each request's text read by the rules as its last row comes, then dropped: a
        // long cell is scored without holding its answers.
        let mut loaded = Loaded {
            text_rules: Some(self.rules.clone()),
            ..Loaded::default()
        };
        crate::read::cell(&key.dir(run_dir), key, &self.series, false, &mut loaded)?;
        let span = loaded.events.get(&key).and_then(|e| {
            let (first, last) = (e.first()?.time_ns, e.last()?.time_ns);
            Some(std::time::Duration::from_nanos(
                u64::try_from(last - first).unwrap_or(0),
            ))
        });
        let scoring = judge::scoring(
            m,
            &[Cell::Complete(key)],
            &loaded,
            &self.rules,
            self.preset.clone(),
        );
        for c in scoring.cells {
            let k = c.key();
            if k == key {
                self.scores.insert(k, c);
            } else if k.phase == Phase::Prefill
                && key.phase == Phase::Decode
                && k.context == key.context
            {
                // This decode cell's first request as its context's prefill.
                self.candidates.insert(key, c);
            }
        }
        if key.phase == Phase::Decode && judge::prefill_in_warmup(m) {
            self.decode_cells.push(Cell::Complete(key));
            for (prefill, decode) in judge::warmup_prefills(m, &self.decode_cells) {
                if let Some(c) = self.candidates.get(&decode) {
                    self.scores.insert(prefill, c.clone());
                }
            }
        }
        Ok(span)
    }

    /// The committed cell `key`'s score, once scored.
    pub fn get(&self, key: &CellKey) -> Option<&CellScore> {
        self.scores.get(key)
    }
}

/// A verdict as a live hint: provisional, so it asks.
pub fn hint(v: Verdict) -> Option<&'static str> {
    match v {
        Verdict::Valid => None,
        Verdict::RequestsQueued => Some("queued?"),
        Verdict::Looped => Some("loop?"),
        Verdict::PrefillCached => Some("cached?"),
        Verdict::BadOutput => Some("bad output?"),
        Verdict::Error => Some("error?"),
    }
}

/// A decode matrix cell as the live view shows it: total tok/s, the hint, median TTFT
/// (`96.2 · loop? · 45 ms`).
pub fn matrix_cell(c: &CellScore) -> String {
    match matrix_parts(c) {
        Some((tok_s, verdict, ttft)) => {
            let mut parts = vec![tok_s];
            parts.extend(verdict.and_then(hint).map(str::to_string));
            parts.push(ttft.trim_end_matches(" TTFT").to_string());
            parts.join(" · ")
        }
        None => c
            .verdict
            .and_then(hint)
            .map_or_else(|| c.status_label(), str::to_string),
    }
}

/// A prefill row: prompt tok/s and median TTFT (dashes when not shown).
pub fn prefill_cells(c: &CellScore) -> (String, String) {
    let f = shown(c);
    (
        opt(f.and_then(|f| f.prompt_tok_s), |x| rate(x, false)),
        opt(f.and_then(|f| f.ttft_ms.median), ms_whole),
    )
}

/// A burst, rate or replay row: offered rate, achieved rate (req/s), p99 TTFT, and
/// whether the SLO was met (`—` when the rules set none).
pub fn open_cells(c: &CellScore) -> [String; 4] {
    let f = c.figures.as_ref();
    let offered = match c.rate {
        Some(r) => r.to_string(),
        None => DASH.to_string(),
    };
    [
        offered,
        opt(f.and_then(|f| f.request_rate), |x| fixed(x, 2)),
        opt(
            f.and_then(|f| f.ttft_ms.percentiles.get("p99").copied()),
            ms_whole,
        ),
        match f.and_then(|f| f.slo_met) {
            Some(true) => "met".to_string(),
            Some(false) => "missed".to_string(),
            None => DASH.to_string(),
        },
    ]
}
