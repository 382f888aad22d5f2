//! Prometheus scrapes into the long `metrics` table: every sample of every family, with
//! canonical labels, histograms and summaries expanded back into their `_bucket`,
//! `_sum`, `_count` (and quantile) samples. Parsing is the `openmetrics-parser` crate's.

use std::time::Duration;

use openmetrics_parser::{PrometheusType, PrometheusValue};
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::tables::{MetricRow, MetricType, canonical_labels};

/// Largest `/metrics` body read (a guard, far above any real engine's).
pub const MAX_SCRAPE_BYTES: usize = 16 * 1024 * 1024;

fn le_text(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        }
    } else {
        // `{:?}` prints floats as Python's exporters do (1.0, 0.005, 2.5).
        format!("{v:?}")
    }
}

/// Parses Prometheus text into rows stamped with the scrape's start and end, sorted by
/// sample name and labels (deterministic, whatever the exposition order).
pub fn parse_exposition(text: &str, start_ns: i64, end_ns: i64) -> Result<Vec<MetricRow>, String> {
    if text.trim().is_empty() {
        // No metrics is valid Prometheus text; the parser wants at least one family.
        return Ok(Vec::new());
    }
    let exposition =
        openmetrics_parser::prometheus::parse_prometheus(text).map_err(|e| format!("{e:?}"))?;
    let mut rows = Vec::new();
    for family in exposition.families.values() {
        let names = family.get_label_names();
        let metric_type = match family.family_type {
            PrometheusType::Counter => MetricType::Counter,
            PrometheusType::Gauge => MetricType::Gauge,
            PrometheusType::Histogram => MetricType::Histogram,
            PrometheusType::Summary => MetricType::Summary,
            PrometheusType::Unknown => MetricType::Untyped,
        };
        let fam = family.family_name.as_str();
        for sample in family.iter_samples() {
            let base: Vec<(String, String)> = sample
                .get_labelset()
                .map(|set| set.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_else(|_| {
                    names
                        .iter()
                        .cloned()
                        .zip(std::iter::repeat(String::new()))
                        .collect()
                });
            let mut push = |name: String, extra: Option<(&str, String)>, value: f64| {
                let mut labels = base.clone();
                if let Some((k, v)) = extra {
                    labels.push((k.to_string(), v));
                }
                rows.push(MetricRow {
                    scrape_start_ns: start_ns,
                    scrape_end_ns: end_ns,
                    family: fam.to_string(),
                    name,
                    labels: canonical_labels(&labels),
                    value,
                    metric_type,
                });
            };
            match &sample.value {
                PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => {
                    push(fam.to_string(), None, n.as_f64())
                }
                PrometheusValue::Counter(c) => push(fam.to_string(), None, c.value.as_f64()),
                PrometheusValue::Histogram(h) => {
                    for b in &h.buckets {
                        push(
                            format!("{fam}_bucket"),
                            Some(("le", le_text(b.upper_bound))),
                            b.count.as_f64(),
                        );
                    }
                    if let Some(s) = h.sum {
                        push(format!("{fam}_sum"), None, s.as_f64());
                    }
                    if let Some(c) = h.count {
                        push(format!("{fam}_count"), None, c as f64);
                    }
                }
                PrometheusValue::Summary(s) => {
                    for q in &s.quantiles {
                        push(
                            fam.to_string(),
                            Some(("quantile", le_text(q.quantile))),
                            q.value.as_f64(),
                        );
                    }
                    if let Some(v) = s.sum {
                        push(format!("{fam}_sum"), None, v.as_f64());
                    }
                    if let Some(c) = s.count {
                        push(format!("{fam}_count"), None, c as f64);
                    }
                }
            }
        }
    }
    rows.sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
    Ok(rows)
}

/// Scrapes `url` once; errors say what failed (connection, status, size, parse).
pub async fn scrape(
    client: &reqwest::Client,
    url: &str,
    clock: &RunClock,
    timeout: Duration,
) -> Result<Vec<MetricRow>, String> {
    let start = clock.now_ns();
    let fetch = async {
        let mut resp = client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: HTTP {}", resp.status()));
        }
        let mut body = Vec::new();
        while let Some(b) = resp.chunk().await.map_err(|e| format!("GET {url}: {e}"))? {
            if body.len() + b.len() > MAX_SCRAPE_BYTES {
                return Err(format!("GET {url}: body over {MAX_SCRAPE_BYTES} bytes"));
            }
            body.extend_from_slice(&b);
        }
        Ok(body)
    };
    let body = tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| format!("GET {url}: no answer within {timeout:?}"))??;
    let end = clock.now_ns();
    parse_exposition(&String::from_utf8_lossy(&body), start, end)
        .map_err(|e| format!("{url}: not Prometheus text: {e}"))
}
