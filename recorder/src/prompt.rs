//! Prompts of an exact token count, identical within a context and distinct across
//! contexts and runs (a per-run nonce starts each one): counted by the server's own `/tokenize` (vLLM/SGLang or llama.cpp shape).
//! Completions get the token ids themselves; chat gets text whose message count was
//! searched to the exact length.

use serde_json::{Value, json};
use tokentrace_schemas::tables::Endpoint;

use crate::probe::{get_tokenize, post_json};

/// Why a prompt could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("the server has no /tokenize, so prompts of an exact length cannot be built")]
    NoTokenizer,
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
    llama: bool,
) -> Option<usize> {
    if llama && endpoint == Endpoint::Chat {
        // llama.cpp counts the chat template too: render it (`/apply-template`), then
        // count the rendered prompt with its special tokens; without that endpoint, the
        // message alone.
        let messages = json!({"messages": [{"role": "user", "content": text}]});
        if let Some(prompt) = post_json(client, base, "/apply-template", &messages)
            .await
            .and_then(|v| v["prompt"].as_str().map(str::to_string))
        {
            return get_tokenize(
                client,
                base,
                &json!({"content": prompt, "add_special": true}),
            )
            .await
            .map(|t| t.len());
        }
    }
    let body = match (endpoint, llama) {
        (_, true) => json!({"content": text, "add_special": false}),
        (Endpoint::Completions, false) => json!({"model": model, "prompt": text}),
        (Endpoint::Chat, false) => {
            json!({"model": model, "messages": [{"role": "user", "content": text}]})
        }
    };
    get_tokenize(client, base, &body).await.map(|t| t.len())
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
    tokenize: Option<&str>,
    n: u32,
    seed: Seed<'_>,
) -> Result<Prompt, PromptError> {
    let llama = match tokenize {
        Some("llama.cpp") => true,
        Some(_) => false,
        None => return Err(PromptError::NoTokenizer),
    };
    let want = n as usize;
    match endpoint {
        Endpoint::Completions => {
            // Enough words to exceed n, then cut the ids at n: exact by construction.
            let mut words = want.max(8);
            loop {
                let body = if llama {
                    json!({"content": filler(words, seed.context, seed.nonce), "add_special": false})
                } else {
                    json!({"model": model, "prompt": filler(words, seed.context, seed.nonce)})
                };
                let ids = get_tokenize(client, base, &body)
                    .await
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
        Endpoint::Chat => {
            let fill = |words: usize| filler(words, seed.context, seed.nonce);
            let tokens = async |text: &str| {
                count(client, base, model, endpoint, text, llama)
                    .await
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
    }
}
