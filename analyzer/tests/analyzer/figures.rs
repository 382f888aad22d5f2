//! Decode-cell figures from polars agree with the same figures computed row by row.

use tokentrace_analyzer::figures::decode_figures;
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::synth::{self, DecodeSpec};
use tokentrace_schemas::tables::{Chunks, EndReason, EventKind, Events, Requests};

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn figures_match_a_row_by_row_computation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = CellKey::new(Phase::Decode, 1024, 4);
    synth::write_decode_cell(dir.path(), &DecodeSpec::new(key, 30_000)).expect("cell");
    let cell = key.dir(dir.path());
    let f = decode_figures(&cell).expect("figures").expect("a window");

    let events = read_table::<Events>(&cell.join("events.parquet")).expect("events");
    let open = events
        .iter()
        .find(|e| e.kind == EventKind::WindowOpen)
        .expect("open")
        .time_ns;
    let close_ns = events
        .iter()
        .find(|e| e.kind == EventKind::WindowClose)
        .expect("close")
        .time_ns;
    let chunks = read_table::<Chunks>(&cell.join("chunks.parquet")).expect("chunks");
    let requests = read_table::<Requests>(&cell.join("requests.parquet")).expect("requests");
    let tokens: i64 = chunks
        .iter()
        .filter(|c| c.arrival_ns >= open && c.arrival_ns <= close_ns)
        .filter_map(|c| c.tokens)
        .map(i64::from)
        .sum();
    let window_s = (close_ns - open) as f64 / 1e9;
    let (mut ttft, mut tbt) = (Vec::new(), Vec::new());
    for r in &requests {
        let n: i64 = chunks
            .iter()
            .filter(|c| c.request_id == r.request_id)
            .filter_map(|c| c.tokens)
            .map(i64::from)
            .sum();
        if n > 1 {
            let (sent, first, last) = (
                r.sent_ns.expect("sent"),
                r.first_token_ns.expect("first"),
                r.last_token_ns.expect("last"),
            );
            ttft.push((first - sent) as f64 / 1e6);
            tbt.push((last - first) as f64 / (n - 1) as f64 / 1e6);
        }
    }
    let rates: Vec<f64> = tbt.iter().map(|t| 1000.0 / t).collect();
    let completed = requests
        .iter()
        .filter(|r| {
            matches!(
                r.end_reason,
                EndReason::FinishedStop | EndReason::FinishedLength
            )
        })
        .filter(|r| r.end_ns.is_some_and(|e| e >= open && e <= close_ns))
        .count() as i64;

    assert!(tokens > 0 && !ttft.is_empty());
    assert_eq!(f.output_tokens, tokens);
    assert!(close(f.window_s, window_s));
    assert!(close(f.total_tok_s, tokens as f64 / window_s));
    assert_eq!(f.requests, ttft.len());
    assert!(close(
        f.ttft_ms_median.expect("ttft"),
        median(ttft).expect("ttft")
    ));
    assert!(close(
        f.time_between_tokens_ms_median.expect("tbt"),
        median(tbt).expect("tbt")
    ));
    assert!(close(
        f.per_request_tok_s_median.expect("rate"),
        median(rates).expect("rate")
    ));
    assert_eq!(f.completed, completed);
    // The synthetic cell's shape: 10 ms ± 15% steps of 2.17 tokens → ~4.6 ms per token.
    let tbt_ms = f.time_between_tokens_ms_median.expect("tbt");
    assert!((3.5..6.0).contains(&tbt_ms), "{tbt_ms}");
}
