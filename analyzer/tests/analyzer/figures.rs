//! Scored figures agree with the same figures computed row by row from the tables.

use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Chunks, EndReason, EventKind, Events, Requests};
use tokentrace_testkit::synth::{self, DecodeSpec};

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
    synth::manifest("figures", &[key])
        .write(dir.path())
        .expect("manifest");
    let rules = RuleSet::builtin("reference").expect("built in");
    let s = score_dir(dir.path(), &rules).expect("scored");
    assert_eq!(s.cells.len(), 1);
    let f = s.cells[0].figures.clone().expect("figures");

    let cell = key.dir(dir.path());
    let events = read_table::<Events>(&cell.join("events.parquet")).expect("events");
    let at = |k: EventKind| events.iter().find(|e| e.kind == k).expect("event").time_ns;
    let (open, close_ns) = (at(EventKind::WindowOpen), at(EventKind::WindowClose));
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
        let mine: Vec<_> = chunks
            .iter()
            .filter(|c| c.request_id == r.request_id)
            .collect();
        let n: i64 = mine.iter().filter_map(|c| c.tokens).map(i64::from).sum();
        if n < 1 {
            continue;
        }
        // reference (0.6.2-r2): TTFT to the first event with answer or reasoning text.
        let text = |t: &Option<String>| t.as_deref().is_some_and(|t| !t.is_empty());
        let first_text = mine
            .iter()
            .filter(|c| text(&c.content) || text(&c.reasoning))
            .map(|c| c.arrival_ns)
            .min()
            .expect("text");
        let sent = r.sent_ns.expect("sent");
        ttft.push((first_text - sent) as f64 / 1e6);
        if n < 2 {
            continue;
        }
        let (first, last) = (
            r.first_token_ns.expect("first"),
            r.last_token_ns.expect("last"),
        );
        tbt.push((last - first) as f64 / (n - 1) as f64 / 1e6);
    }
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
    assert!(close(f.window_s.expect("window"), window_s));
    assert!(close(
        f.total_tok_s.expect("rate"),
        tokens as f64 / window_s
    ));
    assert_eq!(f.requests_scored, ttft.len());
    assert!(close(
        f.ttft_ms.median.expect("ttft"),
        median(ttft).expect("ttft")
    ));
    assert!(close(
        f.time_between_tokens_ms.median.expect("tbt"),
        median(tbt).expect("tbt")
    ));
    // Per request, as the reference tool's table: total tok/s ÷ concurrency.
    assert!(close(
        f.per_request_tok_s.median.expect("rate"),
        tokens as f64 / window_s / 4.0
    ));
    assert_eq!(f.completed_requests, completed);
    // The synthetic server gauge says 4 running throughout.
    assert_eq!(f.active_requests, Some(4.0));
    assert_eq!(f.active_source.as_deref(), Some("server"));
    // The synthetic cell's shape: 10 ms ± 15% steps of 2.17 tokens → ~4.6 ms per token.
    let tbt_ms = f.time_between_tokens_ms.median.expect("tbt");
    assert!((3.5..6.0).contains(&tbt_ms), "{tbt_ms}");
    // Per chunk, the gaps are the step itself.
    let itl = f.itl_ms.median.expect("itl");
    assert!((8.5..11.5).contains(&itl), "{itl}");
}

