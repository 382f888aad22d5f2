//! The full-screen view (ratatui on crossterm): the header, the prefill table, the
//! decode matrix and the open-loop table filling in, the cell under way with the
//! server's gauges, the event log and the keys. It draws at most four times a second
//! from a copy of the state, on a thread of its own, and reads keys only there.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Sparkline, Table};
use tokentrace_schemas::layout::Phase;
use tokentrace_score::live;
use tokentrace_score::numbers::{context_label, rate};

use super::state::{Standing, State};
use super::{Feed, MIN_SCREEN, Series};

/// The shortest time between two frames.
pub const FRAME: Duration = Duration::from_millis(250);

/// A key the user pressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `q` (or Ctrl-C, which raw mode turns into a key).
    Quit,
    /// `s`.
    Skip,
    /// `p`.
    Pause,
}

/// The full-screen view while it runs.
#[derive(Debug)]
pub struct Screen {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the drawing thread reads besides the state.
pub struct Sources {
    /// Whether to read keys (only when stdin is a terminal).
    pub keys: bool,
    /// Tokens written so far (live tok/s), when recording.
    pub tokens: Option<Arc<AtomicU64>>,
    /// The server's gauges, when recording.
    pub feed: Option<Arc<Feed>>,
    /// Called with each key pressed.
    pub on_key: Box<dyn FnMut(Key) + Send>,
}

impl Screen {
    /// Takes the terminal (raw mode, the alternate screen) and draws `state` until
    /// [`Screen::finish`]; a panic anywhere gives the terminal back first.
    pub fn start(state: Arc<Mutex<State>>, mut sources: Sources) -> std::io::Result<Screen> {
        let raw = sources.keys;
        let mut terminal = take_terminal(raw)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tokentrace-screen".to_string())
            .spawn(move || {
                yield_to_measurement();
                let began = Instant::now();
                let mut last_tokens = sources.tokens.as_ref().map(|t| t.load(Ordering::Relaxed));
                let mut last_at = began;
                loop {
                    let done = stopping.load(Ordering::Acquire);
                    let snapshot = {
                        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                        s.elapsed = s
                            .started_at
                            .and_then(|t| t.elapsed().ok())
                            .unwrap_or_else(|| began.elapsed());
                        if let Some(feed) = &sources.feed {
                            s.gauges = feed.gauges();
                            feed.take_notes().into_iter().for_each(|l| s.log(l));
                        }
                        if let (Some(t), Some(was)) = (&sources.tokens, last_tokens) {
                            let now = t.load(Ordering::Relaxed);
                            let dt = last_at.elapsed().as_secs_f64();
                            if dt >= 0.5 {
                                s.tok_s = Some(now.saturating_sub(was) as f64 / dt);
                                (last_tokens, last_at) = (Some(now), Instant::now());
                            }
                        }
                        s.clone()
                    };
                    // A failed draw (a terminal gone) never stops the recording.
                    let _ = terminal.draw(|f| draw(f, &snapshot));
                    if done {
                        break;
                    }
                    let until = Instant::now() + FRAME;
                    if !sources.keys {
                        std::thread::sleep(FRAME);
                        continue;
                    }
                    while let Some(left) = until.checked_duration_since(Instant::now()) {
                        if !matches!(event::poll(left), Ok(true)) {
                            break;
                        }
                        if let Ok(Event::Key(k)) = event::read()
                            && k.kind == KeyEventKind::Press
                        {
                            let key = match k.code {
                                KeyCode::Char('q') | KeyCode::Char('Q') => Some(Key::Quit),
                                KeyCode::Char('c')
                                    if k.modifiers.contains(KeyModifiers::CONTROL) =>
                                {
                                    Some(Key::Quit)
                                }
                                KeyCode::Char('s') | KeyCode::Char('S') => Some(Key::Skip),
                                KeyCode::Char('p') | KeyCode::Char('P') => Some(Key::Pause),
                                _ => None,
                            };
                            if let Some(key) = key {
                                (sources.on_key)(key);
                                break;
                            }
                        }
                    }
                }
                let _ = terminal.show_cursor();
                give_back(raw);
            })?;
        Ok(Screen {
            stop,
            thread: Some(thread),
        })
    }

    /// Draws the last frame and gives the terminal back (as dropping it does).
    pub fn finish(self) {}
}

/// The drawing thread gives way to the recording's threads and to anything else on
/// the machine (the server under test, when it shares the cores): it runs at nice 10,
/// so a frame waits rather than delays a read. Best effort; on Linux only, where nice is
/// a thread's own.
fn yield_to_measurement() {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let _ = rustix::process::setpriority_process(Some(tid), NICE);
    }
}

