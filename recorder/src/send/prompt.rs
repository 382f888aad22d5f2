//! Prompts of an exact token count, identical within a context and distinct across
//! contexts and runs (a per-run nonce starts each one): counted by the server's own `/tokenize` (vLLM/SGLang or llama.cpp shape).
//! Completions get the token ids themselves; chat gets text whose message count was
//! searched to the exact length. Burst and rate cells send each request its own variant.

use std::borrow::Cow;

use serde_json::{Value, json};
use tokentrace_schemas::manifest::TokenizeShape;
use tokentrace_schemas::tables::Endpoint;

use crate::send::control::{Unanswered, get_tokenize, post_json};

/// Why a prompt could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("the server has no /tokenize, so prompts of an exact length cannot be built")]
    NoTokenizer,
    #[error("cannot count a prompt's tokens: {0}")]
    Unanswered(#[from] Unanswered),
    #[error("could not build a chat prompt of {want} tokens (closest: {got})")]
    Inexact { want: u32, got: u32 },
}

/// A prompt ready for a request body (`prompt` value: ids or text).
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub value: Value,
    /// Tokens as the server's tokenizer counts them.
    pub tokens: u32,
}

const WORDS: [&str; 24] = [
    "time", "river", "signal", "measure", "engine", "token", "window", "stream", "latency",
    "cache", "batch", "queue", "model", "server", "record", "matrix", "context", "decode",
    "prefill", "answer", "method", "number", "result", "report",
];

/// Deterministic filler text of `words` words, different for each `seed`, starting with
/// the run's `nonce` (so that no earlier run's cache holds any of it).
pub fn filler(words: usize, seed: u64, nonce: &str) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = format!("Run {nonce}. Context {seed}:");
    for _ in 0..words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(' ');
        out.push_str(WORDS[(x % WORDS.len() as u64) as usize]);
    }
    out
}

async fn count(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    endpoint: Endpoint,
    text: &str,
    shape: TokenizeShape,
) -> Result<Option<usize>, Unanswered> {
    if shape == TokenizeShape::LlamaCpp && endpoint == Endpoint::Chat {
        // llama.cpp counts the chat template too: render it (`/apply-template`), then
        // count the rendered prompt with its special tokens; without that endpoint, the
        // message alone.
        let messages = json!({"messages": [{"role": "user", "content": text}]});
        if let Some(prompt) = post_json(client, base, "/apply-template", &messages)
            .await?
            .and_then(|v| v["prompt"].as_str().map(str::to_string))
        {
            return Ok(get_tokenize(
                client,
                base,
                &json!({"content": prompt, "add_special": true}),
            )
            .await?
            .map(|t| t.len()));
        }
    }
    let body = match (endpoint, shape) {
        (_, TokenizeShape::LlamaCpp) => json!({"content": text, "add_special": false}),
        (Endpoint::Completions, TokenizeShape::Vllm) => json!({"model": model, "prompt": text}),
        (Endpoint::Chat, TokenizeShape::Vllm) => {
            json!({"model": model, "messages": [{"role": "user", "content": text}]})
        }
    };
    Ok(get_tokenize(client, base, &body).await?.map(|t| t.len()))
}

/// Short pieces that make up a chat prompt's last few tokens.
const PADS: [&str; 3] = [" the", ".", " a"];
/// Most pieces appended to one filler.
const MAX_PADS: usize = 12;

/// What makes a prompt's text its own: the context it is for, and the run's nonce.
#[derive(Debug, Clone, Copy)]
pub struct Seed<'a> {
    pub context: u64,
    pub nonce: &'a str,
}

