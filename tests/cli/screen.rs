//! The full-screen view, run in a pseudo-terminal and read back through a terminal
//! emulator: its matrix holds what the offline scoring gives, a looping context shows
//! its hint, the terminal is given back clean, and the keys steer the recording.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use tokentrace_score::figures::{matrix_parts, opt};
use tokentrace_score::live;
use tokentrace_score::numbers::{context_label, ms_whole, rate};

/// A simulator whose 1K context loops (after 16 tokens, on an 8-token cycle, long
/// enough under the default rules) and whose 256 context does not.
const LOOPS: &str = r#"
name = "screen-loops"
model = "sim-screen"
max_model_len = 4096
max_num_seqs = 4
kv_cache_tokens = 20000
max_num_batched_tokens = 2048
block_size = 16
prefill_tokens_per_s = [[256, 200000.0], [4096, 100000.0]]
step_ms = [[1, 1.0], [4, 1.2]]
step_ms_per_mtoken = 0.0
prefill_overhead_ms = 0.2
spec_tokens = 0
spec_acceptance = 0.0
reasoning_tokens = 0
reasoning_field = "reasoning_content"
loop_probability = [[256, 0.0], [1024, 1.0]]
loop_after_tokens = 16
loop_cycle_tokens = 8
eos_probability = 0.0
seed = 5
"#;

const ROWS: u16 = 50;
const COLS: u16 = 220;

/// A command in a pseudo-terminal, its output fed to a terminal emulator.
struct Pty {
    parser: vt100::Parser,
    bytes: mpsc::Receiver<Vec<u8>>,
    writer: Box<dyn Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    /// The last full-screen frame seen (the alternate screen's contents).
    last_frame: String,
}

impl Pty {
    /// Runs `sh -c script` in a pseudo-terminal of ROWS × COLS.
    fn spawn(script: &str, cwd: &Path) -> Pty {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut cmd = CommandBuilder::new("sh");
        cmd.args(["-c", script]);
        cmd.cwd(cwd);
        cmd.env("TERM", "xterm-256color");
        cmd.env("TOKENTRACE", env!("CARGO_BIN_EXE_tokentrace"));
        let child = pair.slave.spawn_command(cmd).expect("spawns");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("reader");
        let writer = pair.master.take_writer().expect("writer");
        let (tx, bytes) = mpsc::channel();
        std::thread::spawn(move || {
            let _master = pair.master;
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Pty {
            parser: vt100::Parser::new(ROWS, COLS, 0),
            bytes,
            writer,
            child,
            last_frame: String::new(),
        }
    }

    /// Feeds what arrived within `wait` to the emulator; false once the output ended.
    fn pump(&mut self, wait: Duration) -> bool {
        match self.bytes.recv_timeout(wait) {
            Ok(b) => {
                // The last frame and the leaving of the alternate screen may come in one
                // read: the frame is taken just before the leaving.
                const LEAVE: &[u8] = b"\x1b[?1049l";
                let cut = b
                    .windows(LEAVE.len())
                    .position(|w| w == LEAVE)
                    .unwrap_or(b.len());
                self.parser.process(&b[..cut]);
                if self.parser.screen().alternate_screen() {
                    self.last_frame = self.parser.screen().contents();
                }
                self.parser.process(&b[cut..]);
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => true,
            Err(mpsc::RecvTimeoutError::Disconnected) => false,
        }
    }

    /// Pumps until `done` holds of the screen's text, or panics after `limit`.
    fn until(&mut self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) {
        let end = Instant::now() + limit;
        while !done(&self.parser.screen().contents()) {
            assert!(
                Instant::now() < end && self.pump(Duration::from_millis(100)),
                "no {what} within {limit:?}; the screen:\n{}",
                self.parser.screen().contents()
            );
        }
    }

    fn key(&mut self, k: &str) {
        self.writer.write_all(k.as_bytes()).expect("types");
        self.writer.flush().expect("flushes");
    }

    /// Pumps to the end of the output and returns the command's exit code.
    fn finish(&mut self, limit: Duration) -> u32 {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                while self.pump(Duration::from_millis(200)) {}
                return status.exit_code();
            }
            assert!(
                Instant::now() < end,
                "still running after {limit:?}; the screen:\n{}",
                self.parser.screen().contents()
            );
            self.pump(Duration::from_millis(100));
        }
    }
}

/// A folder with the looping profile in it.
fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("loops.toml"), LOOPS).expect("writes the profile");
    let run = dir.path().join("run");
    (dir, run)
}