/// The drawing thread's nice value.
pub const NICE: i32 = 10;

/// Raw mode (when keys are read: without it, Ctrl-C stays a signal) and the alternate
/// screen; a panic gives them back before its message.
fn take_terminal(raw: bool) -> std::io::Result<ratatui::DefaultTerminal> {
    use ratatui::crossterm::{execute, terminal};
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            give_back(true);
            previous(info);
        }));
    });
    if raw {
        terminal::enable_raw_mode()?;
    }
    // Drawing writes only what changed from a blank screen: start from one (cleared
    // here, without asking the terminal where its cursor is, as `Terminal::clear` does).
    let taken = execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        terminal::Clear(terminal::ClearType::All)
    )
    .and_then(|()| {
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))
    });
    if taken.is_err() {
        give_back(raw);
    }
    taken
}

/// Leaves the alternate screen, shows the cursor and ends raw mode.
fn give_back(raw: bool) {
    use ratatui::crossterm::{cursor, execute, terminal};
    if raw {
        let _ = terminal::disable_raw_mode();
    }
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").finish_non_exhaustive()
    }
}

/// `h:mm:ss`.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// Draws the whole view of `s` into `f`.
pub fn draw(f: &mut Frame, s: &State) {
    let area = f.area();
    if area.width < MIN_SCREEN.0 || area.height < MIN_SCREEN.1 {
        draw_small(f, s);
        return;
    }
    let open = open_rows(s);
    let tables = (s
        .of(Phase::Decode)
        .count()
        .max(s.of(Phase::Prefill).count()) as u16
        + 3)
    .clamp(5, area.height / 3);
    let open_h = if open.is_empty() {
        0
    } else {
        (open.len() as u16 + 3).clamp(4, area.height / 4)
    };
    let [head, tables_area, open_area, current, log, keys] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(tables),
        Constraint::Length(open_h),
        // The cell under way: its line, the gauges, spec, lanes, outcomes, GPUs.
        Constraint::Length(8),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(f, head, s);
    let [prefill, matrix] =
        Layout::horizontal([Constraint::Length(30), Constraint::Min(40)]).areas(tables_area);
    draw_prefill(f, prefill, s);
    draw_matrix(f, matrix, s);
    if !open.is_empty() {
        let table = Table::new(
            open,
            [
                Constraint::Length(30),
                Constraint::Length(10),
                Constraint::Length(14),
                Constraint::Length(12),
                Constraint::Min(6),
            ],
        )
        .header(
            Row::new(["cell", "offered", "achieved req/s", "p99 TTFT", "SLO"])
                .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(" Burst · rate · replay "));
        f.render_widget(table, open_area);
    }
    draw_current(f, current, s);
    let lines: Vec<Line> = s
        .events
        .iter()
        .rev()
        .take(usize::from(log.height.saturating_sub(2)))
        .rev()
        .map(|l| Line::from(l.as_str()))
        .collect();
    f.render_widget(
        Paragraph::new(Text::from(lines)).block(Block::bordered().title(" Events ")),
        log,
    );
    f.render_widget(Paragraph::new(keys_line(s)), keys);
}

/// Below 80×24: the header's two lines, the cell under way and the keys.
fn draw_small(f: &mut Frame, s: &State) {
    let mut lines = header_lines(s);
    lines.push(current_line(s));
    lines.push(keys_line(s));
    f.render_widget(Paragraph::new(Text::from(lines)), f.area());
}

fn header_lines(s: &State) -> Vec<Line<'static>> {
    let h = &s.header;
    let c = s.counts();
    let eta = s.eta().map_or_else(|| "—".to_string(), clock);
    vec![
        Line::from(format!(
            "{} · {} · {} · {} · {}",
            h.target, h.model, h.engine, h.gpus, h.host
        )),
        Line::from(format!(
            "elapsed {} · ETA {eta} · cells {}/{} done, {} skipped, {} failed · hints: {} (final verdicts: tokentrace report)",
            clock(s.elapsed),
            c.done,
            c.total,
            c.skipped,
            c.failed,
            s.rules
        )),
    ]
}

fn draw_header(f: &mut Frame, area: Rect, s: &State) {
    let title = if s.read_only {
        format!(" tokentrace watch · {} ", s.header.run_id)
    } else {
        format!(" tokentrace · {} ", s.header.run_id)
    };
    f.render_widget(
        Paragraph::new(Text::from(header_lines(s))).block(Block::bordered().title(title)),
        area,
    );
}