/// Builds a prompt of exactly `n` tokens for `endpoint`.
pub async fn build(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    endpoint: Endpoint,
    tokenize: Option<TokenizeShape>,
    n: u32,
    seed: Seed<'_>,
) -> Result<Prompt, PromptError> {
    let shape = tokenize.ok_or(PromptError::NoTokenizer)?;
    let want = n as usize;
    match endpoint {
        Endpoint::Completions => {
            // Enough words to exceed n, then cut the ids at n: exact by construction.
            let mut words = want.max(8);
            loop {
                let text = filler(words, seed.context, seed.nonce);
                let body = match shape {
                    TokenizeShape::LlamaCpp => json!({"content": text, "add_special": false}),
                    TokenizeShape::Vllm => json!({"model": model, "prompt": text}),
                };
                let ids = get_tokenize(client, base, &body)
                    .await?
                    .ok_or(PromptError::NoTokenizer)?;
                if ids.len() >= want {
                    return Ok(Prompt {
                        value: json!(ids[..want]),
                        tokens: n,
                    });
                }
                words = words * 2 + 8;
            }
        }
        Endpoint::Chat => fit_text(client, base, model, endpoint, shape, n, seed).await,
    }
}

/// Filler text of exactly `n` tokens as the server counts it for `endpoint` (chat: as a
/// single user message, its template included; completions: the text alone), or the
/// closest the search found.
pub async fn fit_text(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    endpoint: Endpoint,
    shape: TokenizeShape,
    n: u32,
    seed: Seed<'_>,
) -> Result<Prompt, PromptError> {
    let want = n as usize;
    let fill = |words: usize| filler(words, seed.context, seed.nonce);
    let tokens = async |text: &str| {
        count(client, base, model, endpoint, text, shape)
            .await?
            .ok_or(PromptError::NoTokenizer)
    };
    // The template adds tokens around the message: search the word count.
    let (mut lo, mut hi) = (0usize, want.max(8) * 2);
    while tokens(&fill(hi)).await? < want {
        hi *= 2;
    }
    // (miss, words, tokens) of the closest filler.
    let mut best = (usize::MAX, 0usize, 0usize);
    while lo <= hi {
        let mid = (lo + hi) / 2;
        let c = tokens(&fill(mid)).await?;
        if c.abs_diff(want) < best.0 {
            best = (c.abs_diff(want), mid, c);
        }
        match c.cmp(&want) {
            std::cmp::Ordering::Equal => break,
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => {
                if mid == 0 {
                    break;
                }
                hi = mid - 1;
            }
        }
    }
    // Words come in whole tokens or more: from the longest filler not over
    // `want`, one-token pieces of punctuation are appended until the count is
    // exact.
    let (mut text, mut got) = (fill(best.1), best.2);
    'fit: for words in [best.1, best.1.saturating_sub(1), best.1.saturating_sub(2)] {
        let mut t = fill(words);
        let mut c = if words == best.1 {
            best.2
        } else {
            tokens(&t).await?
        };
        for _ in 0..MAX_PADS {
            if c.abs_diff(want) < got.abs_diff(want) {
                (text, got) = (t.clone(), c);
            }
            if c >= want {
                break;
            }
            let mut grew = false;
            for unit in PADS {
                let longer = format!("{t}{unit}");
                let n = tokens(&longer).await?;
                if n > c && n <= want {
                    (t, c, grew) = (longer, n, true);
                    break;
                }
            }
            if !grew {
                break;
            }
        }
        if got == want {
            break 'fit;
        }
    }
    // Close is fine within the run's tolerance; the caller checks it.
    Ok(Prompt {
        value: Value::String(text),
        tokens: u32::try_from(got).map_err(|_| PromptError::Inexact {
            want: n,
            got: u32::MAX,
        })?,
    })
}

/// `text` (a [`filler`], perhaps with more after it) with its first [`VARIED_WORDS`]
/// distinct filler words reordered by `key`, as a chat variant is: the same words, so
/// the same token count, and a start of its own; `None` when it has too few words.
pub fn reworded(text: &str, key: u64) -> Option<String> {
    // A chat body of the text alone: what a chat variant reads and reorders.
    let body = json!({"messages": [{"role": "user", "content": text}]});
    let v = Variants::new(&body, Endpoint::Chat)?;
    let varied: Value = serde_json::from_slice(&v.body(key)).ok()?;
    varied["messages"][0]["content"]
        .as_str()
        .map(str::to_string)
}

