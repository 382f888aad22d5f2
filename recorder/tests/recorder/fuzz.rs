//! Property tests (proptest) of the recorder's decoders of a server's bytes: Prometheus
//! text (captured expositions with lines damaged, random text), response heads and
//! bodies (chunked, sized, until close) under any read split. Never a panic; a body
//! decodes the same under any split; Prometheus rows are bounded by the input.
//! Cases: `PROPTEST_CASES` (256 in CI; `bench/fuzz.sh` runs 10 million).

use proptest::prelude::*;
use tokentrace_recorder::observe::scrape::parse_exposition;
use tokentrace_recorder::send::http::{BodyDecoder, BodyKind, parse_head};

use crate::fixture;

/// A real exposition (llama.cpp's, and a vLLM-shaped one) with lines altered.
fn exposition() -> impl Strategy<Value = String> {
    let vllm = "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n\
                vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
                # TYPE vllm:e2e_request_latency_seconds histogram\n\
                vllm:e2e_request_latency_seconds_bucket{le=\"0.3\",model_name=\"m\"} 1.0\n\
                vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 2.0\n\
                vllm:e2e_request_latency_seconds_sum{model_name=\"m\"} 1.5\n\
                vllm:e2e_request_latency_seconds_count{model_name=\"m\"} 2.0\n\
                # TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\"} 1.0\n"
        .to_string();
    let llama = String::from_utf8_lossy(&fixture("llamacpp-metrics.txt")).into_owned();
    (
        prop_oneof![Just(vllm), Just(llama)],
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                0..4u8,
                prop_oneof![
                    Just("NaN".to_string()),
                    Just("+Inf".to_string()),
                    Just("# TYPE x summary".to_string()),
                    Just("x{a=\"\\\"\"} 1".to_string()),
                    Just("x{le=\"oops\"} 1".to_string()),
                    Just("{}".to_string()),
                    ".{0,30}",
                ],
            ),
            0..6,
        ),
    )
        .prop_map(|(text, edits)| {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for (at, kind, s) in edits {
                if lines.is_empty() {
                    lines.push(s);
                    continue;
                }
                let at = at.index(lines.len());
                match kind {
                    0 => lines[at] = s,
                    1 => lines.insert(at, s),
                    2 => {
                        lines.remove(at);
                    }
                    _ => {
                        let l = &mut lines[at];
                        let cut = l
                            .char_indices()
                            .nth(l.chars().count() / 2)
                            .map_or(0, |c| c.0);
                        l.truncate(cut);
                    }
                }
            }
            lines.join("\n") + "\n"
        })
}

fn decode(kind: BodyKind, reads: &[Vec<u8>]) -> Result<(Vec<u8>, usize, bool), String> {
    let mut d = BodyDecoder::new(kind);
    let mut out = Vec::new();
    let mut left = 0;
    for r in reads {
        if d.done() {
            left += r.len();
            continue;
        }
        let used = d.decode(r, &mut out)?;
        left += r.len() - used;
    }
    Ok((out, left, d.done()))
}

fn pieces(bytes: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for a in at {
        out.push(bytes[from..a].to_vec());
        from = a;
    }
    out.push(bytes[from..].to_vec());
    out
}

/// A chunked body: real chunks, odd sizes and extensions, or random bytes.
fn chunked() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 0..40),
                "(;[a-z=]{0,6})?",
                prop::bool::ANY
            ),
            0..6,
        )
        .prop_map(|chunks| {
            let mut w = Vec::new();
            for (c, ext, upper) in chunks {
                let size = if upper {
                    format!("{:X}", c.len())
                } else {
                    format!("{:x}", c.len())
                };
                w.extend_from_slice(format!("{size}{ext}\r\n").as_bytes());
                w.extend_from_slice(&c);
                w.extend_from_slice(b"\r\n");
            }
            w.extend_from_slice(b"0\r\n\r\n");
            w
        }),
        prop::collection::vec(any::<u8>(), 0..300),
        "[0-9a-fA-F]{1,20}(\r\n|\n)[ -~]{0,30}".prop_map(String::into_bytes),
    ]
}

proptest! {
    /// Prometheus text gives rows or an error, never a panic; no more rows per line than
    /// a histogram's expansion can give.
    #[test]
    fn prometheus_text_parses_or_says_why(text in prop_oneof![exposition(), any::<String>()]) {
        if let Ok(rows) = parse_exposition(&text, 1, 2) {
            prop_assert!(rows.len() <= 3 * text.lines().count() + 3);
            prop_assert!(rows.iter().all(|r| r.scrape_start_ns == 1 && r.scrape_end_ns == 2));
        }
    }

    /// A chunked body decodes to the same payload, the same leftover and the same error
    /// under any split of its bytes.
    #[test]
    fn chunked_bodies_decode_the_same_under_any_split(
        wire in chunked(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let whole = decode(BodyKind::Chunked, std::slice::from_ref(&wire));
        let split = decode(BodyKind::Chunked, &pieces(&wire, &cuts));
        match (&whole, &split) {
            (Ok(w), Ok(s)) => prop_assert_eq!(w, s),
            (Err(_), Err(_)) => {}
            // A split can reveal an error only once its bytes arrive: the whole read
            // must fail too, never succeed differently.
            _ => prop_assert!(whole.is_err() == split.is_err(), "{:?} vs {:?}", whole, split),
        }
    }

    /// A response head parses, asks for more bytes, or is refused; never a panic, and a
    /// parsed head never claims more bytes than it was given.
    #[test]
    fn response_heads_parse_or_refuse(
        head in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            "HTTP/1\\.[01] [0-9]{3} [A-Za-z ]{0,10}\r\n([A-Za-z-]{1,16}: [ -~]{0,20}\r\n){0,6}\r\n"
                .prop_map(String::into_bytes),
            "HTTP/1\\.1 200 OK\r\n(Content-Length: -?[0-9]{1,22}|Transfer-Encoding: (chunked|gzip, chunked|identity))\r\n\r\n"
                .prop_map(String::into_bytes),
        ],
    ) {
        if let Ok(Some((_, used))) = parse_head(&head) {
            prop_assert!(used <= head.len());
        }
    }
}
