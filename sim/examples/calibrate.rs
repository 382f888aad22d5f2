//! Calibration of a simulator profile against the reference report's whole decode
//! matrix, in engine time (no clock, no HTTP): for each cell, a cold scout, a priming
//! round, a readiness warm-up, then a closed-loop window as the recorder drives it.
//! Prints the matrix (simulator → report, total tok/s · median TTFT) and the three
//! calibration goals: total tok/s within 15%, the same verdict, TTFT within 2×.
//!
//! The report's prompt cache missed at some contexts (its one-stream TTFT there is the
//! cold prefill time); those rows are simulated with a new prompt per request, the
//! condition the report ran under, so the engine model is judged on its consequences.
//!
//! usage: calibrate [PROFILE] [WINDOW_S]   (defaults: reference-h200x4, 30)

use tokentrace_sim::profile::Curve;
use tokentrace_sim::{Engine, EngineRequest, Profile};

/// A cell of the reference report: total tok/s, median TTFT (ms) and verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reported {
    Valid(f64, f64),
    Queued(f64, f64),
    Looped,
}

use Reported::{Looped as L, Queued as Q, Valid as V};

const CONTEXTS: [(u32, &str); 8] = [
    (8192, "8K"),
    (16_384, "16K"),
    (32_768, "32K"),
    (65_536, "64K"),
    (131_072, "128K"),
    (262_144, "256K"),
    (524_288, "512K"),
    (1_043_456, "1019K"),
];
const LEVELS: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// The report's Prefill table: cold TTFT (ms) at each of `CONTEXTS`.
const PREFILL_MS: [f64; 8] = [
    425.0, 762.0, 1487.0, 2994.0, 6386.0, 14_987.0, 39_089.0, 115_746.0,
];

/// shared/reference/speed-test-matrix-deepseek-v4-flash-4xh200.txt, Sustained decode.
const REPORT: [[Reported; 8]; 8] = [
    [
        V(244.6, 93.0),
        V(439.4, 106.0),
        V(750.3, 102.0),
        V(1259.4, 130.0),
        V(2087.2, 162.0),
        V(3208.2, 5573.0),
        L,
        V(6553.4, 4454.0),
    ],
    [
        V(243.1, 740.0),
        V(435.6, 762.0),
        V(684.4, 1052.0),
        V(1052.7, 1364.0),
        V(1889.7, 4338.0),
        V(3215.5, 10899.0),
        V(4485.1, 21285.0),
        Q(1474.8, 42686.0),
    ],
    [
        V(246.1, 188.0),
        V(447.5, 211.0),
        V(777.2, 212.0),
        V(1249.5, 233.0),
        V(2052.5, 342.0),
        V(3164.5, 1169.0),
        V(4429.5, 2062.0),
        V(6252.8, 3932.0),
    ],
    [
        V(243.0, 310.0),
        L,
        V(746.0, 299.0),
        V(1230.3, 329.0),
        V(1995.0, 471.0),
        V(3129.2, 1967.0),
        L,
        L,
    ],
    [
        V(209.3, 6366.0),
        V(296.5, 6467.0),
        Q(463.5, 12562.0),
        Q(945.0, 24416.0),
        V(1655.7, 51280.0),
        Q(1066.6, 99334.0),
        Q(173.6, 102591.0),
        Q(181.6, 102792.0),
    ],
    [
        V(116.6, 14868.0),
        V(221.1, 22212.0),
        Q(431.2, 36128.0),
        V(716.4, 64466.0),
        Q(58.4, 99856.0),
        Q(57.7, 100030.0),
        Q(58.1, 100136.0),
        Q(59.4, 100653.0),
    ],
    [
        V(214.1, 1868.0),
        V(401.5, 1921.0),
        V(684.5, 1955.0),
        Q(1013.1, 2726.0),
        V(1577.5, 6512.0),
        L,
        L,
        L,
    ],
    [
        V(196.1, 3863.0),
        Q(376.7, 3970.0),
        Q(534.9, 4703.0),
        Q(860.3, 6616.0),
        Q(1226.3, 12069.0),
        L,
        L,
        L,
    ],
];

/// What the simulator did in one cell.
struct Simulated {
    tok_s: f64,
    ttft_ms: Option<f64>,
    queued: bool,
}

