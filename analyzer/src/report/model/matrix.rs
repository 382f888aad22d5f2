//! The decode matrix's cells, legend and footer, and the GPU power matrix, as text.

use super::*;

/// The GPU power matrix, format-free: per context, per concurrency level, the GPUs'
/// mean draw over the window and output tokens per joule ("2,600 W · 1.17 tok/J"); or,
/// when the run has no GPU telemetry, the line that says so and why.
pub(crate) fn power_rows(s: &Scoring) -> Result<Vec<(u32, Vec<String>)>, String> {
    if !s.run.gpu_telemetry {
        let why = tokentrace_schemas::manifest::fact(&s.run.facts, "gpu.telemetry")
            .and_then(|v| v.strip_prefix("none: "))
            .map_or_else(
                || "the recorder did not sample GPUs in this run".to_string(),
                |w| format!("the recorder had none ({w})"),
            );
        return Err(format!(
            "No GPU telemetry: {why}, so there are no power or tokens-per-joule figures."
        ));
    }
    let (contexts, levels) = matrix_axes(s);
    Ok(contexts
        .iter()
        .map(|ctx| {
            let cells = levels
                .iter()
                .map(|n| {
                    let f = decode_cell(s, *ctx, *n).and_then(shown);
                    match (
                        f.and_then(|f| f.gpu_power_w),
                        f.and_then(|f| f.tokens_per_joule),
                    ) {
                        (Some(w), Some(t)) => {
                            format!("{} W · {} tok/J", thousands(w.round() as i64), fixed(t, 2))
                        }
                        (Some(w), None) => format!("{} W", thousands(w.round() as i64)),
                        _ => DASH.to_string(),
                    }
                })
                .collect();
            (*ctx, cells)
        })
        .collect())
}

/// The heading line of the GPU power section.
pub(crate) const POWER_INTRO: &str =
    "mean GPU power over each window, all GPUs together · output tokens per joule of GPU energy";

/// The decode cell at (`context`, `concurrency`), if the run has it.
pub(crate) fn decode_cell(s: &Scoring, context: u32, concurrency: u32) -> Option<&CellScore> {
    s.cells
        .iter()
        .find(|c| c.phase == Phase::Decode && c.context == context && c.concurrency == concurrency)
}

/// A matrix cell's parts when it shows figures: total tok/s, the verdict's label when
/// not Valid, and "N ms TTFT".
pub(crate) fn matrix_parts(c: &CellScore) -> Option<(String, Option<&'static str>, String)> {
    crate::figures::matrix_parts(c).map(|(rate, v, ttft)| (rate, v.map(Verdict::label), ttft))
}

/// The lines under the decode matrix: the legend of the verdicts it shows, and what its
/// TTFT means.
pub(crate) fn matrix_footer(s: &Scoring) -> Vec<String> {
    let present = |v: Verdict| {
        s.cells
            .iter()
            .any(|c| c.phase == Phase::Decode && c.verdict == Some(v))
    };
    let legend: Vec<&str> = LEGEND
        .iter()
        .filter(|(v, _)| present(*v))
        .map(|(_, text)| *text)
        .collect();
    let mut footer: Vec<String> = Vec::new();
    if !legend.is_empty() {
        footer.push(legend.join(" "));
    }
    if s.cells.iter().any(|c| c.phase == Phase::Prefill) {
        footer.push(
            if s.run.prefill_mode == PrefillMode::Warmup {
                "TTFT is measured after the warm-up filled the server's prompt cache, so it mostly excludes prefill."
            } else {
                "TTFT is measured after the prefill scout warmed the server's prompt cache, so it mostly excludes prefill."
            }
            .to_string(),
        );
    }
    footer
}

/// What each verdict of the matrix means, for the legend.
pub(crate) const LEGEND: [(Verdict, &str); 4] = [
    (
        Verdict::RequestsQueued,
        "Requests queued: the server could not run all requests at once, so some waited in a queue.",
    ),
    (
        Verdict::Looped,
        "Looped: the model kept repeating the same text, so this measurement was discarded.",
    ),
    (
        Verdict::BadOutput,
        "Bad output: answers broke a content rule (a foreign script, empty, stopped early), so this measurement was discarded.",
    ),
    (
        Verdict::Error,
        "Error: a stream failed or disconnected inside the window, so this measurement was discarded.",
    ),
];
