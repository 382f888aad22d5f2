//! The recorder's accuracy and cost, request by request, against the simulator's ground
//! truth (`bench/accuracy.sh` runs it after each recording; the recorder and the
//! simulator ran as separate processes). For the measured requests of the run's decode
//! cell, matched to the simulator's requests by the server's request id:
//! - TTFT error: recorder TTFT (first token − send) − (first token written − the
//!   simulator's handler start), in ms, signed;
//! - inter-token error: |recorder gap − written gap| between consecutive token events;
//! - where TTFT error lives: request side = the simulator's read of the request − the
//!   send, of which the simulator's own intake = handler start − read; reply side = first
//!   token arrival − its write (clocks aligned by the manifest's `monotonic_at_zero_ns`);
//! - CPU: the recorder process's user + system time between the first and last sample
//!   inside the window, per 100 K events that arrived between them, and the share of it
//!   its drawing thread took (the full-screen view). Samples come from CPU_LOG (lines
//!   `CLOCK_MONOTONIC_ns cpu_ticks [view_ns]`, written by bench/cpu_sampler.py from
//!   /proc, so any recorder version can be measured the same way).
//!
//! usage: accuracy_match RUN TRUTH_DIR CPU_LOG [LABEL]  (prints one Markdown table row)

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use tokentrace_schemas::Phase;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::Manifest;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Chunks, EventKind, Events, Requests, Role};
use tokentrace_sim::truth::{TruthChunks, TruthRequests};