/// Runs the engine until `done` says so or nothing is left; returns the time reached.
fn run_until(
    e: &mut Engine,
    mut now: f64,
    limit: f64,
    mut done: impl FnMut(&Engine) -> bool,
) -> f64 {
    while !done(e) && now < limit {
        match e.step(now) {
            Some(step) => now += step.seconds,
            None => break,
        }
    }
    now
}

/// True when the report's one-stream TTFT at context row `row` is at least 80% of its
/// cold prefill time there: the report's requests missed the prompt cache.
fn reference_cold(row: usize) -> bool {
    match REPORT[row][0] {
        V(_, ttft) | Q(_, ttft) => ttft >= 0.8 * PREFILL_MS[row],
        L => false,
    }
}

fn simulate(profile: &Profile, context: u32, n: u32, window: f64, cold: bool) -> Simulated {
    let mut e = Engine::new(profile.clone());
    let prompt = e
        .tokenizer()
        .prompt_of(context as usize, u64::from(context));
    let spaced = e.tokenizer().spaced_ids().to_vec();
    let mut next_id = 0u64;
    let mut add = |e: &mut Engine, now: f64, max_tokens: u32| {
        next_id += 1;
        let mut prompt = prompt.clone();
        if cold {
            // A request-unique first token: nothing of the prompt is ever cached.
            for (k, t) in prompt.iter_mut().take(2).enumerate() {
                let pick = (next_id >> (16 * k)) as usize % spaced.len().max(1);
                *t = spaced.get(pick).copied().unwrap_or(*t);
            }
        }
        e.add(
            EngineRequest {
                id: next_id,
                prompt,
                max_tokens,
                ignore_eos: true,
                seed: None,
            },
            now,
        );
        next_id
    };
    // Scout, then one priming round of n short requests, each run to the end.
    add(&mut e, 0.0, 16);
    let mut now = run_until(&mut e, 0.0, 3600.0, Engine::is_idle);
    for _ in 0..n {
        add(&mut e, now, 16);
    }
    now = run_until(&mut e, now, now + 3600.0, Engine::is_idle);

    // Warm-up: n long streams until each produced a token (or 600 s), then the window.
    // Per request: (arrival, first token, end).
    let mut seen: std::collections::HashMap<u64, (f64, Option<f64>, Option<f64>)> =
        Default::default();
    let mut firsts = Vec::new();
    for _ in 0..n {
        let id = add(&mut e, now, 4096);
        seen.insert(id, (now, None, None));
        firsts.push(id);
    }
    // Each stream is ready once its first request produced a token; a stream's later
    // requests (closed loop) do not hold the window back.
    let warmup_end = now + 600.0;
    let (mut open, mut close) = (None::<f64>, f64::INFINITY);
    let (mut tokens, mut samples) = (0u64, Vec::new());
    let mut next_sample = f64::INFINITY;
    loop {
        let ready = || {
            firsts
                .iter()
                .all(|id| seen.get(id).is_some_and(|s| s.1.is_some()))
        };
        if open.is_none() && (ready() || now >= warmup_end) {
            open = Some(now);
            close = now + window;
            next_sample = now + 1.0;
        }
        if now >= close {
            break;
        }
        let Some(step) = e.step(now) else { break };
        now += step.seconds;
        while now >= next_sample && next_sample <= close {
            samples.push((e.num_running(), e.num_waiting()));
            next_sample += 1.0;
        }
        for x in &step.emissions {
            if open.is_some() && now <= close {
                tokens += x.tokens.len() as u64;
            }
            if let Some(s) = seen.get_mut(&x.request_id) {
                s.1.get_or_insert(now);
                if x.finish.is_some() {
                    s.2 = Some(now);
                }
            }
            if x.finish.is_some() {
                // Closed loop: the stream sends its next request at once.
                let id = add(&mut e, now, 4096);
                seen.insert(id, (now, None, None));
            }
        }
    }
    let (open, close) = (open.unwrap_or(now), close.min(now));
    // TTFT of the requests that overlap the window (the default rule set's scope).
    let mut ttft: Vec<f64> = seen
        .values()
        .filter(|(sent, _, end)| *sent < close && end.is_none_or(|e| e >= open))
        .filter_map(|(sent, first, _)| first.map(|f| (f - sent) * 1000.0))
        .collect();
    ttft.sort_by(f64::total_cmp);
    let median = match ttft.len() {
        0 => None,
        k if k % 2 == 1 => Some(ttft[k / 2]),
        k => Some((ttft[k / 2 - 1] + ttft[k / 2]) / 2.0),
    };
    // The reference rule set: any scrape with a request waiting, or the running gauge's
    // mean below 95% of n (from 2 streams up).
    let waited = samples.iter().any(|(_, w)| *w > 0);
    let mean_running =
        samples.iter().map(|(r, _)| *r as f64).sum::<f64>() / samples.len().max(1) as f64;
    Simulated {
        tok_s: tokens as f64 / (close - open).max(1e-9),
        ttft_ms: median,
        queued: waited || (n >= 2 && mean_running < 0.95 * f64::from(n)),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("reference-h200x4", String::as_str);
    let window: f64 = args.get(1).and_then(|w| w.parse().ok()).unwrap_or(30.0);
    let mut profile = match Profile::load(name) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("calibrate: {e}");
            std::process::exit(2);
        }
    };
    // Loops are the model's, not the engine's: the report's Looped cells are compared
    // on verdict only.
    if let Ok(none) = Curve::try_from(vec![[1.0, 0.0]]) {
        profile.loop_probability = none;
    }
    println!("# {name} against the reference report, {window} s windows\n");
    let cold: Vec<&str> = (0..CONTEXTS.len())
        .filter(|&r| reference_cold(r))
        .map(|r| CONTEXTS[r].1)
        .collect();
    println!(
        "The report's prompt cache missed at {} (one-stream TTFT ≥ 80% of its cold \
         prefill): simulated with a new prompt per request.\n",
        cold.join(", ")
    );
    println!("simulator → report, total tok/s · median TTFT\n");
    print!("| context |");
    for n in LEVELS {
        print!(" {n} |");
    }
    println!("\n|---|{}", "---|".repeat(LEVELS.len()));
    let (mut cells, mut tok_ok, mut verdict_ok, mut ttft_cells, mut ttft_ok) = (0, 0, 0, 0, 0);
    for (row, (context, label)) in CONTEXTS.iter().enumerate() {
        print!("| {label} |");
        for (col, n) in LEVELS.iter().enumerate() {
            let s = simulate(&profile, *context, *n, window, reference_cold(row));
            let sim = format!(
                "{:.0}{} · {}",
                s.tok_s,
                if s.queued { " queued" } else { "" },
                s.ttft_ms.map_or("—".to_string(), |t| format!("{t:.0} ms"))
            );
            let report = REPORT[row][col];
            cells += 1;
            let (reported, want_queued) = match report {
                V(t, f) | Q(t, f) => {
                    if (s.tok_s - t).abs() <= 0.15 * t {
                        tok_ok += 1;
                    }
                    ttft_cells += 1;
                    if s.ttft_ms.is_some_and(|m| m <= 2.0 * f && m >= f / 2.0) {
                        ttft_ok += 1;
                    }
                    let q = matches!(report, Q(..));
                    (
                        format!("{t:.0}{} · {f:.0} ms", if q { " queued" } else { "" }),
                        Some(q),
                    )
                }
                L => ("Looped".to_string(), None),
            };
            if want_queued == Some(s.queued) {
                verdict_ok += 1;
            }
            print!(" {sim} → {reported} |");
        }
        println!();
    }
    let measured = ttft_cells;
    println!(
        "\ntotal tok/s within 15%: {tok_ok} of {measured} measured cells ({:.0}%)",
        100.0 * f64::from(tok_ok) / f64::from(measured)
    );
    println!(
        "same verdict: {verdict_ok} of {measured} measured cells ({:.0}%); of all {cells} \
         cells, Looped ones counted as different: {:.0}%",
        100.0 * f64::from(verdict_ok) / f64::from(measured),
        100.0 * f64::from(verdict_ok) / f64::from(cells)
    );
    println!(
        "TTFT within 2×: {ttft_ok} of {ttft_cells} cells ({:.0}%)",
        100.0 * f64::from(ttft_ok) / f64::from(ttft_cells)
    );
}
