//! What the server is and can do, asked once before anything is written: the served
//! model and its context limit (`/v1/models`), the engine (`/version`, metric names),
//! whether `/metrics` answers, which `/tokenize` shape works, and whether streams carry
//! token ids or cumulative usage (which decides how chunk tokens are counted).

use std::time::Duration;

use serde_json::{Value, json};
use tokentrace_schemas::manifest::{EngineInfo, ServerCapabilities, TokenCounting, TokenizeShape};
use tokentrace_schemas::tables::Endpoint;

use crate::observe::scrape::read_body;
use crate::send::client::{self, Lane, RunCtl};
use crate::send::control::{MAX_ANSWER_BYTES, get_tokenize, join, send_retried};
use crate::send::http::Transport;
use crate::send::request::{RequestSpec, stream_body};
use crate::store::queue::Record;
use tokentrace_schemas::clock::RunClock;
use tokentrace_schemas::tables::Role;
use tokentrace_wire::Seen;

/// Why the run cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "cannot reach {url}: {reason}. Is the server running, and is --target its base URL (e.g. http://127.0.0.1:8000)?"
    )]
    Unreachable { url: String, reason: String },
    #[error("the server does not serve model `{model}` (it serves: {served}); check --model")]
    UnknownModel { model: String, served: String },
    #[error("{url} answered HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url}: unexpected answer: {reason}")]
    Shape { url: String, reason: String },
}

/// What the probe found.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub model: String,
    pub max_model_len: Option<u32>,
    pub engine: EngineInfo,
    pub capabilities: ServerCapabilities,
    pub counting: TokenCounting,
    /// The metrics URL, when it answered with Prometheus text.
    pub metrics_url: Option<String>,
    /// The probe's own stream, recorded (request id 0 until placed in a cell).
    pub probe_records: Vec<Record>,
    /// The engine's facts (`engine.*`), from its own endpoints and `*_info` series.
    pub facts: Vec<tokentrace_schemas::manifest::Fact>,
}

async fn get_json(client: &reqwest::Client, url: &str) -> Result<Value, ProbeError> {
    let resp = send_retried(|| client.get(url).timeout(Duration::from_secs(30)))
        .await
        .map_err(|e| ProbeError::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
    let status = resp.status();
    let mut resp = resp;
    let body = read_body(&mut resp, MAX_ANSWER_BYTES).await;
    if !status.is_success() {
        let text = String::from_utf8_lossy(body.as_deref().unwrap_or_default()).into_owned();
        return Err(ProbeError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: text.chars().take(500).collect(),
        });
    }
    let body = body.map_err(|reason| ProbeError::Shape {
        url: url.to_string(),
        reason,
    })?;
    serde_json::from_slice(&body).map_err(|e| ProbeError::Shape {
        url: url.to_string(),
        reason: format!("not JSON: {e}"),
    })
}

/// What the probe is asked to look at.
#[derive(Debug, Clone, Copy)]
pub struct ProbeTarget<'a> {
    /// The server's base URL.
    pub base: &'a str,
    /// The model asked for (`None`: the only one served).
    pub model: Option<&'a str>,
    pub endpoint: Endpoint,
    /// Where the metrics are, when not at `/metrics`.
    pub metrics_url: Option<&'a str>,
    /// The run's stall timeout, which the probe's own stream obeys too.
    pub stall_timeout: Duration,
}

