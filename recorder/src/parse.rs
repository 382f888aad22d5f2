//! Reads one SSE event of an OpenAI-compatible stream (vLLM, SGLang, TGI, llama.cpp and
//! the simulator) into the fields of a `chunks` row: kind, text per channel, finish
//! reason, token count, cumulative usage, error. Never fails: what cannot be read is
//! recorded as such (the raw bytes are kept in `raw.sse.zst` regardless).

use serde_json::Value;
use tokentrace_schemas::tables::ChunkKind;

use crate::sse::SseEvent;

/// `usage` as servers report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: Option<i32>,
    pub completion_tokens: Option<i32>,
    pub cached_tokens: Option<i32>,
}

/// What one event says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub kind: Option<ChunkKind>,
    /// Answer text delta (`delta.content` or completions' `text`).
    pub content: Option<String>,
    /// Reasoning delta (`delta.reasoning_content` or `delta.reasoning`).
    pub reasoning: Option<String>,
    pub finish_reason: Option<String>,
    /// Number of token ids in the event (`choices[0].token_ids`), when sent.
    pub token_ids: Option<i32>,
    pub usage: Option<Usage>,
    /// The response `id`.
    pub server_id: Option<String>,
    /// The server's error message, or why the event could not be read.
    pub error: Option<String>,
}

impl Parsed {
    /// The row kind (data when nothing else applies).
    pub fn kind(&self) -> ChunkKind {
        self.kind.unwrap_or(ChunkKind::Data)
    }

    /// True when the event carried text on either channel.
    pub fn has_text(&self) -> bool {
        self.content.as_deref().is_some_and(|s| !s.is_empty())
            || self.reasoning.as_deref().is_some_and(|s| !s.is_empty())
    }
}

fn int(v: &Value) -> Option<i32> {
    v.as_i64().and_then(|x| i32::try_from(x).ok())
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

/// Reads an event.
pub fn parse(ev: &SseEvent) -> Parsed {
    if ev.comment.is_some() && ev.data.is_none() {
        return Parsed {
            kind: Some(ChunkKind::Comment),
            ..Parsed::default()
        };
    }
    let data = ev.data.as_deref().unwrap_or_default();
    if ev.event.as_deref() == Some("error") {
        return Parsed {
            kind: Some(ChunkKind::Error),
            error: Some(error_message(data)),
            ..Parsed::default()
        };
    }
    if data.trim() == "[DONE]" {
        return Parsed {
            kind: Some(ChunkKind::Done),
            ..Parsed::default()
        };
    }
    let v: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => {
            return Parsed {
                kind: Some(ChunkKind::Data),
                error: Some(format!("unreadable JSON: {e}")),
                ..Parsed::default()
            };
        }
    };
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Parsed {
            kind: Some(ChunkKind::Error),
            error: Some(
                err.get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| err.to_string(), str::to_string),
            ),
            server_id: text(v.get("id")),
            ..Parsed::default()
        };
    }
    let mut p = Parsed {
        kind: Some(ChunkKind::Data),
        server_id: text(v.get("id")),
        ..Parsed::default()
    };
    if let Some(choice) = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    {
        if let Some(delta) = choice.get("delta") {
            p.content = text(delta.get("content"));
            p.reasoning =
                text(delta.get("reasoning_content")).or_else(|| text(delta.get("reasoning")));
        } else {
            p.content = text(choice.get("text"));
        }
        p.finish_reason = text(choice.get("finish_reason"));
        p.token_ids = choice
            .get("token_ids")
            .and_then(Value::as_array)
            .and_then(|a| i32::try_from(a.len()).ok());
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        p.usage = Some(Usage {
            prompt_tokens: u.get("prompt_tokens").and_then(int),
            completion_tokens: u.get("completion_tokens").and_then(int),
            cached_tokens: u
                .get("prompt_tokens_details")
                .and_then(|d| d.get("cached_tokens"))
                .and_then(int),
        });
    }
    p
}

fn error_message(data: &str) -> String {
    serde_json::from_str::<Value>(data)
        .ok()
        .and_then(|v| {
            let e = v.get("error").unwrap_or(&v);
            e.get("message").and_then(Value::as_str).map(str::to_string)
        })
        .unwrap_or_else(|| data.to_string())
}
