//! The view's state: the plan and each cell's standing, the live scores of committed
//! cells (hints, computed by `tokentrace_score::live`), the cell under way, the gauges
//! and the event log. The recorder and `tokentrace watch` fill it; the views draw a copy.

use std::collections::VecDeque;
use std::time::Duration;

use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_score::contract::CellScore;

use super::Gauges;

/// Lines the event log keeps.
pub const LOG_LINES: usize = 200;

/// The run as the header names it.
#[derive(Debug, Clone, Default)]
pub struct Header {
    pub run_id: String,
    pub target: String,
    pub model: String,
    pub engine: String,
    pub gpus: String,
    pub host: String,
}

/// Where a planned cell stands.
#[derive(Debug, Clone)]
pub enum Standing {
    Planned,
    Recording,
    /// Committed and scored live.
    Scored(Box<CellScore>),
    /// Committed; not scored live (and why).
    Committed(String),
    Failed(String),
    Skipped(String),
}

/// One planned cell.
#[derive(Debug, Clone)]
pub struct Row {
    pub key: CellKey,
    pub standing: Standing,
    /// How long it took to record, when this session recorded it.
    pub took: Option<Duration>,
}

/// Cells done, skipped and failed, of all planned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub done: usize,
    pub skipped: usize,
    pub failed: usize,
    pub total: usize,
}

/// Everything the views draw.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub header: Header,
    /// The rules the hints follow (`default@1.8.0`).
    pub rules: String,
    pub rows: Vec<Row>,
    /// The cell under way, and when it started (time since the view began).
    pub current: Option<(CellKey, Duration)>,
    /// Output tokens per second now (the recorder's count of tokens written).
    pub tok_s: Option<f64>,
    pub gauges: Gauges,
    pub events: VecDeque<String>,
    pub paused: bool,
    /// Time since the run began (`started_at`), or since the view began.
    pub elapsed: Duration,
    /// When the run began (`watch`: elapsed time counts from it).
    pub started_at: Option<std::time::SystemTime>,
    /// `watch`: nothing can be steered.
    pub read_only: bool,
    /// The last word (stopped, finished), shown in place of the keys.
    pub end: Option<String>,
}

impl State {
    /// The state of the run `m` plans, each cell as the manifest has it.
    pub fn new(m: &Manifest) -> State {
        let fact = |key: &str| {
            m.facts
                .iter()
                .find(|f| f.key == key)
                .map(|f| f.value.clone())
        };
        let gpus = match (fact("gpu.count"), fact("gpu.name")) {
            (Some(n), Some(name)) => format!("{n}× {name}"),
            (None, Some(name)) => name,
            _ => m
                .hardware
                .clone()
                .unwrap_or_else(|| "GPUs unknown".to_string()),
        };
        let engine = match (&m.engine.name, &m.engine.version) {
            (Some(n), Some(v)) => format!("{n} {v}"),
            (Some(n), None) => n.clone(),
            _ => "engine unknown".to_string(),
        };
        let mut s = State {
            header: Header {
                run_id: m.run_id.clone(),
                target: m.target.url.clone(),
                model: m.model.clone(),
                engine,
                gpus,
                host: fact("host.cpu").unwrap_or_default(),
            },
            ..State::default()
        };
        s.rows = m
            .cells
            .iter()
            .map(|c| Row {
                key: c.key(),
                standing: Standing::Planned,
                took: None,
            })
            .collect();
        for c in &m.cells {
            s.set(c.key(), c.status, c.reason.clone().unwrap_or_default());
        }
        s
    }

    fn row(&mut self, key: CellKey) -> Option<&mut Row> {
        self.rows.iter_mut().find(|r| r.key == key)
    }

    /// The cell `key` stands as `status` says (`why`: the manifest's reason).
    pub fn set(&mut self, key: CellKey, status: CellStatus, why: String) {
        let Some(row) = self.row(key) else { return };
        row.standing = match status {
            CellStatus::Planned | CellStatus::Interrupted => Standing::Planned,
            // Scored when its score comes; until then, committed.
            CellStatus::Complete => match std::mem::replace(&mut row.standing, Standing::Planned) {
                scored @ Standing::Scored(_) => scored,
                _ => Standing::Committed(why),
            },
            CellStatus::Failed => Standing::Failed(why),
            CellStatus::Skipped => Standing::Skipped(why),
        };
    }

    /// The cell `key` starts recording.
    pub fn start(&mut self, key: CellKey) {
        self.current = Some((key, self.elapsed));
        if let Some(row) = self.row(key) {
            row.standing = Standing::Recording;
        }
    }

    /// The cell `key` ended as `status`.
    pub fn end(&mut self, key: CellKey, status: CellStatus, why: String) {
        let took = match self.current {
            Some((k, since)) if k == key => Some(self.elapsed.saturating_sub(since)),
            _ => None,
        };
        if self.current.is_some_and(|(k, _)| k == key) {
            self.current = None;
        }
        self.set(key, status, why);
        if let Some(row) = self.row(key) {
            row.took = took.or(row.took);
        }
    }

    /// The committed cell's live score.
    pub fn scored(&mut self, score: CellScore) {
        let key = score.key();
        match self.row(key) {
            Some(row) => row.standing = Standing::Scored(Box::new(score)),
            // A prefill measured by warm-up is scored with its decode cell.
            None if key.phase == Phase::Prefill => self.rows.insert(
                0,
                Row {
                    key,
                    standing: Standing::Scored(Box::new(score)),
                    took: None,
                },
            ),
            None => {}
        }
    }

    /// Adds a line to the event log.
    pub fn log(&mut self, line: impl Into<String>) {
        if self.events.len() == LOG_LINES {
            self.events.pop_front();
        }
        self.events.push_back(line.into());
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            total: self.rows.len(),
            ..Counts::default()
        };
        for r in &self.rows {
            match r.standing {
                Standing::Scored(_) | Standing::Committed(_) => c.done += 1,
                Standing::Skipped(_) => c.skipped += 1,
                Standing::Failed(_) => c.failed += 1,
                Standing::Planned | Standing::Recording => {}
            }
        }
        c
    }

    /// Time left: the cells still to record, each as long as the mean of those this
    /// session recorded of its phase (of any phase when none of its own); `None` before
    /// the first cell ends.
    pub fn eta(&self) -> Option<Duration> {
        let mean = |phase: Option<Phase>| {
            let took: Vec<Duration> = self
                .rows
                .iter()
                .filter(|r| phase.is_none_or(|p| r.key.phase == p))
                .filter_map(|r| r.took)
                .collect();
            (!took.is_empty()).then(|| took.iter().sum::<Duration>() / took.len() as u32)
        };
        let any = mean(None)?;
        let mut left = Duration::ZERO;
        for r in &self.rows {
            let each = mean(Some(r.key.phase)).unwrap_or(any);
            match r.standing {
                Standing::Planned => left += each,
                Standing::Recording => {
                    let ran = self.current.map_or(Duration::ZERO, |(_, since)| {
                        self.elapsed.saturating_sub(since)
                    });
                    left += each.saturating_sub(ran);
                }
                _ => {}
            }
        }
        Some(left)
    }

    /// The planned cells of `phase`, in plan order.
    pub fn of(&self, phase: Phase) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(move |r| r.key.phase == phase)
    }
}
