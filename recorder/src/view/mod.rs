//! What the user sees while a run records, and what `tokentrace watch` ([`watch`])
//! shows: the display mode, the view's state ([`state`]), the full-screen view
//! ([`screen`]) and the line views ([`line`]), drawn from the runner's progress and the
//! gauges the scraper publishes ([`crate::observe::gauges`]).

pub mod line;
pub mod screen;
pub mod state;
pub mod steer;
pub mod watch;

use std::sync::Mutex;

pub use crate::observe::gauges::{Feed, Gauges, SERIES_POINTS, Series};

/// How a recording shows itself (the reference tool's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DisplayMode {
    /// Full screen: the tables filling in, the gauges, the event log; keys q, s, p.
    Screen,
    /// A compact view in place that scrolls with the terminal.
    Live,
    /// Lines, one per step.
    Plain,
}

/// The smallest terminal the full-screen view draws in; below it, `live`.
pub const MIN_SCREEN: (u16, u16) = (80, 24);

/// The mode to use: the one asked for, where the terminal allows it; else `screen` on a
/// terminal and `plain` off one. Returns a note when the ask was changed.
pub fn choose(asked: Option<DisplayMode>) -> (DisplayMode, Option<String>) {
    use std::io::IsTerminal;
    let tty = std::io::stdout().is_terminal();
    let size = ratatui::crossterm::terminal::size().ok();
    match asked {
        None if !tty => (DisplayMode::Plain, None),
        Some(DisplayMode::Screen) if !tty => (
            DisplayMode::Plain,
            Some("--display screen needs a terminal: plain lines instead".to_string()),
        ),
        None | Some(DisplayMode::Screen) => match size {
            Some((w, h)) if w >= MIN_SCREEN.0 && h >= MIN_SCREEN.1 => (DisplayMode::Screen, None),
            _ => (
                DisplayMode::Live,
                Some(format!(
                    "the terminal is smaller than {}×{}: the compact live view instead",
                    MIN_SCREEN.0, MIN_SCREEN.1
                )),
            ),
        },
        Some(m) => (m, None),
    }
}

/// Scores the committed cell `key` of the run in `run_dir` live and puts the score in
/// `state`; returns the score as the view's one-line text and how long the cell took,
/// or logs why it could not be scored.
pub fn committed(
    board: &mut tokentrace_score::live::Board,
    m: &tokentrace_schemas::manifest::Manifest,
    run_dir: &std::path::Path,
    key: tokentrace_schemas::CellKey,
    state: &Mutex<state::State>,
) -> Option<(String, Option<std::time::Duration>)> {
    use tokentrace_schemas::{CellKey, Phase};
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    match board.add(m, run_dir, key) {
        Ok(took) => {
            // A prefill measured by warm-up is scored with its first decode cell.
            let prefill = CellKey::new(Phase::Prefill, key.context, 1);
            let scores: Vec<_> = [key, prefill]
                .iter()
                .filter_map(|k| board.get(k).cloned())
                .collect();
            let text = board.get(&key).map(|c| match key.phase {
                Phase::Decode => tokentrace_score::live::matrix_cell(c),
                Phase::Prefill => {
                    let (tok_s, ttft) = tokentrace_score::live::prefill_cells(c);
                    format!("{tok_s} prompt tok/s · {ttft}")
                }
                _ => {
                    let [_, achieved, p99, slo] = tokentrace_score::live::open_cells(c);
                    format!("{achieved} req/s · p99 TTFT {p99} · SLO {slo}")
                }
            });
            let mut s = lock();
            scores.into_iter().for_each(|c| s.scored(c));
            text.map(|t| (t, took))
        }
        Err(e) => {
            lock().log(format!("{key}: not scored live: {e}"));
            None
        }
    }
}

/// The view of a recording in the mode chosen: it hears the runner's progress, scores
/// each committed cell live (`screen` and `live`), and draws.
#[derive(Debug)]
pub struct View {
    mode: DisplayMode,
    run_dir: std::path::PathBuf,
    state: std::sync::Arc<Mutex<state::State>>,
    board: Option<(
        tokentrace_score::live::Board,
        Box<tokentrace_schemas::manifest::Manifest>,
    )>,
    screen: Option<screen::Screen>,
    lines: line::Lines,
}

