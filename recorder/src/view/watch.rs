//! `tokentrace watch`: the live view, read-only, of a run recorded elsewhere. It follows
//! a run folder, or the object-store prefix a recorder uploads to (pulled into a local
//! copy), scoring each cell as it commits; the manifest gives the plan and the ETA.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokentrace_schemas::layout::{CELL_FILE, CellKey, MANIFEST_FILE, table_file};
use tokentrace_schemas::manifest::{CellStatus, Manifest};
use tokentrace_schemas::reader::open_table;
use tokentrace_schemas::table::Table;
use tokentrace_schemas::tables::{Gpu, Metrics};
use tokentrace_score::live::Board;

use super::state::State;
use super::{DisplayMode, Gauges, screen};
use crate::store::bucket::RunStore;

/// Where the run is.
#[derive(Debug)]
pub enum Source {
    /// A run folder the recorder writes.
    Folder(PathBuf),
    /// A store the recorder uploads to, pulled into the local folder.
    Store(RunStore, PathBuf),
}

impl Source {
    fn dir(&self) -> &Path {
        match self {
            Source::Folder(d) | Source::Store(_, d) => d,
        }
    }
}

/// How a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every planned cell was complete, failed or skipped.
    Complete,
    /// The user pressed `q`.
    Quit,
}

/// Whether every planned cell of `m` is settled.
pub fn complete(m: &Manifest) -> bool {
    m.cells.iter().all(|c| {
        matches!(
            c.status,
            CellStatus::Complete | CellStatus::Failed | CellStatus::Skipped
        )
    })
}

/// The gauges of a committed cell, scrape by scrape (the last cell's, for `watch`).
pub fn cell_gauges(dir: &Path) -> tokentrace_schemas::Result<Gauges> {
    let mut g = Gauges::default();
    by_sample::<Metrics, _>(
        &dir.join(table_file::<Metrics>()),
        |r| r.scrape_start_ns,
        |rows| g.scraped(rows),
    )?;
    let gpu = dir.join(table_file::<Gpu>());
    if gpu.exists() {
        by_sample::<Gpu, _>(&gpu, |r| r.sample_ns, |rows| g.gpu(rows))?;
    }
    Ok(g)
}

/// Hands `f` the rows of the table at `path` one sample (rows of equal `at`) at a time,
/// block by block: a sample's rows are written together, so memory holds one sample,
/// not the cell's table.
fn by_sample<T: Table, F: FnMut(&[T::Row])>(
    path: &Path,
    at: fn(&T::Row) -> i64,
    mut f: F,
) -> tokentrace_schemas::Result<()> {
    let mut sample: Vec<T::Row> = Vec::new();
    for block in open_table::<T>(path)? {
        for row in block? {
            if sample.first().is_some_and(|r| at(r) != at(&row)) {
                f(&sample);
                sample.clear();
            }
            sample.push(row);
        }
    }
    if !sample.is_empty() {
        f(&sample);
    }
    Ok(())
}

/// Looks at a complete manifest before `watch` ends even with a cell it could not score.
const SETTLE_LOOKS: u32 = 5;

/// What `watch` knows of the run so far.
struct Follower {
    state: Arc<Mutex<State>>,
    board: Board,
    seen: BTreeMap<CellKey, (CellStatus, Option<String>)>,
    scored: BTreeSet<CellKey>,
}

impl Follower {
    fn new(m: &Manifest, state: Arc<Mutex<State>>) -> Result<Follower, String> {
        let board = Board::new(m).map_err(|e| e.to_string())?;
        {
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            let log = std::mem::take(&mut s.events);
            *s = State {
                rules: board.rules_label(),
                read_only: true,
                started_at: m.clock.utc(),
                events: log,
                ..State::new(m)
            };
        }
        Ok(Follower {
            state,
            board,
            seen: BTreeMap::new(),
            scored: BTreeSet::new(),
        })
    }

