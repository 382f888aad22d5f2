//! Prometheus text into long-format metric rows.

use tokentrace_recorder::observe::scrape::parse_exposition;
use tokentrace_schemas::tables::MetricType;

use crate::fixture;

#[test]
fn llamacpp_metrics_without_labels() {
    let text = String::from_utf8(fixture("llamacpp-metrics.txt")).expect("utf-8");
    let rows = parse_exposition(&text, 10, 20).expect("parses");
    assert_eq!(rows.len(), 15);
    let deferred = rows
        .iter()
        .find(|r| r.name == "llamacpp:requests_deferred")
        .expect("deferred");
    assert_eq!(
        (
            deferred.value,
            deferred.metric_type,
            deferred.labels.as_str()
        ),
        (0.0, MetricType::Gauge, "")
    );
    let predicted = rows
        .iter()
        .find(|r| r.name == "llamacpp:tokens_predicted_total")
        .expect("counter");
    assert_eq!(
        (predicted.value, predicted.metric_type),
        (97.0, MetricType::Counter)
    );
    assert!(
        rows.iter()
            .all(|r| r.scrape_start_ns == 10 && r.scrape_end_ns == 20)
    );
}

const VLLM_LIKE: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="deepseek",engine="0"} 4.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="deepseek"} 3.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="deepseek"} 1.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5",model_name="deepseek"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="deepseek"} 3.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="deepseek"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="deepseek"} 3.25
vllm:e2e_request_latency_seconds_count{engine="0",model_name="deepseek"} 4.0
"#;

#[test]
fn vllm_families_expand_back_to_samples() {
    let rows = parse_exposition(VLLM_LIKE, 1, 2).expect("parses");
    let names: Vec<(&str, &str, f64)> = rows
        .iter()
        .map(|r| (r.name.as_str(), r.labels.as_str(), r.value))
        .collect();
    assert_eq!(
        names,
        vec![
            (
                "vllm:e2e_request_latency_seconds_bucket",
                "engine=\"0\",le=\"+Inf\",model_name=\"deepseek\"",
                4.0
            ),
            (
                "vllm:e2e_request_latency_seconds_bucket",
                "engine=\"0\",le=\"0.5\",model_name=\"deepseek\"",
                1.0
            ),
            (
                "vllm:e2e_request_latency_seconds_bucket",
                "engine=\"0\",le=\"1.0\",model_name=\"deepseek\"",
                3.0
            ),
            (
                "vllm:e2e_request_latency_seconds_count",
                "engine=\"0\",model_name=\"deepseek\"",
                4.0
            ),
            (
                "vllm:e2e_request_latency_seconds_sum",
                "engine=\"0\",model_name=\"deepseek\"",
                3.25
            ),
            (
                "vllm:num_requests_running",
                "engine=\"0\",model_name=\"deepseek\"",
                4.0
            ),
            (
                "vllm:request_success_total",
                "engine=\"0\",finished_reason=\"abort\",model_name=\"deepseek\"",
                1.0
            ),
            (
                "vllm:request_success_total",
                "engine=\"0\",finished_reason=\"stop\",model_name=\"deepseek\"",
                3.0
            ),
        ]
    );
    assert!(
        rows.iter()
            .filter(|r| r.name.starts_with("vllm:e2e"))
            .all(|r| r.family == "vllm:e2e_request_latency_seconds"
                && r.metric_type == MetricType::Histogram)
    );
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    assert!(parse_exposition("<html>not metrics</html>", 0, 0).is_err());
    assert_eq!(parse_exposition("", 0, 0).map(|r| r.len()), Ok(0));
}

/// The parser is linear: a family of 100,000 series (what a misbehaving server sent) is
/// read whole; the old crate's quadratic parse took minutes on it.
#[test]
fn a_hundred_thousand_series_parse() {
    let mut t = String::from("# TYPE pad gauge\n");
    for i in 0..100_000 {
        t.push_str(&format!("pad{{series=\"{i}\"}} 1\n"));
    }
    let rows = parse_exposition(&t, 0, 0).expect("parses");
    assert_eq!(rows.len(), 100_000);
    assert!(
        rows.iter()
            .all(|r| r.family == "pad" && r.metric_type == MetricType::Gauge)
    );
}

/// Garbage is refused with the line it is on.
#[test]
fn garbage_names_its_line() {
    let err = parse_exposition("ok 1\nx{a=\"1\" 2 3\n", 0, 0).expect_err("garbage");
    assert!(err.starts_with("line 2: "), "{err}");
    assert!(parse_exposition("\u{fffd}\u{fffd} not prometheus\n", 0, 0).is_err());
}

/// A server answering with more than the cap (a 17 MiB body, no length announced) is
/// refused after the cap: the recorder never holds more of it.
#[tokio::test]
async fn bodies_past_the_cap_are_refused() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.expect("accept");
        let mut head = [0u8; 1024];
        let _ = tokio::io::AsyncReadExt::read(&mut tcp, &mut head).await;
        let _ = tcp
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n")
            .await;
        let line = b"x_series{i=\"1\"} 1\n".repeat(1 << 16);
        for _ in 0..((17 << 20) / line.len() + 1) {
            if tcp.write_all(&line).await.is_err() {
                return;
            }
        }
    });
    let mut resp = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("head");
    let err = tokentrace_recorder::observe::scrape::read_body(&mut resp, 16 << 20)
        .await
        .expect_err("over the cap");
    assert_eq!(err, "body over 16777216 bytes");
}