/// `tokentrace record` of the small matrix at `contexts`, with `extra` options.
fn record_at(contexts: &str, extra: &str) -> String {
    format!(
        "\"$TOKENTRACE\" record --out run --sim-profile loops.toml --contexts {contexts} \
         --concurrency 1,2 --duration 3s --max-tokens 1100 --display screen {extra}"
    )
}

/// `tokentrace record` of the small matrix (a context that loops, one that does not).
fn record_line(extra: &str) -> String {
    record_at("256,1K", extra)
}

fn scoring(run: &Path) -> tokentrace_analyzer::Scoring {
    let rules = tokentrace_analyzer::RuleSet::load(live::LIVE_RULES).expect("rules");
    tokentrace_analyzer::score_dir(run, &rules).expect("scores")
}

/// The boxes a screen line crosses: the text between its box edges.
fn boxes(line: &str) -> Vec<&str> {
    line.split('│')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .collect()
}

/// The row for `context` of the table in the `nth` box of a line (the prefill table is
/// the first, the decode matrix the last).
fn table_row(frame: &str, context: u32, nth: impl Fn(&[&str]) -> Option<usize>) -> String {
    let label = context_label(context);
    frame
        .lines()
        .skip_while(|l| !l.contains("Decode: total tok/s"))
        .filter_map(|l| {
            let b = boxes(l);
            let i = nth(&b)?;
            let cell = b.get(i)?;
            (cell.split_whitespace().next() == Some(label.as_str())).then(|| cell.to_string())
        })
        .next()
        .unwrap_or_else(|| panic!("no row {label} in:\n{frame}"))
}

#[test]
fn the_screen_fills_in_the_matrix_the_scoring_gives_and_leaves_the_terminal_clean() {
    let (dir, run) = setup();
    // After the recorder, a line read from the terminal: it arrives only when the
    // terminal is back in its usual (cooked, echoing) mode.
    let script = format!(
        "{}; echo \"exit=$?\"; read answer; echo \"prompt got: $answer\"",
        record_line("")
    );
    let mut pty = Pty::spawn(&script, dir.path());
    pty.until("exit line", Duration::from_secs(180), |s| {
        s.contains("exit=")
    });
    let frame = pty.last_frame.clone();
    let screen = pty.parser.screen().contents();
    assert!(screen.contains("exit=0"), "{screen}");
    assert!(
        !pty.parser.screen().alternate_screen() && !pty.parser.screen().hide_cursor(),
        "the alternate screen was left and the cursor shown"
    );
    pty.key("hello\r");
    pty.until("the prompt's answer", Duration::from_secs(10), |s| {
        s.contains("prompt got: hello")
    });
    assert_eq!(pty.finish(Duration::from_secs(10)), 0);

    // The last frame: every decode cell as the offline scoring (same rules) gives it.
    assert!(frame.contains("finished"), "{frame}");
    let s = scoring(&run);
    let mut looped = 0;
    for c in s
        .cells
        .iter()
        .filter(|c| c.phase == tokentrace_schemas::Phase::Decode)
    {
        let line = table_row(&frame, c.context, |b| b.len().checked_sub(1));
        match matrix_parts(c) {
            Some((tok_s, _, _)) => {
                let f = c.figures.as_ref().expect("figures");
                assert_eq!(tok_s, opt(f.total_tok_s, |x| rate(x, false)));
                let ttft = opt(f.ttft_ms.median, ms_whole);
                let shown = format!("{tok_s} · {ttft}");
                assert!(
                    line.contains(&shown),
                    "{}: `{shown}` not in `{line}`",
                    c.key()
                );
            }
            None => {
                assert_eq!(
                    c.verdict,
                    Some(tokentrace_analyzer::contract::Verdict::Looped)
                );
                assert!(
                    line.contains("loop?"),
                    "{}: no loop hint in `{line}`",
                    c.key()
                );
                looped += 1;
            }
        }
    }
    assert_eq!(looped, 2, "both 1K cells loop:\n{frame}");
    // The prefill table: prompt tok/s per context.
    for c in s
        .cells
        .iter()
        .filter(|c| c.phase == tokentrace_schemas::Phase::Prefill)
    {
        let (tok_s, ttft) = live::prefill_cells(c);
        let row = table_row(&frame, c.context, |_| Some(0));
        let shown: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .collect();
        assert_eq!(
            shown[1..],
            [tok_s.as_str(), ttft.as_str()],
            "prefill row `{row}`"
        );
    }
}

