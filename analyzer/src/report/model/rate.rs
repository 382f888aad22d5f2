//! The Request rate section: how arrivals were made, and each context's latency
//! against offered load with its capacity and knee.

use super::*;

/// The line under the Request rate heading: how arrivals were made and what the knee is.
pub(crate) fn rate_intro(s: &Scoring) -> String {
    let Some(r) = &s.run.rate else {
        return "open-loop arrivals · latency against offered load".to_string();
    };
    let duration = r.duration_ns.map(|d| d as f64 / 1e9);
    format!(
        "open-loop {} arrivals (seed {}{}), each cell {} · latency against offered load; the knee is the highest rate whose cell, and every lower one, meets the SLO{} within the server's capacity (where completed requests level off, a higher offered rate only grows a queue, and its latencies measure the cell's length)",
        r.arrival.as_str(),
        r.seed,
        r.max_concurrency
            .map(|m| format!(", at most {m} in flight"))
            .unwrap_or_default(),
        match (r.requests, duration) {
            (Some(n), Some(d)) =>
                format!("{n} requests or {} s, whichever ends first", fixed(d, 1)),
            (Some(n), None) => format!("{n} requests"),
            (None, Some(d)) => format!("{} s of arrivals", fixed(d, 1)),
            (None, None) => "of unknown length".to_string(),
        },
        if s.rules.slo.is_set() {
            format!(" ({})", s.rules.slo.describe())
        } else {
            String::new()
        }
    )
}

/// One context's latency-versus-rate curve: its table (one row per offered rate) and
/// the line naming its knee.
pub(crate) struct RateCurve {
    pub context: u32,
    pub table: Table,
    pub knee: String,
    /// One point per rate cell that shows figures.
    pub points: Vec<RatePoint>,
}

/// One rate cell on the latency-versus-rate curve.
pub(crate) struct RatePoint {
    /// The offered rate as written (`4`, `inf`).
    pub label: String,
    /// The offered rate, req/s (`inf` plotted at twice the largest finite rate).
    pub x: f64,
    /// E2E latency p50 and p99, TTFT p99, ms.
    pub e2e_p50: Option<f64>,
    pub e2e_p99: Option<f64>,
    pub ttft_p99: Option<f64>,
    /// This rate is the context's knee.
    pub knee: bool,
}

