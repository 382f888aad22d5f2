//! The control plane: small JSON calls to the server outside any measurement (the probe,
//! prompt building), through reqwest, with bounded answers.

use serde_json::Value;

use crate::scrape::read_body;

/// The most of a JSON answer (`/v1/models`, `/version`, `/tokenize`, ...) the probe
/// reads: token ids of a 1M-token prompt fit.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Base URL joined with a path.
pub fn join(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

/// The JSON answer of `POST base/path` with `body`; `None` on any failure or non-2xx.
pub async fn post_json(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: &Value,
) -> Option<Value> {
    let mut resp = client.post(join(base, path)).json(body).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    serde_json::from_slice(&read_body(&mut resp, MAX_ANSWER_BYTES).await.ok()?).ok()
}

/// Token ids of `/tokenize` for `body`, if that shape is served.
pub async fn get_tokenize(client: &reqwest::Client, base: &str, body: &Value) -> Option<Vec<u64>> {
    let v = post_json(client, base, "/tokenize", body).await?;
    v["tokens"].as_array()?.iter().map(Value::as_u64).collect()
}
