//! Multi-turn conversations over HTTP, as a client replays them: each turn's prompt is the
//! history so far (the previous prompt, the answer text the server streamed, a new
//! message), which re-tokenizes to the same ids and so hits the cached prompt and answer;
//! a request `seed` makes the answers the same whatever else the server was serving.

use std::net::SocketAddr;

use serde_json::{Value, json};
use tokentrace_sim::{Profile, SimServer, Tokenizer};

async fn start(profile: Profile) -> SimServer {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    SimServer::start(profile, addr).await.expect("sim starts")
}

fn tiny() -> Profile {
    Profile::load("tiny").expect("tiny")
}

/// One streamed turn: the answer text as a client assembles it (completions' `text`,
/// chat's `content` deltas) and the final usage.
async fn turn(sim: &SimServer, path: &str, mut body: Value) -> (String, Value) {
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", sim.url()))
        .json(&body)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.expect("body");
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).expect("json chunk"))
        .collect();
    let mut answer = String::new();
    for c in &chunks {
        let choice = &c["choices"][0];
        let piece = choice["text"]
            .as_str()
            .or_else(|| choice["delta"]["content"].as_str());
        answer.push_str(piece.unwrap_or_default());
    }
    let usage = chunks.last().expect("usage chunk")["usage"].clone();
    (answer, usage)
}

fn cached(usage: &Value) -> u64 {
    usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens")
}

/// Full blocks of 16 (tiny's block size) in the first `tokens` tokens, in tokens.
fn whole_blocks(tokens: u64) -> u64 {
    tokens / 16 * 16
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completions_follow_up_with_the_streamed_answer_hits_prompt_and_answer() {
    let sim = start(tiny()).await;
    let tok = Tokenizer::new();
    let prompt = tok.decode(&tok.prompt_of(300, 60)).expect("decode");
    let body = json!({"model": "sim-tiny", "prompt": prompt, "max_tokens": 50, "ignore_eos": true});
    let (answer, first) = turn(&sim, "/v1/completions", body).await;
    assert_eq!(cached(&first), 0);
    let more = "\n\nAnd then, what happened?";
    let follow = format!("{prompt}{answer}{more}");
    // Text in, same ids out: the history re-tokenizes to prompt ++ answer ++ message.
    let ids = [tok.encode(&prompt), tok.encode(&answer), tok.encode(more)].concat();
    assert_eq!(tok.encode(&follow), ids);
    let body = json!({"model": "sim-tiny", "prompt": follow, "max_tokens": 4, "ignore_eos": true});
    let (_, second) = turn(&sim, "/v1/completions", body).await;
    assert_eq!(second["prompt_tokens"], ids.len());
    // The prompt's and the answer's full blocks, all but the last sampled token.
    assert_eq!(cached(&second), whole_blocks(300 + 50 - 1));
    sim.stop();
}

/// The chat template renders `[user, assistant(answer), user]` as the rendering of
/// `[user]` followed by the answer's tokens, so the second turn hits the first turn's
/// prompt and answer. A reasoning answer's reasoning is not in the history the client
/// sends back (nor would the template render it), so only the first prompt's blocks hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_follow_up_hits_the_rendered_history() {
    let tok = Tokenizer::new();
    let user = tok.decode(&tok.prompt_of(300, 61)).expect("decode");
    let again = tok.decode(&tok.prompt_of(40, 62)).expect("decode");
    // `<|user|>` is 7 tokens, `<|assistant|>` 11, the newline after a message 1.
    let first_prompt = 7 + 300 + 1 + 11;
    for (reasoning, expect) in [
        (0u32, whole_blocks(first_prompt + 50 - 1)),
        (10, whole_blocks(first_prompt)),
    ] {
        let mut p = tiny();
        p.reasoning_tokens = reasoning;
        let sim = start(p).await;
        let messages = json!([{"role": "user", "content": user}]);
        let body = json!({"model": "sim-tiny", "messages": messages, "max_tokens": 50, "ignore_eos": true});
        let (answer, first) = turn(&sim, "/v1/chat/completions", body).await;
        assert_eq!(first["prompt_tokens"], first_prompt);
        let content_tokens = tok.encode(&answer).len() as u64;
        assert_eq!(content_tokens, u64::from(50 - reasoning));
        let messages = json!([
            {"role": "user", "content": user},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": again},
        ]);
        let body =
            json!({"model": "sim-tiny", "messages": messages, "max_tokens": 4, "ignore_eos": true});
        let (_, second) = turn(&sim, "/v1/chat/completions", body).await;
        let rendered = first_prompt + content_tokens + 1 + 7 + 40 + 1 + 11;
        assert_eq!(second["prompt_tokens"], rendered);
        assert_eq!(cached(&second), expect, "reasoning tokens: {reasoning}");
        sim.stop();
    }
}

/// The same prompt and `seed` get the same answer, whatever the server served in
/// between; without a seed, answers follow the arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_replays_the_same_answer_whatever_came_between() {
    let sim = start(tiny()).await;
    let tok = Tokenizer::new();
    let prompt = tok.decode(&tok.prompt_of(120, 63)).expect("decode");
    let ask = |seed: Value| json!({"model": "sim-tiny", "prompt": prompt, "max_tokens": 40, "seed": seed});
    let other = tok.decode(&tok.prompt_of(80, 64)).expect("decode");
    let (seeded, _) = turn(&sim, "/v1/completions", ask(json!(-7))).await;
    let (unseeded, _) = turn(&sim, "/v1/completions", ask(Value::Null)).await;
    for max_tokens in [3, 9] {
        let body = json!({"model": "sim-tiny", "prompt": other, "max_tokens": max_tokens});
        let (_, _) = turn(&sim, "/v1/completions", body).await;
    }
    assert_eq!(
        turn(&sim, "/v1/completions", ask(json!(-7))).await.0,
        seeded
    );
    assert_ne!(turn(&sim, "/v1/completions", ask(json!(8))).await.0, seeded);
    assert_ne!(
        turn(&sim, "/v1/completions", ask(Value::Null)).await.0,
        unseeded
    );
    // A seed that is not an integer is refused, naming the field.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", sim.url()))
        .json(&ask(json!("seven")))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["error"]["param"], "body.seed");
    sim.stop();
}