/// Asks the server what it is. Fails before anything is written when it cannot be
/// reached or does not serve `model`.
pub async fn probe(
    client: &reqwest::Client,
    transport: &std::sync::Arc<Transport>,
    clock: &RunClock,
    target: ProbeTarget<'_>,
) -> Result<ServerInfo, ProbeError> {
    let ProbeTarget {
        base,
        model,
        endpoint,
        metrics_url,
        stall_timeout,
    } = target;
    let (model, entry) = served_model(client, base, model).await?;
    let (max_model_len, max_model_len_source) = context_limit(client, base, entry.as_ref()).await;
    let (version, mut engine) = version(client, base).await;
    let metrics_url = metrics_url.map_or_else(|| join(base, "/metrics"), str::to_string);
    let metrics_text =
        match send_retried(|| client.get(&metrics_url).timeout(Duration::from_secs(10))).await {
            Ok(mut r) if r.status().is_success() => {
                read_body(&mut r, crate::observe::scrape::MAX_SCRAPE_BYTES)
                    .await
                    .ok()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
            }
            _ => None,
        };
    let metrics_ok = metrics_text.as_deref().is_some_and(|t| {
        crate::observe::scrape::parse_exposition(t, 0, 0).is_ok_and(|rows| !rows.is_empty())
    });
    if engine.name.is_none()
        && let Some(t) = &metrics_text
    {
        engine.name = tokentrace_schemas::protocol::Engine::ALL
            .iter()
            .find(|e| t.contains(e.metric_prefix()))
            .map(|e| e.name().to_string());
    }

    let facts = facts(
        client,
        base,
        version.as_ref(),
        (max_model_len, max_model_len_source.as_deref()),
        metrics_text.as_deref(),
    )
    .await;
    let tokenize =
        tokenize_shape(client, base, &model)
            .await
            .map_err(|e| ProbeError::Unreachable {
                url: e.url.clone(),
                reason: e.to_string(),
            })?;
    let (records, seen) = probe_stream(transport, clock, &model, endpoint, stall_timeout).await;
    let (ids, usage_per_chunk) = (seen.token_ids, seen.continuous_usage);
    let counting = if ids {
        TokenCounting::TokenIds
    } else if usage_per_chunk {
        TokenCounting::Usage
    } else {
        TokenCounting::OnePerChunk
    };
    Ok(ServerInfo {
        capabilities: ServerCapabilities {
            continuous_usage_stats: Some(usage_per_chunk),
            return_token_ids: Some(ids),
            metrics: Some(metrics_ok),
            tokenize,
            max_model_len,
            max_model_len_source,
            token_counting: Some(counting),
        },
        model,
        max_model_len,
        engine,
        counting,
        metrics_url: metrics_ok.then_some(metrics_url),
        probe_records: records,
        facts,
    })
}

