//! Reads one SSE event of an OpenAI-compatible stream (vLLM, SGLang, TGI, llama.cpp and
//! the simulator) into the fields of a `chunks` row: kind, text per channel, finish
//! reason, token count, cumulative usage, error. Never fails: what cannot be read is
//! recorded as such (the raw bytes are kept in `raw.sse.zst` regardless).
//!
//! Two readers give the same answer: a typed one that borrows the event's text and
//! builds no JSON tree (the hot path), and a `serde_json::Value` one that takes over
//! whenever the typed one refuses an event (odd types, duplicate keys, broken JSON).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, SeqAccess, Visitor};
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

/// What one event says; its text borrows from the event where it can.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub kind: Option<ChunkKind>,
    /// Answer text delta (`delta.content` or completions' `text`).
    pub content: Option<Cow<'a, str>>,
    /// Reasoning delta (`delta.reasoning_content` or `delta.reasoning`).
    pub reasoning: Option<Cow<'a, str>>,
    pub finish_reason: Option<Cow<'a, str>>,
    /// Number of token ids in the event (`choices[0].token_ids`), when sent.
    pub token_ids: Option<i32>,
    pub usage: Option<Usage>,
    /// The response `id`.
    pub server_id: Option<Cow<'a, str>>,
    /// The server's error message, or why the event could not be read.
    pub error: Option<String>,
}

impl Parsed<'_> {
    /// The row kind (data when nothing else applies).
    pub fn kind(&self) -> ChunkKind {
        self.kind.unwrap_or(ChunkKind::Data)
    }

    /// The same, owning its text.
    pub fn into_owned(self) -> Parsed<'static> {
        let own = |c: Option<Cow<'_, str>>| c.map(|c| Cow::Owned(c.into_owned()));
        Parsed {
            kind: self.kind,
            content: own(self.content),
            reasoning: own(self.reasoning),
            finish_reason: own(self.finish_reason),
            token_ids: self.token_ids,
            usage: self.usage,
            server_id: own(self.server_id),
            error: self.error,
        }
    }

    /// True when the event carried text on either channel.
    pub fn has_text(&self) -> bool {
        self.content.as_deref().is_some_and(|s| !s.is_empty())
            || self.reasoning.as_deref().is_some_and(|s| !s.is_empty())
    }
}

/// Reads an event.
pub fn parse<'a>(ev: &'a SseEvent<'_>) -> Parsed<'a> {
    if ev.comment.is_some() && ev.data.is_none() {
        return Parsed {
            kind: Some(ChunkKind::Comment),
            ..Parsed::default()
        };
    }
    let data: &str = ev.data.as_deref().unwrap_or_default();
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
    match serde_json::from_str::<Typed<'a>>(data) {
        Ok(t) if t.error.is_none() => t.into_parsed(),
        _ => parse_value(data),
    }
}

// ---- the typed reader (hot path) ----

/// The fields of a stream event that a row needs; everything else is skipped unread.
#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Option<FirstChoice<'a>>,
    #[serde(default)]
    usage: Option<TypedUsage>,
    /// Any non-null `error` sends the event to the `Value` reader.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: DeltaField<'a>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    token_ids: Option<Count>,
}

/// `delta` absent, or present (a JSON null is present, and then carries no text).
#[derive(Default)]
enum DeltaField<'a> {
    #[default]
    Absent,
    Present(Option<Delta<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for DeltaField<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<Delta<'a>>::deserialize(d).map(DeltaField::Present)
    }
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct TypedUsage {
    #[serde(default)]
    prompt_tokens: Option<i64>,
    #[serde(default)]
    completion_tokens: Option<i64>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<i64>,
}

/// `choices`: the first element, the rest skipped (no allocation for the array).
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Choice<'a>>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(V(std::marker::PhantomData))
    }
}

/// The length of an array, counted without keeping its elements.
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(V)
    }
}

fn int32(v: Option<i64>) -> Option<i32> {
    v.and_then(|x| i32::try_from(x).ok())
}

impl<'a> Typed<'a> {
    fn into_parsed(self) -> Parsed<'a> {
        let mut p = Parsed {
            kind: Some(ChunkKind::Data),
            server_id: self.id,
            ..Parsed::default()
        };
        if let Some(FirstChoice(Some(c))) = self.choices {
            match c.delta {
                DeltaField::Present(Some(delta)) => {
                    p.content = delta.content;
                    p.reasoning = delta.reasoning_content.or(delta.reasoning);
                }
                DeltaField::Present(None) => {}
                DeltaField::Absent => p.content = c.text,
            }
            p.finish_reason = c.finish_reason;
            p.token_ids = c.token_ids.and_then(|Count(n)| i32::try_from(n).ok());
        }
        if let Some(u) = self.usage {
            p.usage = Some(Usage {
                prompt_tokens: int32(u.prompt_tokens),
                completion_tokens: int32(u.completion_tokens),
                cached_tokens: int32(u.prompt_tokens_details.and_then(|d| d.cached_tokens)),
            });
        }
        p
    }
}

// ---- the `Value` reader (any JSON) ----

fn int(v: &Value) -> Option<i32> {
    v.as_i64().and_then(|x| i32::try_from(x).ok())
}

fn text(v: Option<&Value>) -> Option<Cow<'static, str>> {
    v.and_then(Value::as_str).map(|s| Cow::Owned(s.to_string()))
}

/// Reads an event's JSON through a `Value` tree: the reference for every odd input.
pub fn parse_value(data: &str) -> Parsed<'static> {
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
