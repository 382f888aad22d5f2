//! Sample rows that exercise every column type, nulls, Unicode and edge values.

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::tables::*;

pub fn request_rows(n: usize) -> Vec<RequestRow> {
    (0..n)
        .map(|i| {
            let i64v = i as i64;
            let odd = i % 2 == 1;
            RequestRow {
                request_id: 1_000 + i64v,
                slot: (!odd).then_some(i as i32),
                role: [Role::Scout, Role::Warmup, Role::Measured, Role::Probe][i % 4],
                endpoint: if odd {
                    Endpoint::Chat
                } else {
                    Endpoint::Completions
                },
                prompt_tokens_requested: 8192,
                prompt_tokens_server: odd.then_some(8193),
                cached_tokens_server: Some(8192 - 256),
                completion_tokens_server: Some(i as i32 * 7),
                max_tokens: (!odd).then_some(4096),
                scheduled_ns: i64v * 1_000_000_000,
                sent_ns: Some(i64v * 1_000_000_000 + 50_000),
                headers_ns: odd.then_some(i64v),
                first_chunk_ns: Some(i64::MAX - i64v),
                first_token_ns: Some(-1),
                last_token_ns: None,
                end_ns: Some(i64::MIN + i64v),
                end_reason: EndReason::ALL[i % EndReason::ALL.len()],
                finish_reason: odd.then(|| "length".to_string()),
                http_status: Some(200 + (i % 3) as i32 * 100),
                error: odd.then(|| format!("boom «{i}» \"quoted\"\n second line")),
                server_request_id: Some(format!("cmpl-{i}")),
                connection_id: Some(i64v / 3),
                connect_start_ns: (i % 3 == 0).then_some(i64v * 1_000_000_000 - 9_000),
                connection_ns: Some(i64v * 1_000_000_000 - 1_000),
                retries: Some((i % 5 == 4) as i32),
            }
        })
        .collect()
}

pub fn chunk_rows(n: usize) -> Vec<ChunkRow> {
    (0..n)
        .map(|i| {
            let kind = [
                ChunkKind::Data,
                ChunkKind::Comment,
                ChunkKind::Error,
                ChunkKind::Done,
            ][i % 4];
            ChunkRow {
                request_id: (i / 10) as i64,
                seq: (i % 10) as i32,
                arrival_ns: 1_000_000 * i as i64 + 17,
                queue_delay_ns: (i % 3 != 0).then_some(4_000 + i as i64 % 1000),
                bytes: 200 + (i % 50) as i32,
                kind,
                tokens: (i % 5 != 0).then_some((i % 4) as i32),
                completion_tokens: (i % 7 != 0).then_some(i as i32),
                content: match i % 4 {
                    0 => Some(format!(" token{i}")),
                    1 => Some(String::new()),
                    2 => Some("日本語 ✓ 🦀".to_string()),
                    _ => None,
                },
                reasoning: (i % 6 == 0).then(|| "hmm, let me think".to_string()),
                finish_reason: (i % 10 == 9).then(|| "stop".to_string()),
                error: (kind == ChunkKind::Error).then(|| "server overloaded".to_string()),
            }
        })
        .collect()
}

pub fn metric_rows(n: usize) -> Vec<MetricRow> {
    (0..n)
        .map(|i| MetricRow {
            scrape_start_ns: i as i64 * 1_000_000_000,
            scrape_end_ns: i as i64 * 1_000_000_000 + 2_500_000,
            family: "vllm:e2e_request_latency_seconds".to_string(),
            name: "vllm:e2e_request_latency_seconds_bucket".to_string(),
            labels: canonical_labels(&[("model_name", "m"), ("le", "0.5"), ("engine", "0")]),
            value: [0.0, 1.5, f64::INFINITY, f64::NEG_INFINITY, -0.0][i % 5],
            metric_type: [
                MetricType::Counter,
                MetricType::Gauge,
                MetricType::Histogram,
                MetricType::Summary,
                MetricType::Untyped,
            ][i % 5],
        })
        .collect()
}

pub fn event_rows(n: usize) -> Vec<EventRow> {
    (0..n)
        .map(|i| EventRow {
            time_ns: i as i64 * 10,
            kind: EventKind::ALL[i % EventKind::ALL.len()],
            request_id: (i % 2 == 0).then_some(i as i64),
            detail: (i % 3 == 0).then(|| format!("{{\"n\":{i}}}")),
        })
        .collect()
}