    /// Whether every cell `m` lists complete has been scored.
    fn all_scored(&self, m: &Manifest) -> bool {
        m.cells
            .iter()
            .filter(|c| c.status == CellStatus::Complete)
            .all(|c| self.scored.contains(&c.key()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in the manifest `m` of the run in `dir`; returns a line per change.
    fn update(&mut self, m: &Manifest, dir: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        let total = m.cells.len();
        let mut recording = None;
        for (i, entry) in m.cells.iter().enumerate() {
            let key = entry.key();
            let now = (entry.status, entry.reason.clone());
            let head = format!("[{}/{total}] {key}", i + 1);
            if self.seen.get(&key) != Some(&now) {
                self.seen.insert(key, now.clone());
                self.lock()
                    .set(key, entry.status, entry.reason.clone().unwrap_or_default());
                let line = match entry.status {
                    CellStatus::Failed => Some(format!(
                        "{head}: FAILED: {}",
                        entry.reason.as_deref().unwrap_or("")
                    )),
                    CellStatus::Skipped => Some(format!(
                        "{head}: skipped ({})",
                        entry.reason.as_deref().unwrap_or("")
                    )),
                    CellStatus::Interrupted => Some(format!("{head}: interrupted")),
                    CellStatus::Planned | CellStatus::Complete => None,
                };
                if let Some(l) = line {
                    self.lock().log(l.clone());
                    lines.push(l);
                }
            }
            let cell = key.dir(dir);
            if entry.status == CellStatus::Complete
                && !self.scored.contains(&key)
                && cell.join(CELL_FILE).exists()
            {
                self.scored.insert(key);
                let done = super::committed(&mut self.board, m, dir, key, &self.state);
                let line = match &done {
                    Some((text, _)) => format!("{head}: committed · {text}"),
                    None => format!("{head}: committed"),
                };
                let gauges = cell_gauges(&cell).ok();
                let mut s = self.lock();
                if let Some(row) = s.rows.iter_mut().find(|r| r.key == key) {
                    row.took = done.and_then(|(_, took)| took);
                }
                if let Some(g) = gauges {
                    s.gauges = g;
                }
                s.log(line.clone());
                lines.push(line);
            }
            if recording.is_none()
                && matches!(entry.status, CellStatus::Planned | CellStatus::Interrupted)
                && key.staging_dir(dir).exists()
            {
                recording = Some(key);
            }
        }
        let mut s = self.lock();
        match recording {
            Some(key) if s.current.map(|(k, _)| k) != Some(key) => s.start(key),
            Some(_) => {}
            None => s.current = None,
        }
        lines
    }
}

/// Follows the run at `source` until it is complete or the user quits, every `every`;
/// in `mode` (`screen`, or lines otherwise).
pub async fn watch(source: Source, mode: DisplayMode, every: Duration) -> Result<Ended, String> {
    let state = Arc::new(Mutex::new(State::default()));
    let quit = Arc::new(tokio::sync::Notify::new());
    let mut screen = None;
    if mode == DisplayMode::Screen {
        use std::io::IsTerminal;
        let q = quit.clone();
        let sources = screen::Sources {
            keys: std::io::stdin().is_terminal(),
            tokens: None,
            feed: None,
            on_key: Box::new(move |k| {
                if k == screen::Key::Quit {
                    q.notify_one();
                }
            }),
        };
        screen = Some(screen::Screen::start(state.clone(), sources).map_err(|e| e.to_string())?);
    }
    let say = |line: &str, state: &Mutex<State>| {
        if mode == DisplayMode::Screen {
            state.lock().unwrap_or_else(|e| e.into_inner()).log(line);
        } else {
            eprintln!("{line}");
        }
    };
    let dir = source.dir().to_path_buf();
    let mut follower: Option<Follower> = None;
    let mut waiting_said = false;
    let mut settled = 0;
    let ended = loop {
        if let Source::Store(store, local) = &source
            && let Err(e) = store.pull(local).await
        {
            say(&format!("{}: {e}", store.url()), &state);
        }
        match Manifest::read(&dir) {
            Ok(Manifest {
                imported: Some(i), ..
            }) => {
                return Err(format!(
                    "{}: imported from {}: no recording to follow (`tokentrace report` shows its figures)",
                    dir.display(),
                    i.source()
                ));
            }
            Ok(m) => {
                if follower.is_none() {
                    follower = Some(Follower::new(&m, state.clone())?);
                    say(
                        &format!("watching run {} ({} cells)", m.run_id, m.cells.len()),
                        &state,
                    );
                }
                if let Some(f) = &mut follower {
                    for line in f.update(&m, &dir) {
                        if mode != DisplayMode::Screen {
                            eprintln!("{line}");
                        }
                    }
                }
                // Complete once every complete cell is scored too (a store's last cell
                // may land after the manifest was listed), or after a few looks.
                let scored = follower.as_ref().is_some_and(|f| f.all_scored(&m));
                if complete(&m) {
                    settled += 1;
                    if scored || settled > SETTLE_LOOKS {
                        break Ended::Complete;
                    }
                }
            }
            Err(e) if !dir.join(MANIFEST_FILE).exists() => {
                if !waiting_said {
                    say(&format!("waiting for the run to start ({e})"), &state);
                    waiting_said = true;
                }
            }
            Err(e) => say(&format!("{e}"), &state),
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = quit.notified() => break Ended::Quit,
        }
    };
    if let Some(s) = screen {
        state.lock().unwrap_or_else(|e| e.into_inner()).end = Some(match ended {
            Ended::Complete => "finished".to_string(),
            Ended::Quit => "stopped watching (the recording goes on)".to_string(),
        });
        s.finish();
    }
    Ok(ended)
}