/// Kernel clock ticks per second of /proc/PID/stat times (USER_HZ, 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// The q-quantile (nearest rank) of sorted ns values, in ms.
fn pct(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e6
}

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(run), Some(truth), Some(cpu_log)) = (args.first(), args.get(1), args.get(2)) else {
        return Err("usage: accuracy_match RUN TRUTH_DIR CPU_LOG [LABEL]".to_string());
    };
    let label = args.get(3).cloned().unwrap_or_default();
    let cpu_text = std::fs::read_to_string(cpu_log).map_err(|e| format!("{cpu_log}: {e}"))?;
    let (run, truth) = (Path::new(run), Path::new(truth));
    let e = |e: tokentrace_schemas::Error| e.to_string();
    let manifest = Manifest::read(run).map_err(e)?;
    let zero = manifest
        .clock
        .monotonic_at_zero_ns
        .ok_or("the run has no monotonic anchor")?;
    let (key, dir) = list_cells(run)
        .map_err(e)?
        .into_iter()
        .find(|(k, _)| k.phase == Phase::Decode)
        .ok_or("no decode cell")?;
    let requests = read_table::<Requests>(&dir.join("requests.parquet")).map_err(e)?;
    let chunks = read_table::<Chunks>(&dir.join("chunks.parquet")).map_err(e)?;
    let events = read_table::<Events>(&dir.join("events.parquet")).map_err(e)?;
    let t_requests =
        read_table::<TruthRequests>(&truth.join("truth_requests.parquet")).map_err(e)?;
    let t_chunks = read_table::<TruthChunks>(&truth.join("truth_chunks.parquet")).map_err(e)?;

    let at = |kind: EventKind| events.iter().find(|x| x.kind == kind).map(|x| x.time_ns);
    let (open, close) = (
        at(EventKind::WindowOpen).ok_or("no window_open")?,
        at(EventKind::WindowClose).ok_or("no window_close")?,
    );
    let by_server_id: HashMap<&str, &tokentrace_sim::truth::TruthRequestRow> = t_requests
        .iter()
        .map(|r| (r.server_request_id.as_str(), r))
        .collect();
    // The simulator's token events of each request, in order: (seq, written).
    let mut written: HashMap<i64, Vec<(i32, i64)>> = HashMap::new();
    for c in t_chunks.iter().filter(|c| c.tokens.unwrap_or(0) > 0) {
        written
            .entry(c.request_id)
            .or_default()
            .push((c.seq, c.written_ns));
    }
    for v in written.values_mut() {
        v.sort_unstable();
    }
    let mut arrivals: HashMap<i64, Vec<(i32, i64)>> = HashMap::new();
    for c in chunks.iter().filter(|c| c.tokens.unwrap_or(0) > 0) {
        arrivals
            .entry(c.request_id)
            .or_default()
            .push((c.seq, c.arrival_ns));
    }
    for v in arrivals.values_mut() {
        v.sort_unstable();
    }

    let (mut ttft_err, mut gap_err, mut reply) = (Vec::new(), Vec::new(), Vec::new());
    let (mut request_side, mut intake) = (Vec::new(), Vec::new());
    // Send → the kernel's receive timestamp, and the wait from there in the socket queue
    // until the simulator read it (empty where the platform gives no timestamps).
    let (mut to_kernel, mut socket_queue) = (Vec::new(), Vec::new());
    let (mut measured, mut matched) = (0, 0);
    for r in requests.iter().filter(|r| r.role == Role::Measured) {
        measured += 1;
        let (Some(sent), Some(first)) = (r.sent_ns, r.first_token_ns) else {
            continue;
        };
        let Some(t) = r
            .server_request_id
            .as_deref()
            .and_then(|id| by_server_id.get(id))
        else {
            continue;
        };
        let (Some(w), Some(a)) = (written.get(&t.request_id), arrivals.get(&r.request_id)) else {
            continue;
        };
        matched += 1;
        let first_write = w[0].1;
        ttft_err.push((first - sent) - (first_write - t.arrived_ns));
        reply.push(first - (first_write - zero));
        if let Some(read) = t.read_ns {
            request_side.push((read - zero) - sent);
            intake.push(t.arrived_ns - read);
            if let Some(rx) = t.kernel_rx_ns {
                to_kernel.push((rx - zero) - sent);
                socket_queue.push(read - rx);
            }
        }
        // Consecutive token events, matched by position among token events.
        for (wp, ap) in w.windows(2).zip(a.windows(2)) {
            if ap[1].1 > close {
                break;
            }
            gap_err.push(((ap[1].1 - ap[0].1) - (wp[1].1 - wp[0].1)).abs());
        }
    }
    let over_100ms = ttft_err.iter().filter(|x| x.abs() > 100_000_000).count();
    for v in [
        &mut ttft_err,
        &mut gap_err,
        &mut reply,
        &mut request_side,
        &mut intake,
        &mut to_kernel,
        &mut socket_queue,
    ] {
        v.sort_unstable();
    }

    // CPU between the first and last sample inside the window, per event in between.
    let mut cpu: Vec<(i64, f64, f64)> = cpu_text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let t = f.next()?.parse::<i64>().ok()? - zero;
            let ticks = f.next()?.parse::<f64>().ok()? / TICKS_PER_S;
            let view = f.next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 1e9;
            Some((t, ticks, view))
        })
        .filter(|(t, _, _)| *t >= open && *t <= close)
        .collect();
    cpu.sort_by_key(|x| x.0);
    let view_share = match (cpu.first(), cpu.last()) {
        (Some(a), Some(b)) if b.1 > a.1 => (b.2 - a.2) / (b.1 - a.1) * 100.0,
        _ => f64::NAN,
    };
    let (cpu_s, events_in, per_100k) = match (cpu.first(), cpu.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            let n = chunks
                .iter()
                .filter(|c| c.arrival_ns > a.0 && c.arrival_ns <= b.0)
                .count();
            let s = b.1 - a.1;
            (s, n, s / n.max(1) as f64 * 1e5)
        }
        _ => (f64::NAN, 0, f64::NAN),
    };
    let cores =
        cpu_s / (cpu.last().map_or(0, |x| x.0) - cpu.first().map_or(0, |x| x.0)) as f64 * 1e9;
    Ok(format!(
        "| {label} | {} | {matched}/{measured} | {:.2} / {:.2} / {:.1} | {over_100ms} | {:.3} / {:.2} / {:.1} | {:.2} / {:.2} ({:.2} / {:.2} to the kernel, {:.2} / {:.2} in the socket queue) | {:.2} / {:.2} | {:.2} / {:.2} | {events_in} | {cpu_s:.2} ({cores:.2} cores) | {per_100k:.2} | {view_share:.1}% |",
        key.concurrency,
        pct(&ttft_err, 0.5),
        pct(&ttft_err, 0.99),
        pct(&ttft_err, 1.0),
        pct(&gap_err, 0.5),
        pct(&gap_err, 0.99),
        pct(&gap_err, 1.0),
        pct(&request_side, 0.5),
        pct(&request_side, 0.99),
        pct(&to_kernel, 0.5),
        pct(&to_kernel, 0.99),
        pct(&socket_queue, 0.5),
        pct(&socket_queue, 0.99),
        pct(&intake, 0.5),
        pct(&intake, 0.99),
        pct(&reply, 0.5),
        pct(&reply, 0.99),
    ))
}

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("accuracy_match: {e}");
            ExitCode::FAILURE
        }
    }
}