/// Waits until the screen shows the cell under way recording.
fn until_recording(pty: &mut Pty, cell: &str) {
    pty.until(cell, Duration::from_secs(120), |s| {
        s.lines()
            .any(|l| l.contains(cell) && l.contains(": recording"))
    });
}

#[test]
fn q_stops_softly_and_resume_finishes_the_run() {
    let (dir, run) = setup();
    let mut pty = Pty::spawn(&record_line(""), dir.path());
    until_recording(&mut pty, "decode context=256 concurrency=2");
    pty.key("q");
    assert_eq!(pty.finish(Duration::from_secs(60)), 130);
    let screen = pty.parser.screen().contents();
    assert!(screen.contains("--resume"), "{screen}");
    let m = manifest(&run);
    let status = |phase: &str, ctx: u64, n: u64| cell_status(&m, phase, ctx, n);
    assert_eq!(status("decode", 256, 1), "complete");
    assert_ne!(
        status("decode", 256, 2),
        "complete",
        "the cell under way is not kept"
    );
    assert!(
        !run.join("cells/phase=decode/context=256/concurrency=2/cell.json")
            .exists()
    );

    let mut pty = Pty::spawn(&record_line("--resume"), dir.path());
    assert_eq!(pty.finish(Duration::from_secs(180)), 0);
    let m = manifest(&run);
    for c in m["cells"].as_array().expect("cells") {
        assert_eq!(c["status"], "complete", "{c}");
    }
}

#[test]
fn s_skips_the_cell_under_way_and_resume_keeps_it_skipped() {
    let (dir, run) = setup();
    let mut pty = Pty::spawn(&record_at("256", ""), dir.path());
    until_recording(&mut pty, "decode context=256 concurrency=1");
    pty.key("s");
    // Exit 3: a run with skipped cells.
    assert_eq!(pty.finish(Duration::from_secs(120)), 3);
    let m = manifest(&run);
    assert_eq!(cell_status(&m, "decode", 256, 1), "skipped");
    let reason = cell_reason(&m, "decode", 256, 1);
    assert!(reason.starts_with("skipped by the user at 20"), "{reason}");
    assert_eq!(cell_status(&m, "decode", 256, 2), "complete");
    // The report lists it as skipped by the user.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .arg("report")
        .arg(&run)
        .output()
        .expect("reports");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("skipped by the user"), "{report}");

    // Resumed, it stays skipped; with --retry-skipped it is recorded.
    let mut pty = Pty::spawn(&record_at("256", "--resume"), dir.path());
    assert_eq!(pty.finish(Duration::from_secs(120)), 3);
    assert_eq!(cell_status(&manifest(&run), "decode", 256, 1), "skipped");
    let mut pty = Pty::spawn(&record_at("256", "--resume --retry-skipped"), dir.path());
    assert_eq!(pty.finish(Duration::from_secs(120)), 0);
    assert_eq!(cell_status(&manifest(&run), "decode", 256, 1), "complete");
}

