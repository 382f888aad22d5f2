//! Where things live in a run folder: the Hive-style cell paths
//! (`cells/phase=<p>/context=<n>/concurrency=<n>/`, `cells/phase=rate/context=<n>/rate=<r>/`,
//! `cells/phase=replay/context=<n>/replay=<i>/`,
//! `cells/phase=conversation/context=<n>/sessions=<n>/`) and the fixed file names. Both the recorder (writing) and the analyzer (reading) take
//! paths from here.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::str_enum;
use crate::table::Table;

/// Run metadata, at the top of the run folder.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Folder holding the committed cells.
pub const CELLS_DIR: &str = "cells";
/// Folder where cells are built before their atomic rename into `cells/`.
pub const STAGING_DIR: &str = ".staging";
/// Folder of analyzer scorings (`<rules>@<version>.json`); never part of the trace.
pub const RESULTS_DIR: &str = "results";
/// An imported cell's one file (`tokentrace import`): its figures and verdict as the
/// other tool computed them (FORMAT.md, "Imported runs").
pub const FIGURES_FILE: &str = "figures.json";
/// A cell's commit mark, written last.
pub const CELL_FILE: &str = "cell.json";
/// A cell's raw capture of response bytes.
pub const RAW_FILE: &str = "raw.sse.zst";

str_enum! {
    /// The kinds of cell a run holds.
    pub enum Phase {
        /// One cold scout request per context; measures prompt processing.
        Prefill = "prefill",
        /// N closed-loop streams for a fixed window; measures sustained decode.
        Decode = "decode",
        /// Exactly N measured requests at a fixed concurrency, each run to completion;
        /// measures end-to-end latency (the reference tool's Burst / E2E mode).
        Burst = "burst",
        /// Open-loop arrivals at a fixed request rate, on a schedule the server does not
        /// slow down; measures latency against offered load.
        Rate = "rate",
        /// A workload taken from a file (a recorded run's cell, or a production trace:
        /// Mooncake, Azure, BurstGPT), sent again on its own schedule, open loop.
        Replay = "replay",
        /// N live multi-turn sessions for a fixed window: each turn sends the whole
        /// history (with the server's real answers) plus a new message, waits for the
        /// answer, then a think time; measures how prefix caching carries conversations.
        Conversation = "conversation",
    }
}

impl Phase {
    /// The JSON version a run holding cells of this phase writes in its manifest and
    /// commit marks: format v1's for prefill and decode, [`crate::CELL_KINDS_VERSION`]
    /// for burst and rate, [`crate::REPLAY_VERSION`] for replay,
    /// [`crate::CONVERSATION_VERSION`] for conversations, so that readers built
    /// before a kind of cell refuse a run holding one as newer instead of misreading it.
    pub fn json_version(self) -> u32 {
        match self {
            Phase::Prefill | Phase::Decode => crate::SCHEMA_VERSION,
            Phase::Burst | Phase::Rate => crate::CELL_KINDS_VERSION,
            Phase::Replay => crate::REPLAY_VERSION,
            Phase::Conversation => crate::CONVERSATION_VERSION,
        }
    }
}

/// A request rate in requests per second, kept in thousandths so that keys are exact
/// and ordered; [`Rate::INF`] sends every request at once. Written as `4`, `0.5`, `inf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rate(u32);

impl Rate {
    /// Every request at once (`vllm bench serve --request-rate inf`).
    pub const INF: Rate = Rate(u32::MAX);

    /// From thousandths of a request per second (`u32::MAX`: INF, as [`Rate::milli`]
    /// gives it); `None` for zero.
    pub fn from_milli(milli: u32) -> Option<Rate> {
        (milli > 0).then_some(Rate(milli))
    }

    /// Thousandths of a request per second (`u32::MAX` for INF).
    pub fn milli(self) -> u32 {
        self.0
    }

    pub fn is_inf(self) -> bool {
        self == Rate::INF
    }

    /// Requests per second (infinite for INF).
    pub fn per_second(self) -> f64 {
        if self.is_inf() {
            f64::INFINITY
        } else {
            f64::from(self.0) / 1e3
        }
    }