/// Token ids a completions variant replaces, from the second on (the first may be a
/// BOS the server expects).
pub const VARIED_IDS: usize = 8;
/// Distinct filler words a chat variant permutes (16! orders).
pub const VARIED_WORDS: usize = 16;
/// Stands for the varied part while the body is serialized.
const MARK: &str = "@@tokentrace-variant@@";

/// One prompt's request body in many variants, each request its own: the prompt's start
/// differs, its token count does not, so no request's prefill is served from another's
/// prefix cache (as with the random prompts of `vllm bench serve`). Completions replace
/// ids 2 to 9 by other ids of the same prompt; chat permutes the first
/// [`VARIED_WORDS`] distinct words of its filler (each word its own tokens, so the count
/// holds). A variant is spliced between two halves serialized once.
#[derive(Debug)]
pub struct Variants {
    left: Vec<u8>,
    right: Vec<u8>,
    vary: Vary,
}

#[derive(Debug)]
enum Vary {
    /// The distinct ids of the prompt, the digits of a variant.
    Ids(Vec<u64>),
    /// The words of the varied span (each written after a space), and which of them
    /// (their first occurrences) are permuted.
    Words {
        words: Vec<&'static str>,
        moved: Vec<usize>,
    },
}

impl Variants {
    /// Variants of `body` (a [`crate::send::request::stream_body`]); `None` when its prompt is
    /// too short to vary.
    pub fn new(body: &Value, endpoint: Endpoint) -> Option<Self> {
        let mut marked = body.clone();
        let (vary, before, after) = match endpoint {
            Endpoint::Completions => {
                let ids: Vec<u64> = body["prompt"]
                    .as_array()?
                    .iter()
                    .map(Value::as_u64)
                    .collect::<Option<_>>()?;
                if ids.len() < VARIED_IDS + 2 {
                    return None;
                }
                let mut distinct = ids.clone();
                distinct.sort_unstable();
                distinct.dedup();
                if distinct.len() < 2 {
                    return None;
                }
                marked["prompt"] = Value::String(MARK.to_string());
                let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
                (
                    Vary::Ids(distinct),
                    format!("[{},", ids[0]),
                    format!(",{}]", join(&ids[VARIED_IDS + 1..])),
                )
            }
            Endpoint::Chat => {
                let text = body["messages"][0]["content"].as_str()?;
                // The filler's header ends at its first ':'; words follow, one space each.
                let head = text.find(':')? + 1;
                let mut words = Vec::new();
                let mut moved = Vec::new();
                let mut seen = std::collections::BTreeSet::new();
                let mut end = head;
                for w in text[head..].split(' ').skip(1) {
                    let Some(known) = WORDS.iter().find(|k| **k == w) else {
                        break;
                    };
                    if seen.insert(*known) {
                        moved.push(words.len());
                    }
                    words.push(*known);
                    end += 1 + w.len();
                    if moved.len() == VARIED_WORDS {
                        break;
                    }
                }
                if moved.len() < 2 {
                    return None;
                }
                marked["messages"][0]["content"] =
                    Value::String(format!("{}{MARK}{}", &text[..head], &text[end..]));
                (Vary::Words { words, moved }, String::new(), String::new())
            }
        };
        let serialized = marked.to_string();
        let quoted = format!("\"{MARK}\"");
        let (l, r) = match endpoint {
            Endpoint::Completions => serialized.split_once(&quoted)?,
            Endpoint::Chat => serialized.split_once(MARK)?,
        };
        Some(Self {
            left: [l.as_bytes(), before.as_bytes()].concat(),
            right: [after.as_bytes(), r.as_bytes()].concat(),
            vary,
        })
    }