impl View {
    /// A view in `mode` of the recording `opts` describe; the screen's keys steer it.
    pub fn new(mode: DisplayMode, opts: &crate::run::session::RecordOptions) -> View {
        let state = std::sync::Arc::new(Mutex::new(state::State::default()));
        let mut view = View {
            mode,
            run_dir: opts.out.clone(),
            state: state.clone(),
            board: None,
            screen: None,
            lines: match mode {
                DisplayMode::Live => line::Lines::live(opts.progress.clone()),
                _ => line::Lines::plain(),
            },
        };
        if mode == DisplayMode::Screen {
            let steer = opts.steer.clone();
            let keyed = state.clone();
            let on_key = Box::new(move |k: screen::Key| {
                let mut s = keyed.lock().unwrap_or_else(|e| e.into_inner());
                match k {
                    screen::Key::Quit => {
                        s.end = Some("stopping: the cell under way is not kept; finish the run with --resume".to_string());
                        steer.stop();
                    }
                    screen::Key::Skip => {
                        if let Some((key, _)) = s.current {
                            s.log(format!("{key}: skipping (s)"));
                            steer.skip();
                        }
                    }
                    screen::Key::Pause => {
                        s.paused = steer.toggle_pause();
                        let line = if s.paused {
                            "paused: the next cell waits for p"
                        } else {
                            "going on"
                        };
                        s.log(line);
                    }
                }
            });
            use std::io::IsTerminal;
            opts.feed.want_lanes();
            let sources = screen::Sources {
                keys: std::io::stdin().is_terminal(),
                tokens: Some(opts.progress.clone()),
                feed: Some(opts.feed.clone()),
                on_key,
            };
            match screen::Screen::start(state, sources) {
                Ok(s) => view.screen = Some(s),
                Err(e) => {
                    eprintln!("the full-screen view could not start ({e}): plain lines instead");
                    view.mode = DisplayMode::Plain;
                }
            }
        }
        view
    }

    fn with<T>(&self, f: impl FnOnce(&mut state::State) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s)
    }

    /// Hears one step of the recording.
    pub fn show(&mut self, p: crate::run::session::Progress) {
        use crate::run::session::Progress;
        use tokentrace_schemas::manifest::CellStatus;
        if self.mode == DisplayMode::Plain {
            self.lines.show(&p, None);
            return;
        }
        let mut score = None;
        match &p {
            Progress::Plan(m) => {
                if let Ok(board) = tokentrace_score::live::Board::new(m) {
                    let rules = board.rules_label();
                    self.board = Some((board, m.clone()));
                    self.with(|s| {
                        let log = std::mem::take(&mut s.events);
                        *s = state::State {
                            rules,
                            events: log,
                            ..state::State::new(m)
                        };
                    });
                }
            }
            Progress::Line(l) => self.with(|s| s.log(l.clone())),
            Progress::CellStart { key, .. } => {
                let line = p.to_string();
                self.with(|s| {
                    s.start(*key);
                    s.log(line);
                });
            }
            Progress::CellEnd {
                key, status, line, ..
            } => {
                let text = p.to_string();
                self.with(|s| {
                    s.end(*key, *status, line.clone());
                    s.log(text);
                });
                if *status == CellStatus::Complete
                    && let Some((board, m)) = &mut self.board
                {
                    score = committed(board, m, &self.run_dir, *key, &self.state).map(|(s, _)| s);
                }
            }
        }
        if self.mode == DisplayMode::Live {
            self.lines.show(&p, score.as_deref());
        }
    }

    /// Ends the view: `end` is its last word on the screen.
    pub fn finish(self, end: Option<String>) {
        if let Some(end) = end {
            self.with(|s| s.end = Some(end));
        }
        if let Some(screen) = self.screen {
            screen.finish();
        }
        self.lines.finish();
    }
}