#[test]
fn the_rule_set_chooses_the_ttft_and_the_denominator() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = CellKey::new(Phase::Decode, 1024, 2);
    // Every event carries four tokens (three drafts, all accepted).
    let spec = DecodeSpec {
        acceptance: 1.0,
        ..DecodeSpec::new(key, 20_000)
    };
    synth::write_decode_cell(dir.path(), &spec).expect("cell");
    synth::manifest("rules", &[key])
        .write(dir.path())
        .expect("manifest");
    let figures = |name: &str| {
        score_dir(dir.path(), &RuleSet::builtin(name).expect("rules"))
            .expect("scored")
            .cells[0]
            .figures
            .clone()
            .expect("figures")
    };
    let (reference, default) = (figures("reference"), figures("default"));
    // The synthetic streams reason first: the first content arrives ~1,024 tokens later.
    // The first reading of the reference (0.6.2) counted TTFT to it; the reference's code
    // (0.6.2-r2) and the default count the first token of either channel.
    let first_reading = figures("reference@0.6.2");
    let (c, r, d) = (
        first_reading.ttft_ms.median.expect("ttft"),
        reference.ttft_ms.median.expect("ttft"),
        default.ttft_ms.median.expect("ttft"),
    );
    assert!(c > d + 1000.0, "content TTFT {c} vs first-text TTFT {d}");
    assert_eq!(r, d);
    // (last − first) / (n − 4) against / (n − 1): a longer time per token.
    let (r, d) = (
        reference.time_between_tokens_ms.median.expect("tbt"),
        default.time_between_tokens_ms.median.expect("tbt"),
    );
    assert!(d > r, "{d} vs {r}");
    assert_eq!(reference.output_tokens, default.output_tokens);
}

#[test]
fn the_token_count_rule_chooses_usage_or_the_recorded_count() {
    // One request of four reports a cumulative usage 5 above its streamed tokens from
    // its 10th event on, as a server whose usage and token ids disagree would.
    let dir = tempfile::tempdir().expect("tempdir");
    let key = CellKey::new(Phase::Decode, 1024, 4);
    let spec = DecodeSpec {
        usage_extra: Some((1, 5)),
        ..DecodeSpec::new(key, 30_000)
    };
    synth::write_decode_cell(dir.path(), &spec).expect("cell");
    synth::manifest("tokens", &[key])
        .write(dir.path())
        .expect("manifest");
    let figures = |name: &str| {
        let rules = RuleSet::builtin(name).expect("rules");
        let s = score_dir(dir.path(), &rules).expect("scored");
        s.cells[0].figures.clone().expect("figures")
    };
    let recorded = figures("default@1.1.0");
    assert_eq!(recorded.token_source.as_deref(), Some("recorded"));
    for name in ["default", "reference"] {
        let usage = figures(name);
        assert_eq!(usage.token_source.as_deref(), Some("usage"), "{name}");
        assert_eq!(usage.token_disagreements, 1, "{name}");
        assert_eq!(
            usage.output_tokens,
            recorded.output_tokens + 5,
            "{name}: output tokens follow the usage"
        );
        let tok_s = |f: &tokentrace_analyzer::contract::Figures| f.total_tok_s.unwrap_or(0.0);
        assert!(tok_s(&usage) > tok_s(&recorded), "{name}: total tok/s too");
    }
}

#[test]
fn a_prefill_scout_that_reasons_first_is_timed_to_its_first_token() {
    // The scout's first token comes 100 ms after sending; it reasons for 8 events
    // (10 ms apart) before its first answer text.
    let dir = tempfile::tempdir().expect("tempdir");
    let key = CellKey::new(Phase::Prefill, 8192, 1);
    synth::write_prefill_cell_with(dir.path(), key, 100_000_000, 0, 8).expect("cell");
    synth::manifest("prefill", &[key])
        .write(dir.path())
        .expect("manifest");
    let ttft = |rules: &RuleSet| {
        let s = score_dir(dir.path(), rules).expect("scored");
        s.cells[0].figures.clone().expect("figures").ttft_ms.median
    };
    for name in ["reference", "default"] {
        let rules = RuleSet::builtin(name).expect("rules");
        assert_eq!(ttft(&rules), Some(100.0), "{name}");
    }
    // A rule set may time prefill to the first answer text on purpose.
    let content = tokentrace_analyzer::rules::parse(
        "name = \"content\"\nversion = \"1\"\nextends = \"reference\"\n\
         [ttft]\nprefill = \"first_content\"\n",
        std::path::Path::new("content.toml"),
    )
    .expect("rules");
    assert_eq!(ttft(&content), Some(180.0));
}
