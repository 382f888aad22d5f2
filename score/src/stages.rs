//! Where scoring's time and memory go, stage by stage (open, verify, load, rules, loops,
//! render): each stage's time summed over the threads that ran it, and the process's
//! resident memory when the stage last ended. `tokentrace report --timings` prints it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A stage of scoring a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The manifest, the cell folders, their commit marks and table footers.
    Open,
    /// Every page of every table decoded and counted against its footer.
    Verify,
    /// Rows read and folded into the rules' data, but for the loop search.
    Load,
    /// The verdict and warning rules and the figures.
    Rules,
    /// The loop search over every answer's text, as each answer's last row is read
    /// (summed over the threads; its memory is not noted).
    Loops,
    /// The report written out.
    Render,
}

impl Stage {
    pub const ALL: [Stage; 6] = [
        Stage::Open,
        Stage::Verify,
        Stage::Load,
        Stage::Rules,
        Stage::Loops,
        Stage::Render,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Open => "open",
            Stage::Verify => "verify",
            Stage::Load => "load",
            Stage::Rules => "rules",
            Stage::Loops => "loops",
            Stage::Render => "render",
        }
    }
}

static NS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
/// Per stage: resident and peak resident memory (KiB) when it last ended.
static MEMORY: Mutex<[Option<(u64, u64)>; 6]> = Mutex::new([None; 6]);

/// Runs `f` as part of `stage`: its time is added to the stage's, and the process's
/// memory is noted when it ends.
pub fn time<R>(stage: Stage, f: impl FnOnce() -> R) -> R {
    let started = Instant::now();
    let r = f();
    add(stage, started);
    r
}

/// Adds the time since `started` to `stage`, and notes the memory.
pub fn add(stage: Stage, started: Instant) {
    let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    NS[stage as usize].fetch_add(ns, Ordering::Relaxed);
    if let (Some(now), Ok(mut m)) = (memory(), MEMORY.lock()) {
        m[stage as usize] = Some(now);
    }
}

/// Adds the time since `started` to `stage`, without noting the memory: for a stage
/// timed in many small pieces (one request's loop search), where reading the memory
/// each time would cost more than the piece.
pub fn add_time(stage: Stage, started: Instant) {
    let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    NS[stage as usize].fetch_add(ns, Ordering::Relaxed);
}

/// The process's resident and peak resident memory, KiB (Linux's /proc/self/status).
pub fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The stages so far as a table: time (summed over threads, so parallel stages can
/// exceed the wall time), memory when the stage last ended, and the peak.
pub fn table(wall: std::time::Duration) -> String {
    let noted = MEMORY.lock().map(|m| *m).unwrap_or([None; 6]);
    let mut out = String::from("stage      time ms   RSS MiB  peak MiB\n");
    let mib = |kib: u64| format!("{:.0}", kib as f64 / 1024.0);
    for stage in Stage::ALL {
        let ns = |s: Stage| NS[s as usize].load(Ordering::Relaxed);
        // The loop search runs inside the load's time (each answer searched as its
        // last row is read): shown apart.
        let ms = match stage {
            Stage::Load => ns(Stage::Load).saturating_sub(ns(Stage::Loops)),
            _ => ns(stage),
        } as f64
            / 1e6;
        let Some((rss, peak)) = noted[stage as usize] else {
            let time = if ns(stage) > 0 {
                format!("{ms:.1}")
            } else {
                "-".to_string()
            };
            out.push_str(&format!(
                "{:<8} {time:>9} {:>9} {:>9}\n",
                stage.name(),
                "-",
                "-"
            ));
            continue;
        };
        out.push_str(&format!(
            "{:<8} {ms:>9.1} {:>9} {:>9}\n",
            stage.name(),
            mib(rss),
            mib(peak)
        ));
    }
    if noted[Stage::Verify as usize].is_none() && noted[Stage::Load as usize].is_some() {
        out.push_str("(verify: each page is checked as load reads it)\n");
    }
    let peak = memory().map_or("-".to_string(), |(_, p)| mib(p));
    out.push_str(&format!(
        "{:<8} {:>9.1} {:>9} {peak:>9}\n",
        "wall",
        wall.as_secs_f64() * 1e3,
        ""
    ));
    out
}