/// The model to run (`model`, which the server must list, else the first it lists) and
/// its `/v1/models` entry.
async fn served_model(
    client: &reqwest::Client,
    base: &str,
    model: Option<&str>,
) -> Result<(String, Option<Value>), ProbeError> {
    let models_url = join(base, "/v1/models");
    let models = get_json(client, &models_url).await?;
    let list: Vec<&Value> = models["data"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let served: Vec<String> = list
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect();
    let model = match model {
        Some(m) if served.iter().any(|s| s == m) => m.to_string(),
        Some(m) => {
            return Err(ProbeError::UnknownModel {
                model: m.to_string(),
                served: served.join(", "),
            });
        }
        None => served.first().cloned().ok_or_else(|| ProbeError::Shape {
            url: models_url.clone(),
            reason: "no model listed".to_string(),
        })?,
    };
    let entry = list
        .iter()
        .find(|m| m["id"].as_str() == Some(model.as_str()))
        .map(|m| (*m).clone());
    Ok((model, entry))
}

/// `/version` as the server answers it, and the engine it names.
async fn version(client: &reqwest::Client, base: &str) -> (Option<Value>, EngineInfo) {
    let mut engine = EngineInfo::default();
    let version = get_json(client, &join(base, "/version")).await.ok();
    if let Some(v) = &version {
        engine.version = v["version"].as_str().map(str::to_string);
        engine.name = v["engine"].as_str().map(str::to_string);
        if let Some(obj) = v.as_object() {
            for (k, val) in obj {
                engine.details.insert(
                    k.clone(),
                    val.as_str().map_or_else(|| val.to_string(), str::to_string),
                );
            }
        }
    }

    (version, engine)
}

/// The engine's facts, most trusted source first: its version endpoint, the
/// engine-specific endpoints, the probe's context limit (with where it came from), then
/// the metrics' info series.
async fn facts(
    client: &reqwest::Client,
    base: &str,
    version: Option<&Value>,
    (max_model_len, max_model_len_source): (Option<u32>, Option<&str>),
    metrics_text: Option<&str>,
) -> Vec<tokentrace_schemas::manifest::Fact> {
    let mut facts = version
        .map(crate::observe::facts::from_version)
        .unwrap_or_default();
    for (path, extract) in [
        (
            "/get_server_info",
            crate::observe::facts::from_sglang as fn(&Value) -> _,
        ),
        ("/info", crate::observe::facts::from_tgi),
        ("/props", crate::observe::facts::from_llamacpp),
    ] {
        if let Ok(v) = get_json(client, &join(base, path)).await {
            facts.extend(extract(&v));
        }
    }
    if let (Some(len), Some(source)) = (max_model_len, max_model_len_source) {
        facts.push(tokentrace_schemas::manifest::Fact::new(
            "engine.max_model_len",
            len.to_string(),
            format!("probe ({source})"),
        ));
    }
    if let Some(rows) =
        metrics_text.and_then(|t| crate::observe::scrape::parse_exposition(t, 0, 0).ok())
    {
        facts.extend(crate::observe::facts::from_info_series(&rows));
    }
    let mut facts = crate::observe::facts::merge(facts);
    if let Some(kv) = crate::observe::facts::kv_budget(&facts) {
        facts = crate::observe::facts::merge(facts.into_iter().chain([kv]));
    }

    facts
}

/// Which `/tokenize` shape the server answers, if any.
async fn tokenize_shape(
    client: &reqwest::Client,
    base: &str,
    model: &str,
) -> Result<Option<TokenizeShape>, crate::send::control::Unanswered> {
    // A shape counts only when "hello" gives tokens: llama.cpp answers the vLLM shape
    // with an empty list (it ignores fields it does not know).
    let gives = |t: Option<Vec<u64>>| t.is_some_and(|t| !t.is_empty());
    let vllm = json!({"model": model, "prompt": "hello"});
    let llamacpp = json!({"content": "hello", "add_special": false});
    Ok(if gives(get_tokenize(client, base, &vllm).await?) {
        Some(TokenizeShape::Vllm)
    } else if gives(get_tokenize(client, base, &llamacpp).await?) {
        Some(TokenizeShape::LlamaCpp)
    } else {
        None
    })
}

/// One short stream, recorded like any request (its rows go into the first cell): its
/// records, and what its text events carried (token ids, cumulative usage), as the
/// assembler that recorded it saw.
async fn probe_stream(
    transport: &std::sync::Arc<Transport>,
    clock: &RunClock,
    model: &str,
    endpoint: Endpoint,
    stall_timeout: Duration,
) -> (Vec<Record>, Seen) {
    let body = stream_body(model, endpoint, &Value::String(" hello".to_string()), 4);
    let spec = RequestSpec {
        request_id: 0,
        slot: None,
        role: Role::Probe,
        endpoint,
        body: body.to_string().into(),
        prompt_tokens_requested: 0,
        max_tokens: Some(4),
        scheduled_ns: None,
    };
    let (tx, mut rx) = crate::store::queue::queue(1024, crate::store::queue::QUEUE_BYTES);
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let ctl = RunCtl {
        counting: tokentrace_wire::Counting::Auto,
        stall_timeout,
        cancel,
        first_token: None,
        keep_text: false,
    };
    let collect = async {
        let mut records = Vec::new();
        while let Some(r) = rx.recv().await {
            records.push(r);
        }
        records
    };
    let (records, ran) = tokio::join!(collect, async move {
        let mut lane = Lane::new(transport.clone());
        client::run(&mut lane, &spec, ctl, clock, &tx).await
    });
    (records, ran.seen)
}

/// The longest request (prompt + output) the server accepts, in tokens, and where that
/// came from. vLLM and SGLang list `max_model_len` with the model; llama.cpp gives each
/// slot its share of the context (`meta.n_ctx`, or `/props`), which is less than the
/// model's `n_ctx_train` whenever it runs several slots; TGI says `max_total_tokens` in
/// `/info`. The model's training context is the last resort.
async fn context_limit(
    client: &reqwest::Client,
    base: &str,
    entry: Option<&Value>,
) -> (Option<u32>, Option<String>) {
    let found = |v: &Value, source: &str| {
        v.as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v > 0)
            .map(|v| (v, source.to_string()))
    };
    let listed = entry.and_then(|m| {
        found(&m["max_model_len"], "max_model_len")
            .or_else(|| found(&m["meta"]["n_ctx"], "llama.cpp per-slot n_ctx"))
    });
    let asked = match listed {
        Some(l) => Some(l),
        None => {
            let props = get_json(client, &join(base, "/props")).await.ok();
            let info = get_json(client, &join(base, "/info")).await.ok();
            props
                .and_then(|p| {
                    found(
                        &p["default_generation_settings"]["n_ctx"],
                        "llama.cpp per-slot n_ctx",
                    )
                })
                .or_else(|| {
                    info.and_then(|i| found(&i["max_total_tokens"], "TGI max_total_tokens"))
                })
                .or_else(|| {
                    entry.and_then(|m| found(&m["meta"]["n_ctx_train"], "llama.cpp n_ctx_train"))
                })
        }
    };
    match asked {
        Some((v, s)) => (Some(v), Some(s)),
        None => (None, None),
    }
}