/// A cell that has no figures to show: how it stands.
fn standing_text(st: &Standing) -> String {
    match st {
        Standing::Planned => "·".to_string(),
        Standing::Recording => "recording…".to_string(),
        Standing::Scored(c) => c.status_label(),
        Standing::Committed(_) => "committed".to_string(),
        Standing::Failed(_) => "failed".to_string(),
        Standing::Skipped(_) => "skipped".to_string(),
    }
}

fn draw_prefill(f: &mut Frame, area: Rect, s: &State) {
    let rows: Vec<Row> = s
        .of(Phase::Prefill)
        .map(|r| {
            let (tok_s, ttft) = match &r.standing {
                Standing::Scored(c) => live::prefill_cells(c),
                other => (standing_text(other), String::new()),
            };
            Row::new([context_label(r.key.context), tok_s, ttft])
        })
        .collect();
    let table = Table::new(
        rows,
        [
            Constraint::Length(6),
            Constraint::Length(11),
            Constraint::Min(8),
        ],
    )
    .header(
        Row::new(["ctx", "prompt t/s", "TTFT"]).style(Style::new().add_modifier(Modifier::BOLD)),
    )
    .block(Block::bordered().title(" Prefill "));
    f.render_widget(table, area);
}

fn draw_matrix(f: &mut Frame, area: Rect, s: &State) {
    let mut contexts: Vec<u32> = s.of(Phase::Decode).map(|r| r.key.context).collect();
    let mut levels: Vec<u32> = s.of(Phase::Decode).map(|r| r.key.concurrency).collect();
    contexts.sort_unstable();
    contexts.dedup();
    levels.sort_unstable();
    levels.dedup();
    let rows: Vec<Row> = contexts
        .iter()
        .map(|&ctx| {
            let mut cells = vec![Cell::from(context_label(ctx))];
            for &n in &levels {
                let text = s
                    .of(Phase::Decode)
                    .find(|r| r.key.context == ctx && r.key.concurrency == n)
                    .map(|r| match &r.standing {
                        Standing::Scored(c) => live::matrix_cell(c),
                        Standing::Recording => match s.tok_s {
                            Some(t) => format!("{} t/s…", rate(t, false)),
                            None => "recording…".to_string(),
                        },
                        other => standing_text(other),
                    })
                    .unwrap_or_default();
                cells.push(Cell::from(text));
            }
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![Constraint::Length(6)];
    widths.extend(levels.iter().map(|_| Constraint::Fill(1)));
    let mut head = vec!["ctx".to_string()];
    head.extend(levels.iter().map(|n| format!("×{n}")));
    let table = Table::new(rows, widths)
        .header(Row::new(head).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::bordered().title(" Decode: total tok/s · hint · median TTFT "));
    f.render_widget(table, area);
}

/// The burst, rate and replay cells' rows.
fn open_rows(s: &State) -> Vec<Row<'static>> {
    s.rows
        .iter()
        .filter(|r| matches!(r.key.phase, Phase::Burst | Phase::Rate | Phase::Replay))
        .map(|r| {
            let mut cells = vec![r.key.to_string()];
            match &r.standing {
                Standing::Scored(c) => cells.extend(live::open_cells(c)),
                other => cells.push(standing_text(other)),
            }
            Row::new(cells)
        })
        .collect()
}

fn current_line(s: &State) -> Line<'static> {
    if s.paused {
        return Line::from("paused before the next cell: press p to go on");
    }
    match s.current {
        Some((key, since)) => Line::from(format!(
            "{key} · {} · {}",
            s.tok_s.map_or_else(
                || "— tok/s".to_string(),
                |t| format!("{} tok/s", rate(t, false))
            ),
            clock(s.elapsed.saturating_sub(since))
        )),
        None => Line::from("between cells"),
    }
}

