//! The replay fixtures (`fixtures/traces/`) parsed row for row against a plain split of
//! their lines, and malformed traces refused with the line named.

use proptest::prelude::*;
use tokentrace_wire::workload::{Slice, TraceFormat, TraceRow, WorkloadError, detect, parse};

fn trace(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/traces")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn all(bytes: &[u8], f: TraceFormat) -> Result<Vec<TraceRow>, WorkloadError> {
    parse(bytes, f, Slice::default())
}

/// The fields of each data line of a CSV without quotes.
fn split(bytes: &[u8]) -> Vec<Vec<String>> {
    String::from_utf8_lossy(bytes)
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn azure_rows_are_read_row_for_row() {
    let bytes = trace("azure.csv");
    assert_eq!(detect(&bytes), Ok(TraceFormat::Azure));
    let rows = all(&bytes, TraceFormat::Azure).expect("azure");
    let want = split(&bytes);
    assert_eq!(rows.len(), want.len());
    let secs = |t: &str| -> f64 { t.rsplit(':').next().expect("seconds").parse().expect("s") };
    let first = secs(&want[0][0]);
    for (i, (r, w)) in rows.iter().zip(&want).enumerate() {
        assert_eq!(r.line, i as u64 + 2, "the header is line 1");
        assert_eq!(r.input_tokens.to_string(), w[1]);
        assert_eq!(r.output_tokens.to_string(), w[2]);
        let t = (secs(&w[0]) - first) * 1e9;
        assert!(
            (r.time_ns as f64 - t).abs() < 1e3,
            "row {i}: {} vs {t}",
            r.time_ns
        );
        assert!(r.hash_ids.is_empty());
    }
}

#[test]
fn burstgpt_rows_are_read_row_for_row() {
    let bytes = trace("burstgpt.csv");
    assert_eq!(detect(&bytes), Ok(TraceFormat::Burstgpt));
    let rows = all(&bytes, TraceFormat::Burstgpt).expect("burstgpt");
    let want = split(&bytes);
    assert_eq!(rows.len(), want.len());
    let first: i64 = want[0][0].parse().expect("ts");
    for (i, (r, w)) in rows.iter().zip(&want).enumerate() {
        assert_eq!(r.line, i as u64 + 2);
        assert_eq!(
            r.time_ns,
            (w[0].parse::<i64>().expect("ts") - first) * 1_000_000_000
        );
        assert_eq!(r.input_tokens.to_string(), w[2]);
        assert_eq!(r.output_tokens.to_string(), w[3]);
    }
}

#[test]
fn mooncake_rows_are_read_row_for_row() {
    let bytes = trace("mooncake.jsonl");
    assert_eq!(detect(&bytes), Ok(TraceFormat::Mooncake));
    let rows = all(&bytes, TraceFormat::Mooncake).expect("mooncake");
    let text = String::from_utf8_lossy(&bytes);
    let want: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(rows.len(), 200);
    for (i, (r, w)) in rows.iter().zip(&want).enumerate() {
        assert_eq!(r.line, i as u64 + 1);
        assert_eq!(r.time_ns, w["timestamp"].as_i64().expect("ts") * 1_000_000);
        assert_eq!(
            i64::from(r.input_tokens),
            w["input_length"].as_i64().expect("in")
        );
        assert_eq!(
            i64::from(r.output_tokens),
            w["output_length"].as_i64().expect("out")
        );
        let ids: Vec<u64> = w["hash_ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_u64().expect("id"))
            .collect();
        assert_eq!(r.hash_ids, ids);
    }
}

/// A malformed trace: the error names the line and says what is wrong.
fn refused(text: &str, f: TraceFormat, line: u64, says: &str) {
    match all(text.as_bytes(), f) {
        Err(WorkloadError::Line { line: l, message }) => {
            assert_eq!(l, line, "{text:?}: {message}");
            assert!(message.contains(says), "{text:?}: {message}");
        }
        other => panic!("{text:?}: {other:?}"),
    }
}

#[test]
fn malformed_rows_are_named_by_their_line() {
    let m = |ts: &str, i: &str, o: &str| {
        format!("{{\"timestamp\": {ts}, \"input_length\": {i}, \"output_length\": {o}}}")
    };
    let ok = m("0", "10", "2");
    refused(
        &format!("{ok}\n{{\"timestamp\": 5, \"input_length\": 10}}\n"),
        TraceFormat::Mooncake,
        2,
        "`output_length` is missing",
    );
    refused(
        &format!("{ok}\n\n{}\n", m("5", "-3", "2")),
        TraceFormat::Mooncake,
        3,
        "`input_length` is -3",
    );
    refused(
        &format!("{ok}\n{}\n", m("5", "10.5", "2")),
        TraceFormat::Mooncake,
        2,
        "not a whole number",
    );
    refused(
        &format!("{}\n{}\n", m("50", "1", "1"), m("40", "1", "1")),
        TraceFormat::Mooncake,
        2,
        "goes backwards",
    );
    refused(
        "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, -2]}",
        TraceFormat::Mooncake,
        1,
        "hash id -2",
    );
    refused(
        "not json\n",
        TraceFormat::Mooncake,
        1,
        "not a Mooncake JSON object",
    );
    let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    refused(
        &format!("{azure}2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47.00,-5,1\n"),
        TraceFormat::Azure,
        3,
        "`ContextTokens` is `-5`",
    );
    refused(
        &format!("{azure}2023-11-16 18:15:46.68,374\n"),
        TraceFormat::Azure,
        2,
        "not a CSV row",
    );
    refused(
        &format!("{azure}2023-11-16 18:15:46.68,,44\n"),
        TraceFormat::Azure,
        2,
        "`ContextTokens` is missing",
    );
    refused(
        &format!("{azure}yesterday,1,1\n"),
        TraceFormat::Azure,
        2,
        "not a date and time",
    );
    refused(
        &format!("{azure}2023-11-16 18:15:47,1,1\n2023-11-16 18:15:46,1,1\n"),
        TraceFormat::Azure,
        3,
        "goes backwards",
    );
    let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
    refused(
        &format!("{burst}5,GPT-4,10,1,11,x\n3,GPT-4,10,1,11,x\n"),
        TraceFormat::Burstgpt,
        3,
        "goes backwards",
    );
    // Another format's content, forced: the header is named.
    let moon = trace("mooncake.jsonl");
    refused(
        &String::from_utf8_lossy(&moon),
        TraceFormat::Azure,
        1,
        "not an Azure trace header",
    );
    let azure_file = trace("azure.csv");
    refused(
        &String::from_utf8_lossy(&azure_file),
        TraceFormat::Burstgpt,
        1,
        "no `Timestamp` column",
    );
    refused(
        &String::from_utf8_lossy(&azure_file),
        TraceFormat::Mooncake,
        1,
        "not a Mooncake JSON object",
    );
    for f in [
        TraceFormat::Mooncake,
        TraceFormat::Azure,
        TraceFormat::Burstgpt,
    ] {
        assert_eq!(all(b"", f), Err(WorkloadError::Empty), "{f}");
        assert_eq!(all(b"\n\n", f), Err(WorkloadError::Empty), "{f}");
    }
    assert_eq!(
        all(azure.as_bytes(), TraceFormat::Azure),
        Err(WorkloadError::Empty)
    );
}

proptest! {
    #[test]
    fn no_input_panics_the_parsers(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        for f in [TraceFormat::Mooncake, TraceFormat::Azure, TraceFormat::Burstgpt] {
            let _ = parse(&bytes, f, Slice::default());
        }
        let _ = detect(&bytes);
    }
}