    /// The varied part of variant `key` (any number; variants of different keys differ
    /// but for a chance of one in 24^8 or 16!).
    fn part(&self, key: u64) -> String {
        let mut h = tokentrace_schemas::rng::mix(key.wrapping_add(0x9E37_79B9_7F4A_7C15));
        match &self.vary {
            Vary::Ids(ids) => {
                let base = ids.len() as u64;
                let mut out = Vec::with_capacity(VARIED_IDS);
                for _ in 0..VARIED_IDS {
                    out.push(ids[(h % base) as usize].to_string());
                    h /= base;
                }
                out.join(",")
            }
            Vary::Words { words, moved } => {
                // The h-th order of the moved words (factorial number system).
                let mut pool: Vec<&str> = moved.iter().map(|&i| words[i]).collect();
                let mut placed = words.clone();
                for &slot in moved {
                    let pick = (h % pool.len() as u64) as usize;
                    h /= pool.len() as u64;
                    placed[slot] = pool.remove(pick);
                }
                placed.iter().map(|w| format!(" {w}")).collect()
            }
        }
    }

    /// The body of variant `key` in three pieces: the shared start, the variant's own
    /// part, the shared end.
    pub fn parts(&self, key: u64) -> [Cow<'_, [u8]>; 3] {
        [
            Cow::Borrowed(&self.left),
            Cow::Owned(self.part(key).into_bytes()),
            Cow::Borrowed(&self.right),
        ]
    }

    /// Bytes of the body of variant `key`.
    pub fn len(&self, key: u64) -> usize {
        self.parts(key).iter().map(|p| p.len()).sum()
    }

    /// The body of variant `key`.
    pub fn body(&self, key: u64) -> Vec<u8> {
        self.parts(key).concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::request::stream_body;

    #[test]
    fn completion_variants_differ_at_the_start_and_keep_every_other_id() {
        let ids: Vec<u64> = (0..40).map(|i| 100 + i % 7).collect();
        let body = stream_body("m", Endpoint::Completions, &json!(ids), 32);
        let v = Variants::new(&body, Endpoint::Completions).expect("variants");
        let mut seen = std::collections::BTreeSet::new();
        for key in 0..200u64 {
            let b: Value = serde_json::from_slice(&v.body(key)).expect("json");
            let got: Vec<u64> = b["prompt"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|x| x.as_u64().expect("id"))
                .collect();
            assert_eq!(got.len(), ids.len());
            assert_eq!(got[0], ids[0]);
            assert_eq!(got[VARIED_IDS + 1..], ids[VARIED_IDS + 1..]);
            assert!(got.iter().all(|i| ids.contains(i)));
            assert_eq!(b["max_tokens"], 32);
            assert_eq!(v.len(key), v.body(key).len());
            seen.insert(got);
        }
        assert_eq!(seen.len(), 200, "every key its own prompt");
        // Too short to vary: the shared body is used.
        let short = stream_body("m", Endpoint::Completions, &json!([1, 2, 3]), 4);
        assert!(Variants::new(&short, Endpoint::Completions).is_none());
    }

    #[test]
    fn chat_variants_permute_words_and_keep_the_rest() {
        let text = format!("{}.", filler(300, 7, "abcd1234"));
        let body = stream_body("m", Endpoint::Chat, &Value::String(text.clone()), 8);
        let v = Variants::new(&body, Endpoint::Chat).expect("variants");
        let sorted = |t: &str| {
            let mut w: Vec<String> = t.split(' ').map(str::to_string).collect();
            w.sort();
            w
        };
        let mut seen = std::collections::BTreeSet::new();
        for key in 0..200u64 {
            let b: Value = serde_json::from_slice(&v.body(key)).expect("json");
            let got = b["messages"][0]["content"]
                .as_str()
                .expect("text")
                .to_string();
            assert_eq!(got.len(), text.len());
            assert_eq!(sorted(&got), sorted(&text), "the same words, reordered");
            assert!(got.starts_with("Run abcd1234. Context 7:"), "{got}");
            assert!(got.ends_with(&text[text.len() - 200..]));
            assert_ne!(got, text);
            seen.insert(got);
        }
        assert_eq!(seen.len(), 200, "every key its own prompt");
    }
}
