//! Prometheus scrapes into the long `metrics` table: every sample of every family, with
//! canonical labels, histogram and summary samples under their family. The parser is
//! our own, line by line: the `openmetrics-parser` crate took time quadratic in the
//! series of a family (16,000 series: 6.7 s in a debug build, 4,000: 0.44 s), so a
//! server exposing 100,000 series stalled the probe for minutes.

use std::collections::HashMap;
use std::time::Duration;

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

fn metric_type(word: &str) -> MetricType {
    match word {
        "counter" => MetricType::Counter,
        "gauge" => MetricType::Gauge,
        "histogram" | "gaugehistogram" => MetricType::Histogram,
        "summary" => MetricType::Summary,
        _ => MetricType::Untyped,
    }
}

/// A sample value as Prometheus writes it (`NaN`, `+Inf`, `-Inf`, floats).
fn value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        t => t.parse().ok(),
    }
}

/// Label pairs, escapes undone.
type Pairs = Vec<(String, String)>;

/// `{k="v",...}` after a metric name: the pairs and the rest of the line after the
/// closing brace.
fn labels(text: &str) -> Result<(Pairs, &str), String> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((pairs, after));
        }
        let eq = rest.find('=').ok_or("a label without `=`")?;
        let key = rest[..eq].trim().to_string();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad label name `{key}`"));
        }
        rest = rest[eq + 1..].trim_start();
        let body = rest
            .strip_prefix('"')
            .ok_or("a label value without quotes")?;
        let mut v = String::new();
        let mut chars = body.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => v.push('\n'),
                    Some((_, e)) => v.push(e),
                    None => break,
                },
                '"' => {
                    end = Some(i + 1);
                    break;
                }
                c => v.push(c),
            }
        }
        let end = end.ok_or("an unterminated label value")?;
        pairs.push((key, v));
        rest = &body[end..];
    }
}

/// Parses Prometheus text into rows stamped with the scrape's start and end, sorted by
/// sample name and labels (deterministic, whatever the exposition order). Time and memory
/// are linear in the text. An unreadable sample line is an error naming its line.
pub fn parse_exposition(text: &str, start_ns: i64, end_ns: i64) -> Result<Vec<MetricRow>, String> {
    // Declared families and their types.
    let mut types: HashMap<&str, MetricType> = HashMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some("#")
            && words.next() == Some("TYPE")
            && let (Some(name), Some(ty)) = (words.next(), words.next())
        {
            types.insert(name, metric_type(ty));
        }
    }
    let mut rows = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| {
            format!(
                "line {}: {why}: `{}`",
                n + 1,
                line.chars().take(80).collect::<String>()
            )
        };
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let name = &line[..name_end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(bad("bad metric name"));
        }
        let (pairs, rest) = match line[name_end..].trim_start().strip_prefix('{') {
            Some(after) => labels(after).map_err(|e| bad(&e))?,
            None => (Vec::new(), &line[name_end..]),
        };
        let v = rest
            .split_whitespace()
            .next()
            .and_then(value)
            .ok_or_else(|| bad("no readable value"))?;
        // The family: the declared name, or the name less a histogram/summary suffix.
        let (family, metric_type) = match types.get(name) {
            Some(t) => (name, *t),
            None => [
                "_bucket", "_sum", "_count", "_total", "_created", "_gcount", "_gsum",
            ]
            .iter()
            .find_map(|sfx| {
                let base = name.strip_suffix(sfx)?;
                types.get(base).map(|t| (base, *t))
            })
            .unwrap_or((name, MetricType::Untyped)),
        };
        // Bucket bounds and quantiles as Python's exporters print them (1.0, +Inf).
        let pairs: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, val)| {
                if (k == "le" || k == "quantile")
                    && matches!(metric_type, MetricType::Histogram | MetricType::Summary)
                {
                    let t = value(&val).map_or(val, le_text);
                    (k, t)
                } else {
                    (k, val)
                }
            })
            .collect();
        rows.push(MetricRow {
            scrape_start_ns: start_ns,
            scrape_end_ns: end_ns,
            family: family.to_string(),
            name: name.to_string(),
            labels: canonical_labels(&pairs),
            value: v,
            metric_type,
        });
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
        read_body(&mut resp, MAX_SCRAPE_BYTES)
            .await
            .map_err(|e| format!("GET {url}: {e}"))
    };
    let body = tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| format!("GET {url}: no answer within {timeout:?}"))??;
    let end = clock.now_ns();
    parse_exposition(&String::from_utf8_lossy(&body), start, end)
        .map_err(|e| format!("{url}: not Prometheus text: {e}"))
}

/// A response body read to its end, refused past `cap` bytes (whatever a server sends,
/// the recorder holds at most `cap` of it).
pub async fn read_body(resp: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(b) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + b.len() > cap {
            return Err(format!("body over {cap} bytes"));
        }
        body.extend_from_slice(&b);
    }
    Ok(body)
}