/// The Request rate section, per context: offered and achieved rate, the SLO, TTFT,
/// time between tokens and E2E latency (p50 / p99), the schedule's lag, output tok/s;
/// and the knee, the highest offered rate whose cell meets the rule set's SLO.
pub(crate) fn rate_curves(s: &Scoring) -> Vec<RateCurve> {
    let cells = || s.cells.iter().filter(|c| c.phase == Phase::Rate);
    let contexts: BTreeSet<u32> = cells().map(|c| c.context).collect();
    let slo = s.rules.slo.is_set().then(|| s.rules.slo.describe());
    let finite_max = cells()
        .filter_map(|c| c.rate.filter(|r| !r.is_inf()))
        .map(|r| r.per_second())
        .fold(0.0f64, f64::max);
    contexts
        .into_iter()
        .map(|ctx| {
            let mut row_cells: Vec<&CellScore> = cells().filter(|c| c.context == ctx).collect();
            row_cells.sort_by_key(|c| c.rate);
            let headers = [
                "Offered req/s",
                "Achieved req/s",
                "Status",
                "SLO",
                "TTFT ms (p50 / p99)",
                "Time between tokens ms (p50 / p99)",
                "E2E ms (p50 / p99)",
                "Schedule lag ms (p50 / p99)",
                "Output tok/s",
            ]
            .map(str::to_string)
            .to_vec();
            // The capacity and the knee are the scoring's (`score/capacity.rs`).
            let judged = s.rate_capacity.iter().find(|r| r.context == ctx);
            let above = |c: &CellScore| {
                c.figures.as_ref().and_then(|f| f.capacity.as_deref()) == Some(CAPACITY_ABOVE)
            };
            let met = |c: &CellScore| c.figures.as_ref().and_then(|f| f.slo_met) == Some(true);
            let at_rate = |r: Option<Rate>| {
                r.and_then(|r| row_cells.iter().copied().find(|c| c.rate == Some(r)))
            };
            let knee_rate = judged.and_then(|j| j.knee);
            let knee_cell = at_rate(knee_rate);
            let first_miss = at_rate(judged.and_then(|j| j.first_miss));
            let capacity = judged
                .and_then(|j| j.capacity_req_s.zip(at_rate(j.capacity_rate)));
            let mut points = Vec::new();
            let rows = row_cells
                .iter()
                .map(|c| {
                    let f = shown(c);
                    let r = c.rate.map_or_else(dash, |r| r.to_string());
                    if let (Some(f), Some(rate)) = (f, c.rate) {
                        let x = if rate.is_inf() {
                            (finite_max * 2.0).max(1.0)
                        } else {
                            rate.per_second()
                        };
                        points.push(RatePoint {
                            label: r.clone(),
                            x,
                            e2e_p50: f.e2e_latency_ms.median,
                            e2e_p99: f.e2e_latency_ms.percentiles.get("p99").copied(),
                            ttft_p99: f.ttft_ms.percentiles.get("p99").copied(),
                            knee: slo.is_some() && knee_rate == Some(rate),
                        });
                    }
                    let slo_text = match c.figures.as_ref().and_then(|f| f.slo_met) {
                        Some(true) if above(c) => "met, above capacity".to_string(),
                        Some(true) => "met".to_string(),
                        Some(false) => "missed".to_string(),
                        None => DASH.to_string(),
                    };
                    vec![
                        r,
                        opt(f.and_then(|f| f.request_rate), |x| fixed(x, 2)),
                        c.status_label(),
                        slo_text,
                        f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.ttft_ms, 0)),
                        f.map_or_else(|| DASH.to_string(), |f| {
                            p50_p99(&f.time_between_tokens_ms, 1)
                        }),
                        f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.e2e_latency_ms, 0)),
                        f.map_or_else(|| DASH.to_string(), |f| p50_p99(&f.schedule_lag_ms, 2)),
                        opt(f.and_then(|f| f.total_tok_s), |x| rate(x, false)),
                    ]
                })
                .collect();
            let knee = match &slo {
                None => format!(
                    "{}: no knee, the rule set {} has no SLO ([slo] in a rule file, then `tokentrace rescore`)",
                    context_label(ctx),
                    s.rules.id()
                ),
                Some(slo) => {
                    let why = |m: &CellScore| {
                        let r = m.rate.map_or_else(dash, |r| r.to_string());
                        if !met(m) {
                            format!(
                                "{r} req/s misses it ({})",
                                m.figures
                                    .as_ref()
                                    .map(|f| f.slo_misses.join(", "))
                                    .filter(|t| !t.is_empty())
                                    .unwrap_or_else(|| m.status_label())
                            )
                        } else {
                            format!(
                                "{r} req/s is above the server's capacity: it meets the SLO over its {} requests, but its queue grows with every one",
                                m.figures
                                    .as_ref()
                                    .map_or(0, |f| f.completed_requests)
                            )
                        }
                    };
                    match (knee_cell, first_miss) {
                        (Some(k), miss) => format!(
                            "{}: knee at {} req/s, the highest offered rate that meets the SLO ({slo}) within the server's capacity{}",
                            context_label(ctx),
                            k.rate.map_or_else(dash, |r| r.to_string()),
                            miss.map_or_else(
                                || "; every rate recorded meets it".to_string(),
                                |m| format!("; {}", why(m))
                            )
                        ),
                        (None, miss) => format!(
                            "{}: no rate recorded meets the SLO ({slo}) within the server's capacity; {}",
                            context_label(ctx),
                            miss.map_or_else(dash, why)
                        ),
                    }
                }
            };
            let knee = match capacity {
                Some((a, c)) => format!(
                    "{knee}. Completed requests level off at {} req/s (at {} req/s offered): the server's capacity at this context",
                    fixed(a, 2),
                    c.rate.map_or_else(dash, |r| r.to_string())
                ),
                None => knee,
            };
            RateCurve {
                context: ctx,
                table: Table { headers, rows },
                knee,
                points,
            }
        })
        .collect()
}