fn draw_current(f: &mut Frame, area: Rect, s: &State) {
    let block = Block::bordered().title(" Under way ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    // The sparklines take a third of the width, two columns apart from the text, so
    // that a long line (the cell, its rate and its clock) is cut, never run into their
    // labels ("0:00:04running" at 150 columns, before).
    let spark_width = (inner.width / 3).clamp(20, 60);
    let [text, sparks] = Layout::horizontal([Constraint::Min(20), Constraint::Length(spark_width)])
        .spacing(2)
        .areas(inner);
    let g = &s.gauges;
    let last = |x: &Series, f: fn(f64) -> String| x.last().map_or_else(|| "—".to_string(), f);
    let mut lines = vec![current_line(s)];
    lines.push(Line::from(format!(
        "running {} · waiting {} · KV {}",
        last(&g.running, |v| format!("{v:.0}")),
        last(&g.waiting, |v| format!("{v:.0}")),
        last(&g.kv_cache, |v| format!("{:.0}%", v * 100.0)),
    )));
    if !g.spec.0.is_empty() {
        lines.push(Line::from(if g.spec_is_length {
            format!(
                "spec acceptance length {}",
                last(&g.spec, |v| format!("{v:.2}"))
            )
        } else {
            format!(
                "spec acceptance {}",
                last(&g.spec, |v| format!("{:.0}%", v * 100.0))
            )
        }));
    }
    if !g.lanes.is_empty() {
        lines.push(Line::from(format!(
            "{} streams {}",
            g.lanes.len(),
            lane_strip(&g.lanes, 60usize.saturating_sub(12))
        )));
    }
    if s.current.is_some() && g.outcomes.requests > 0 {
        lines.push(Line::from(g.outcomes.line()));
    }
    if !g.gpu_power_w.0.is_empty() || !g.gpu_util_pct.0.is_empty() {
        lines.push(Line::from(format!(
            "GPU {} · util {}",
            last(&g.gpu_power_w, |v| format!("{v:.0} W")),
            last(&g.gpu_util_pct, |v| format!("{v:.0}%")),
        )));
    }
    f.render_widget(Paragraph::new(Text::from(lines)), text);
    let shown: Vec<(&str, &Series)> = [
        ("running", &g.running),
        ("waiting", &g.waiting),
        ("KV", &g.kv_cache),
        ("spec", &g.spec),
        ("GPU W", &g.gpu_power_w),
    ]
    .into_iter()
    .filter(|(_, x)| !x.0.is_empty())
    .take(usize::from(sparks.height))
    .collect();
    let rows = Layout::vertical(shown.iter().map(|_| Constraint::Length(1))).split(sparks);
    for ((name, series), row) in shown.iter().zip(rows.iter()) {
        let [label, spark] =
            Layout::horizontal([Constraint::Length(8), Constraint::Min(8)]).areas(*row);
        f.render_widget(Paragraph::new(*name), label);
        let width = usize::from(spark.width);
        let max = series.0.iter().copied().fold(0.0_f64, f64::max).max(1e-9);
        let data: Vec<u64> = series
            .0
            .iter()
            .skip(series.0.len().saturating_sub(width))
            .map(|v| (v / max * 100.0).round() as u64)
            .collect();
        f.render_widget(Sparkline::default().data(&data).max(100), spark);
    }
}

/// The streams in flight as a strip of at most `width` bars, each as tall as its tokens
/// against the most any has (streams past the width share a bar: their mean).
pub fn lane_strip(lanes: &[u64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = lanes.iter().copied().max().unwrap_or(0).max(1) as f64;
    let per = lanes.len().div_ceil(width.max(1)).max(1);
    lanes
        .chunks(per)
        .map(|c| {
            let mean = c.iter().sum::<u64>() as f64 / c.len() as f64;
            BARS[((mean / max) * 7.0).round().clamp(0.0, 7.0) as usize]
        })
        .collect()
}

fn keys_line(s: &State) -> Line<'static> {
    if let Some(end) = &s.end {
        return Line::from(end.clone());
    }
    if s.read_only {
        Line::from("q quit (the recording goes on)")
    } else {
        Line::from(
            "q stop (the cell under way is not kept; finish with --resume) · s skip the cell · p pause before the next",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_bars_against_the_longest_and_share_bars_past_the_width() {
        assert_eq!(lane_strip(&[0, 50, 100], 10), "▁▅█");
        let many: Vec<u64> = (0..100).collect();
        let strip = lane_strip(&many, 10);
        assert_eq!(strip.chars().count(), 10);
        assert!(strip.starts_with('▁') && strip.ends_with('█'), "{strip}");
        assert_eq!(lane_strip(&[], 10), "");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_drawing_thread_runs_below_the_recording() {
        let me = || rustix::process::getpriority_process(Some(rustix::thread::gettid()));
        let before = me();
        let nice = std::thread::spawn(|| {
            yield_to_measurement();
            rustix::process::getpriority_process(Some(rustix::thread::gettid()))
        })
        .join()
        .expect("the thread ends");
        assert!(matches!(nice, Ok(n) if n >= NICE), "{nice:?}");
        assert_eq!(me(), before, "only the drawing thread");
    }

    #[test]
    fn the_clock_reads_hours_minutes_seconds() {
        assert_eq!(clock(Duration::from_secs(3 * 3600 + 7 * 60 + 5)), "3:07:05");
    }
}