    /// Parses `4`, `0.5`, `inf`: a positive rate with at most three decimals, below
    /// four million per second.
    pub fn parse(text: &str) -> Option<Rate> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("inf") {
            return Some(Rate::INF);
        }
        let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
        if whole.is_empty() && frac.is_empty()
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || frac.len() > 3
        {
            return None;
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let frac_milli: u64 = format!("{frac:0<3}").parse().ok()?;
        let milli = whole.checked_mul(1000)?.checked_add(frac_milli)?;
        // A finite rate never reads as INF.
        Rate::from_milli(u32::try_from(milli).ok().filter(|&m| m < u32::MAX)?)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_inf() {
            return f.write_str("inf");
        }
        let (whole, frac) = (self.0 / 1000, self.0 % 1000);
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            let digits = format!("{frac:03}");
            write!(f, "{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Rate::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "bad request rate {text:?} (want a positive number of requests per second with at most three decimals, or \"inf\")"
            ))
        })
    }
}

/// Identifies one cell of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CellKey {
    pub phase: Phase,
    /// Prompt length in tokens.
    pub context: u32,
    /// Simultaneous requests (1 for prefill cells; 0 for rate cells, whose cap on
    /// requests in flight is the run's `config.rate.max_concurrency`; a conversation
    /// cell's live sessions, each with at most one request in flight).
    pub concurrency: u32,
    /// The offered request rate of a rate cell; `None` for every other phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// A replay cell's number (1-based; `config.replay.sources` names its source);
    /// `None` for every other phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<u32>,
}

impl CellKey {
    pub fn new(phase: Phase, context: u32, concurrency: u32) -> Self {
        CellKey {
            phase,
            context,
            concurrency,
            rate: None,
            replay: None,
        }
    }

    /// A rate cell: open-loop arrivals at `rate` with prompts of `context` tokens.
    pub fn rate(context: u32, rate: Rate) -> Self {
        CellKey {
            phase: Phase::Rate,
            context,
            concurrency: 0,
            rate: Some(rate),
            replay: None,
        }
    }

    /// A replay cell: the `index`-th replayed source (1-based), whose prompts are
    /// `context` tokens (0: a trace of mixed prompt lengths).
    pub fn replay(context: u32, index: u32) -> Self {
        CellKey {
            phase: Phase::Replay,
            context,
            concurrency: 0,
            rate: None,
            replay: Some(index),
        }
    }

    /// A conversation cell: `sessions` live sessions whose every turn adds a message of
    /// `context` tokens.
    pub fn conversation(context: u32, sessions: u32) -> Self {
        CellKey::new(Phase::Conversation, context, sessions)
    }

    /// The cell's folder relative to the run folder.
    pub fn rel_dir(&self) -> PathBuf {
        Path::new(CELLS_DIR).join(self.partition_path())
    }

    /// The cell's folder relative to `cells/` (or to the staging folder). A rate cell's
    /// third level is `rate=<r>`, a replay cell's `replay=<i>`, a conversation cell's
    /// `sessions=<n>`, every other cell's `concurrency=<n>`.
    pub fn partition_path(&self) -> PathBuf {
        let last = match (self.rate, self.replay) {
            (Some(rate), _) => format!("rate={rate}"),
            (None, Some(i)) => format!("replay={i}"),
            (None, None) => format!("{}={}", self.last_level(), self.concurrency),
        };
        PathBuf::from(format!("phase={}", self.phase))
            .join(format!("context={}", self.context))
            .join(last)
    }

