//! The control plane: small JSON calls to the server outside any measurement (the probe,
//! prompt building), through reqwest, with bounded answers.

use std::time::Duration;

use serde_json::Value;

use crate::observe::scrape::read_body;

/// The most of a JSON answer (`/v1/models`, `/version`, `/tokenize`, ...) the probe
/// reads: token ids of a 1M-token prompt fit.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Base URL joined with a path.
pub fn join(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

/// Waits before each retry of a control call whose connection failed: a reset or a
/// refused connect is the network's doing, not the server saying it lacks the path.
const RETRY_WAITS: [Duration; 3] = [
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
];

/// Sends the request `build` makes, and again after each of [`RETRY_WAITS`] while the
/// connection fails before an answer (connect refused, reset, timed out); an answer of
/// any status is returned as it is.
pub async fn send_retried(
    build: impl Fn() -> reqwest::RequestBuilder,
) -> reqwest::Result<reqwest::Response> {
    let mut waits = RETRY_WAITS.iter();
    loop {
        match build().send().await {
            Ok(r) => return Ok(r),
            Err(e) => match waits.next() {
                Some(w) => tokio::time::sleep(*w).await,
                None => return Err(e),
            },
        }
    }
}

/// A control call whose connection failed on every try: the network's doing, not the
/// server saying it lacks the path.
#[derive(Debug, Clone, thiserror::Error)]
#[error("POST {url}: no answer after {tries} tries (the connection failed: {reason})")]
pub struct Unanswered {
    pub url: String,
    pub tries: usize,
    pub reason: String,
}

/// The JSON answer of `POST base/path` with `body`: `None` on a non-2xx answer or one
/// that is not JSON; an error when the connection failed (before or during the answer)
/// on every try.
pub async fn post_json(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: &Value,
) -> Result<Option<Value>, Unanswered> {
    let url = join(base, path);
    let mut waits = RETRY_WAITS.iter();
    let mut tries = 0;
    loop {
        tries += 1;
        let reason = match client.post(&url).json(body).send().await {
            Ok(mut resp) if resp.status().is_success() => {
                match read_body(&mut resp, MAX_ANSWER_BYTES).await {
                    Ok(b) => return Ok(serde_json::from_slice(&b).ok()),
                    Err(e) => e,
                }
            }
            Ok(_) => return Ok(None),
            Err(e) => e.to_string(),
        };
        match waits.next() {
            Some(w) => tokio::time::sleep(*w).await,
            None => return Err(Unanswered { url, tries, reason }),
        }
    }
}

/// Token ids of `/tokenize` for `body`: `None` if that shape is not served.
pub async fn get_tokenize(
    client: &reqwest::Client,
    base: &str,
    body: &Value,
) -> Result<Option<Vec<u64>>, Unanswered> {
    let Some(v) = post_json(client, base, "/tokenize", body).await? else {
        return Ok(None);
    };
    Ok(v["tokens"]
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect()))
}