#[test]
fn p_holds_the_next_cell_until_pressed_again() {
    let (dir, run) = setup();
    let mut pty = Pty::spawn(&record_at("256", ""), dir.path());
    until_recording(&mut pty, "decode context=256 concurrency=1");
    pty.key("p");
    pty.until("the pause", Duration::from_secs(60), |s| {
        s.contains("paused before decode context=256 concurrency=2")
    });
    // Held: the next cell does not start while paused.
    let held = Instant::now() + Duration::from_secs(3);
    while Instant::now() < held {
        pty.pump(Duration::from_millis(100));
    }
    let screen = pty.parser.screen().contents();
    assert!(
        !screen.contains("decode context=256 concurrency=2: recording"),
        "{screen}"
    );
    assert!(
        !run.join("cells/phase=decode/context=256/concurrency=2")
            .exists()
    );
    pty.key("p");
    assert_eq!(pty.finish(Duration::from_secs(120)), 0);
    assert_eq!(cell_status(&manifest(&run), "decode", 256, 2), "complete");
}

fn manifest(run: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(run.join("manifest.json")).expect("manifest");
    serde_json::from_str(&text).expect("json")
}

fn cell<'a>(m: &'a serde_json::Value, phase: &str, ctx: u64, n: u64) -> &'a serde_json::Value {
    m["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .find(|c| c["phase"] == phase && c["context"] == ctx && c["concurrency"] == n)
        .unwrap_or_else(|| panic!("no cell {phase} {ctx} {n}"))
}

fn cell_status(m: &serde_json::Value, phase: &str, ctx: u64, n: u64) -> String {
    cell(m, phase, ctx, n)["status"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn cell_reason(m: &serde_json::Value, phase: &str, ctx: u64, n: u64) -> String {
    cell(m, phase, ctx, n)["reason"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The tables of a full-screen frame: from the prefill table's top edge to the bottom
/// edge of the tables.
fn tables(frame: &str) -> String {
    let lines: Vec<&str> = frame
        .lines()
        .skip_while(|l| !l.contains("┌ Prefill"))
        .collect();
    let end = lines
        .iter()
        .position(|l| l.starts_with('└'))
        .unwrap_or(lines.len());
    lines[..=end.min(lines.len().saturating_sub(1))].join("\n")
}

#[test]
fn watch_follows_a_recording_in_another_process_to_the_same_final_screen() {
    let (dir, _run) = setup();
    let mut recorder = Pty::spawn(&record_line(""), dir.path());
    let mut watcher = Pty::spawn("\"$TOKENTRACE\" watch run --every 200ms", dir.path());
    let end = Instant::now() + Duration::from_secs(240);
    let (mut rec_code, mut watch_code) = (None, None);
    while rec_code.is_none() || watch_code.is_none() {
        assert!(
            Instant::now() < end,
            "still running:\n{}",
            watcher.parser.screen().contents()
        );
        recorder.pump(Duration::from_millis(20));
        watcher.pump(Duration::from_millis(20));
        if rec_code.is_none()
            && let Ok(Some(s)) = recorder.child.try_wait()
        {
            rec_code = Some(s.exit_code());
        }
        if watch_code.is_none()
            && let Ok(Some(s)) = watcher.child.try_wait()
        {
            watch_code = Some(s.exit_code());
        }
    }
    while recorder.pump(Duration::from_millis(200)) {}
    while watcher.pump(Duration::from_millis(200)) {}
    assert_eq!((rec_code, watch_code), (Some(0), Some(0)));
    let (rec, seen) = (recorder.last_frame.clone(), watcher.last_frame.clone());
    assert!(seen.contains("tokentrace watch"), "{seen}");
    assert!(seen.contains("cells 6/6 done"), "{seen}");
    assert!(tables(&rec).contains("loop?"), "{rec}");
    assert_eq!(
        tables(&seen),
        tables(&rec),
        "the watcher's tables differ from the recorder's"
    );
    let after = watcher.parser.screen().contents();
    assert!(after.contains("the run is complete"), "{after}");
}
