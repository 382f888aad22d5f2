//! A generation request before it is sent: its JSON body (shared by a cell, or one
//! variant of the cell's prompt), what the recorder knows of it, the URL of its endpoint
//! and the body that asks for everything the recorder can use.

use std::sync::Arc;

use serde_json::{Value, json};
use tokentrace_schemas::tables::{Endpoint, Role};

use crate::send::control::join;

/// A request's JSON body: the one its cell shares, or its own variant of the cell's
/// prompt (burst and rate cells: [`crate::send::prompt::Variants`]).
#[derive(Debug, Clone)]
pub enum Body {
    Shared(bytes::Bytes),
    Variant(Arc<crate::send::prompt::Variants>, u64),
}

impl From<bytes::Bytes> for Body {
    fn from(b: bytes::Bytes) -> Self {
        Self::Shared(b)
    }
}

impl From<String> for Body {
    fn from(s: String) -> Self {
        Self::Shared(s.into())
    }
}

impl From<&'static str> for Body {
    fn from(s: &'static str) -> Self {
        Self::Shared(s.into())
    }
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub request_id: i64,
    pub slot: Option<i32>,
    pub role: Role,
    pub endpoint: Endpoint,
    /// JSON body.
    pub body: Body,
    pub prompt_tokens_requested: i32,
    pub max_tokens: Option<i32>,
    /// When the request was due (a rate cell's schedule); `None`: when it is run.
    pub scheduled_ns: Option<i64>,
}

/// The generation URL of an endpoint.
pub fn endpoint_url(base: &str, endpoint: Endpoint) -> String {
    match endpoint {
        Endpoint::Completions => join(base, "/v1/completions"),
        Endpoint::Chat => join(base, "/v1/chat/completions"),
    }
}

/// A request body that asks for everything the recorder can use.
pub fn stream_body(model: &str, endpoint: Endpoint, prompt: &Value, max_tokens: u32) -> Value {
    let mut b = json!({
        "model": model, "max_tokens": max_tokens, "stream": true, "ignore_eos": true, "temperature": 0,
        "return_token_ids": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
    });
    match endpoint {
        Endpoint::Completions => b["prompt"] = prompt.clone(),
        Endpoint::Chat => b["messages"] = json!([{"role": "user", "content": prompt}]),
    }
    b
}
