//! The chaos benchmark (`bench/chaos.sh`, not CI): the same matrix recorded twice against
//! a `tokentrace sim` process, once straight and once through the fault proxy drawing
//! faults at random (seeded); prints the requests sent, how the affected ones ended by
//! class, the requests unaccounted for, and the figures of unaffected cells against the
//! fault-free run.
//!
//! `cargo run -p tokentrace-testkit --example chaos -- BIN MINUTES SEED OUT`: BIN is the
//! `tokentrace` binary, MINUTES the whole benchmark's length (half each run).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokentrace_recorder::run::runner::REQUEST_ID_STRIDE;
use tokentrace_schemas::layout::{Phase, list_cells};
use tokentrace_schemas::manifest::Manifest;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{EndReason, EventKind, Events, RequestRow, Requests};
use tokentrace_sim::truth::TruthRequests;
use tokentrace_testkit::netfault::{Fault, FaultProxy, Life, Plan};

/// Share of connections that meet a fault.
const SHARE: f64 = 0.15;
/// Time between refusal windows.
const REFUSE_EVERY: Duration = Duration::from_secs(240);
/// Decode cells of the matrix.
const CONCURRENCY: &str = "1,2,4";
const CONTEXTS: &str = "512,2048";

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bin, minutes, seed, out] = args.as_slice() else {
        return Err("usage: chaos TOKENTRACE_BIN MINUTES SEED OUT_DIR".to_string());
    };
    let minutes: f64 = minutes.parse().map_err(|e| format!("MINUTES: {e}"))?;
    let seed: u64 = seed.parse().map_err(|e| format!("SEED: {e}"))?;
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    // Six decode cells a run; about 30 s of each cell's time goes to its prefill
    // scouts, warm-up, drain and commit.
    let window = ((minutes * 60.0 / 2.0) / 6.0 - 10.0).max(10.0);
    let window = format!("{window:.0}s");
    eprintln!("chaos: {minutes} min, decode windows of {window}, seed {seed}");
    let clean = record(bin, &out, "clean", &window, None)?;
    let chaos = record(
        bin,
        &out,
        "chaos",
        &window,
        Some(Plan {
            fault: Fault::Chaos {
                refuse_every: Some(REFUSE_EVERY),
            },
            share: SHARE,
            // Completion streams only: a faulted scrape or probe call would mark every
            // cell it spans as affected, leaving none to compare.
            streams_only: true,
            seed,
        }),
    )?;
    summarize(bin, &clean, &chaos)
}

/// One recorded run and what the proxy saw of it.
struct Run {
    dir: PathBuf,
    truth: PathBuf,
    lives: Vec<Life>,
}

/// Records the matrix against a fresh simulator, through a proxy with `plan` if given.
fn record(
    bin: &str,
    out: &Path,
    name: &str,
    window: &str,
    plan: Option<Plan>,
) -> Result<Run, String> {
    let truth = out.join(format!("{name}-truth"));
    let mut sim = Command::new(bin)
        .args([
            "sim",
            "--profile",
            "tiny",
            "--listen",
            "127.0.0.1:0",
            "--ground-truth",
        ])
        .arg(&truth)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{bin} sim: {e}"))?;
    let mut line = String::new();
    let stdout = sim.stdout.take().ok_or("the simulator's stdout")?;
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| format!("the simulator's first line: {e}"))?;
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("the simulator said {line:?}"))?
        .to_string();
    let proxy = match plan {
        Some(plan) => {
            let addr = url
                .trim_start_matches("http://")
                .parse()
                .map_err(|e| format!("{url}: {e}"))?;
            Some(FaultProxy::start(addr, plan).map_err(|e| format!("the proxy: {e}"))?)
        }
        None => None,
    };
    let target = proxy
        .as_ref()
        .map_or(url.clone(), |p| format!("http://{}", p.addr()));
    let dir = out.join(name);
    let status = Command::new(bin)
        .args(["record", "--target", &target, "--out"])
        .arg(&dir)
        .args([
            "--contexts",
            CONTEXTS,
            "--concurrency",
            CONCURRENCY,
            "--duration",
            window,
            "--max-tokens",
            "256",
            "--stall-timeout",
            "3s",
            "--drain-timeout",
            "5s",
            "--metrics-interval",
            "500ms",
            "--gpu-telemetry",
            "off",
        ])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("{bin} record: {e}"))?;
    eprintln!("{name}: the recorder exited with {status}");
    let _ = Command::new("kill")
        .args(["-INT", &sim.id().to_string()])
        .status();
    let _ = sim.wait();
    let lives = proxy.map(|p| p.lives()).unwrap_or_default();
    Ok(Run { dir, truth, lives })
}