    /// The name of the third path level of a cell that is neither rate nor replay.
    fn last_level(&self) -> &'static str {
        if self.phase == Phase::Conversation {
            "sessions"
        } else {
            "concurrency"
        }
    }

    /// The cell's folder inside `run`.
    pub fn dir(&self, run: &Path) -> PathBuf {
        run.join(self.rel_dir())
    }

    /// Where the cell is written before its commit renames it to [`CellKey::dir`].
    pub fn staging_dir(&self, run: &Path) -> PathBuf {
        run.join(STAGING_DIR).join(self.partition_path())
    }

    /// Parses a path that ends in `phase=<p>/context=<n>/concurrency=<n>` (or, for a
    /// rate cell, `phase=rate/context=<n>/rate=<r>`; for a replay cell,
    /// `phase=replay/context=<n>/replay=<i>`; for a conversation cell,
    /// `phase=conversation/context=<n>/sessions=<n>`).
    pub fn from_path(path: &Path) -> Result<Self> {
        let bad = || Error::BadCellPath {
            path: path.to_path_buf(),
        };
        let parts: Vec<&str> = path
            .components()
            .rev()
            .take(3)
            .map(|c| c.as_os_str().to_str().ok_or_else(bad))
            .collect::<Result<_>>()?;
        let [last, ctx, phase] = parts[..] else {
            return Err(bad());
        };
        let value = |part: &'_ str, key: &str| -> Result<String> {
            part.strip_prefix(key)
                .and_then(|p| p.strip_prefix('='))
                .map(str::to_string)
                .ok_or_else(bad)
        };
        use crate::column::StrEnum;
        let phase = Phase::parse(&value(phase, "phase")?).ok_or_else(bad)?;
        let context = value(ctx, "context")?.parse().map_err(|_| bad())?;
        if phase == Phase::Rate {
            let rate = Rate::parse(&value(last, "rate")?).ok_or_else(bad)?;
            // Only the canonical spelling names a cell (`rate=4`, not `rate=4.0`).
            if last != format!("rate={rate}") {
                return Err(bad());
            }
            return Ok(CellKey::rate(context, rate));
        }
        if phase == Phase::Replay {
            let index: u32 = value(last, "replay")?.parse().map_err(|_| bad())?;
            if index == 0 || last != format!("replay={index}") {
                return Err(bad());
            }
            return Ok(CellKey::replay(context, index));
        }
        let level = CellKey::new(phase, context, 0).last_level();
        Ok(CellKey::new(
            phase,
            context,
            value(last, level)?.parse().map_err(|_| bad())?,
        ))
    }
}

impl fmt::Display for CellKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rate, self.replay) {
            (Some(rate), _) => write!(f, "{} context={} rate={rate}", self.phase, self.context),
            (None, Some(i)) => write!(f, "{} context={} replay={i}", self.phase, self.context),
            (None, None) => write!(
                f,
                "{} context={} {}={}",
                self.phase,
                self.context,
                self.last_level(),
                self.concurrency
            ),
        }
    }
}

/// The file name of a table: `<name>.parquet`.
pub fn table_file<T: Table>() -> String {
    format!("{}.parquet", T::NAME)
}

/// The file name of part `n` of the table file `first` (`chunks.parquet`): `first` itself
/// for part 0, then `chunks.1.parquet`, `chunks.2.parquet`... A long cell's table is
/// split so that no writer holds the footer of an ever-longer file (FORMAT.md, "Parts").
pub fn part_file(first: &str, n: usize) -> String {
    if n == 0 {
        return first.to_string();
    }
    match first.rsplit_once('.') {
        Some((stem, ext)) => format!("{stem}.{n}.{ext}"),
        None => format!("{first}.{n}"),
    }
}

/// The first part's file name and the part's number of a later part's file name
/// (`chunks.2.parquet` -> `chunks.parquet`, 2); `None` for any other name.
pub fn split_part(name: &str) -> Option<(String, usize)> {
    let (rest, ext) = name.rsplit_once('.')?;
    let (stem, n) = rest.rsplit_once('.')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.starts_with('0') {
        return None;
    }
    Some((format!("{stem}.{ext}"), n.parse().ok()?))
}

/// The further parts of the table file `first` that exist, in order (`chunks.1.parquet`,
/// `chunks.2.parquet`...), up to the first number missing.
pub fn later_parts(first: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (first.parent(), first.file_name().and_then(|n| n.to_str()))
    else {
        return Vec::new();
    };
    let mut parts = Vec::new();
    for n in 1.. {
        let path = dir.join(part_file(name, n));
        if !path.exists() {
            break;
        }
        parts.push(path);
    }
    parts
}

/// Every committed cell folder under `run/cells`, sorted by key (deterministic order).
/// A folder without a cell.json is still listed: the caller decides what incomplete means.
/// A run without a `cells` folder has no cells (every cell skipped, or none recorded yet).
pub fn list_cells(run: &Path) -> Result<Vec<(CellKey, PathBuf)>> {
    let cells = run.join(CELLS_DIR);
    if !cells.exists() {
        return Ok(Vec::new());
    }
    if !cells.is_dir() {
        return Err(Error::Missing {
            path: cells,
            what: "cells folder",
        });
    }
    let mut out = Vec::new();
    for phase in read_dir_sorted(&cells)? {
        for ctx in read_dir_sorted(&phase)? {
            for conc in read_dir_sorted(&ctx)? {
                out.push((CellKey::from_path(&conc)?, conc));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if path.is_dir() {
            v.push(path);
        }
    }
    v.sort();
    Ok(v)
}