/// A decode cell: (context, concurrency).
type Cell = (u32, u32);

fn requests(run: &Path) -> Result<Vec<Vec<RequestRow>>, String> {
    list_cells(run)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(_, dir)| {
            read_table::<Requests>(&dir.join("requests.parquet")).map_err(|e| e.to_string())
        })
        .collect()
}

/// How a request ended, as the benchmark classes it.
fn class(q: &RequestRow) -> &'static str {
    let error = q.error.as_deref().unwrap_or("");
    match q.end_reason {
        EndReason::FinishedLength | EndReason::FinishedStop | EndReason::FinishedOther
            if q.retries.is_some_and(|r| r > 0) =>
        {
            "completed after a retry"
        }
        EndReason::FinishedLength | EndReason::FinishedStop | EndReason::FinishedOther => {
            "completed"
        }
        EndReason::Cancelled => "cancelled at window close",
        EndReason::StallTimeout => "stalled (stall timeout)",
        EndReason::Disconnect if error.contains("cannot connect") => "refused",
        EndReason::Disconnect => "reset or closed mid-stream",
        EndReason::HttpError => "HTTP error",
        EndReason::StreamError => "stream error",
    }
}

/// Each cell's span (cell start to cell end) on CLOCK_MONOTONIC.
fn spans(run: &Path) -> Result<BTreeMap<Cell, (i64, i64)>, String> {
    let m = Manifest::read(run).map_err(|e| e.to_string())?;
    let zero = m
        .clock
        .monotonic_at_zero_ns
        .ok_or("the run has no CLOCK_MONOTONIC anchor")?;
    let mut out = BTreeMap::new();
    for (key, dir) in list_cells(run).map_err(|e| e.to_string())? {
        if key.phase != Phase::Decode {
            continue;
        }
        let events =
            read_table::<Events>(&dir.join("events.parquet")).map_err(|e| e.to_string())?;
        let at = |k: EventKind| {
            events
                .iter()
                .find(|e| e.kind == k)
                .map(|e| e.time_ns + zero)
        };
        if let (Some(a), Some(b)) = (at(EventKind::CellStart), at(EventKind::CellEnd)) {
            out.insert((key.context, key.concurrency), (a, b));
        }
    }
    Ok(out)
}

/// Total tok/s of each complete cell, from `tokentrace report --format json`.
fn tok_s(bin: &str, run: &Path) -> Result<BTreeMap<Cell, f64>, String> {
    let out = Command::new(bin)
        .args(["report", "--format", "json"])
        .arg(run)
        .output()
        .map_err(|e| format!("{bin} report: {e}"))?;
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("report: {e}"))?;
    let mut m = BTreeMap::new();
    for c in v["cells"].as_array().into_iter().flatten() {
        if c["phase"] != "decode" {
            continue;
        }
        let number = |k: &str| c[k].as_u64().and_then(|n| u32::try_from(n).ok());
        if let (Some(ctx), Some(n), Some(t)) = (
            number("context"),
            number("concurrency"),
            c["figures"]["total_tok_s"].as_f64(),
        ) {
            m.insert((ctx, n), t);
        }
    }
    Ok(m)
}

/// What one run's trace and its server's ground truth say of its requests.
#[derive(Default)]
struct Accounting {
    sent: usize,
    by_class: BTreeMap<&'static str, usize>,
    /// Requests the server saw whose response id no row holds …
    unseen: usize,
    /// … and what explains them: sent rows whose answer never came, and attempts sent
    /// again on a new connection (a first try may reach the server before its
    /// connection dies).
    no_id: usize,
    retried: usize,
    /// Gaps in a cell's request ids, and ids twice.
    missing: usize,
    twice: usize,
}

impl Accounting {
    fn unaccounted(&self) -> usize {
        self.missing + self.twice + self.unseen.saturating_sub(self.no_id + self.retried)
    }
}

fn accounting(run: &Run, name: &str) -> Result<Accounting, String> {
    let cells = requests(&run.dir)?;
    let rows: Vec<&RequestRow> = cells.iter().flatten().collect();
    let mut a = Accounting {
        sent: rows
            .iter()
            .filter(|q| q.sent_ns.is_some() || q.connect_start_ns.is_some())
            .count(),
        ..Accounting::default()
    };
    for q in &rows {
        *a.by_class.entry(class(q)).or_insert(0) += 1;
    }
    for rows in &cells {
        let ids: BTreeSet<i64> = rows.iter().map(|q| q.request_id).collect();
        a.twice += rows.len() - ids.len();
        // A cell's requests count up from its base (a multiple of the stride); the
        // probe's rows, placed in the first cell, sit at the top of its range.
        let counted: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| id % REQUEST_ID_STRIDE < REQUEST_ID_STRIDE / 2)
            .collect();
        if let (Some(lo), Some(hi)) = (counted.first(), counted.last()) {
            a.missing += usize::try_from(hi - lo + 1).unwrap_or(0) - counted.len();
        }
    }
    let truth = read_table::<TruthRequests>(&run.truth.join("truth_requests.parquet"))
        .map_err(|e| e.to_string())?;
    let seen: BTreeSet<&str> = rows
        .iter()
        .filter_map(|q| q.server_request_id.as_deref())
        .collect();
    for t in truth
        .iter()
        .filter(|t| !seen.contains(t.server_request_id.as_str()))
    {
        a.unseen += 1;
        eprintln!(
            "{name}: the server saw {} ({} prompt tokens, {} completion tokens, {}) with no row holding its id",
            t.server_request_id, t.prompt_tokens, t.completion_tokens, t.outcome
        );
    }
    a.no_id = rows
        .iter()
        .filter(|q| q.sent_ns.is_some() && q.server_request_id.is_none())
        .count();
    a.retried = rows
        .iter()
        .filter_map(|q| q.retries)
        .map(|r| usize::try_from(r).unwrap_or(0))
        .sum();
    Ok(a)
}

fn summarize(bin: &str, clean: &Run, chaos: &Run) -> Result<(), String> {
    let (a, b) = (accounting(clean, "clean")?, accounting(chaos, "chaos")?);
    let mut faulted: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &chaos.lives {
        *faulted.entry(l.class).or_insert(0) += 1;
    }
    println!("| | fault-free run | chaos run |\n|---|---:|---:|");
    println!(
        "| connections through the proxy | — | {} |",
        chaos.lives.len()
    );
    for (class, n) in &faulted {
        println!("| … of them with fault `{class}` | — | {n} |");
    }
    println!("| requests sent | {} | {} |", a.sent, b.sent);
    let classes: BTreeSet<&str> = a
        .by_class
        .keys()
        .chain(b.by_class.keys())
        .copied()
        .collect();
    for class in classes {
        let n = |x: &Accounting| x.by_class.get(class).copied().unwrap_or(0);
        println!("| … {class} | {} | {} |", n(&a), n(&b));
    }
    println!(
        "| requests the server saw with no row holding their id | {} | {} |",
        a.unseen, b.unseen
    );
    println!(
        "| … sent rows without a response id, and retries, that explain them | {} | {} |",
        a.no_id + a.retried,
        b.no_id + b.retried
    );
    println!(
        "| request ids missing or twice in a cell | {} | {} |",
        a.missing + a.twice,
        b.missing + b.twice
    );
    println!(
        "| **requests unaccounted for** | **{}** | **{}** |",
        a.unaccounted(),
        b.unaccounted()
    );
    // Unaffected cells: no faulted connection or refusal window overlapped the cell.
    let spans = spans(&chaos.dir)?;
    let (a, b) = (tok_s(bin, &clean.dir)?, tok_s(bin, &chaos.dir)?);
    println!(
        "\n| decode cell | faulted connections in it | fault-free tok/s | chaos tok/s | difference |\n|---|---:|---:|---:|---:|"
    );
    let mut worst: f64 = 0.0;
    for (key, span) in &spans {
        let Some(clean_t) = a.get(key) else { continue };
        let overlapping = chaos
            .lives
            .iter()
            .filter(|l| l.class != "none" && l.opened_ns < span.1 && l.closed_ns > span.0)
            .count();
        let chaos_t = b.get(key);
        let diff = chaos_t.map(|c| (c / clean_t - 1.0) * 100.0);
        if overlapping == 0
            && let Some(d) = diff
        {
            worst = worst.max(d.abs());
        }
        println!(
            "| {} × {} | {overlapping} | {clean_t:.1} | {} | {} |",
            key.0,
            key.1,
            chaos_t.map_or("—".to_string(), |c| format!("{c:.1}")),
            diff.map_or("—".to_string(), |d| format!("{d:+.1}%"))
        );
    }
    println!("\nlargest difference of an unaffected cell: {worst:.1}%");
    Ok(())
}
