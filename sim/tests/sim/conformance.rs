//! The simulator against the engine it imitates, with no vLLM needed: every request
//! `fixtures/vllm/capture.py` sent to a real vLLM 0.32.0 is sent again to the simulator
//! (profile `vllm-cpu-smollm2`), and the answers must agree in status, content type, the
//! keys and JSON types of every chunk kind and body, the order of chunk kinds, the error
//! bodies' type, param and code, and every `vllm:` metric family the simulator serves
//! (type and label names). What differs on purpose is listed in `DELIBERATE`, each with
//! its reason; anything else fails with the path that differs.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::Value;
use tokentrace_sim::{Profile, SimServer};

fn captured() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vllm/captured")
}

/// Differences kept on purpose: (file, shape path, why). A path listed here may be
/// present on one side only.
const DELIBERATE: &[(&str, &str, &str)] = &[(
    "version.json",
    "engine:string",
    "the simulator names itself, so that the recorder files runs against it as \
     tokentrace-sim and never as vLLM (vLLM's /version has only `version`)",
)];

/// The metric families of vLLM the recorder and analyzer read: the simulator must serve
/// each of them, with vLLM's type and labels.
const READ_FAMILIES: &[&str] = &[
    "vllm:cache_config_info",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
];

/// A JSON value's shape: one `path:type` entry per leaf and container, list items under
/// `path[]` (all items merged), integers told from other numbers.
fn shape(v: &Value, path: &str, out: &mut BTreeSet<String>) {
    let ty = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if !path.is_empty() {
        out.insert(format!("{path}:{ty}"));
    }
    match v {
        Value::Array(items) => {
            for item in items {
                shape(item, &format!("{path}[]"), out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                shape(item, &p, out);
            }
        }
        _ => {}
    }
}

fn shape_of(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    shape(v, "", &mut out);
    out
}

/// The kind of one SSE event of a completions or chat stream.
fn chunk_kind(v: &Value, seen_content: bool) -> &'static str {
    let choices = v["choices"].as_array();
    if choices.is_some_and(Vec::is_empty) {
        return "usage";
    }
    let choice = &v["choices"][0];
    if choice["delta"].get("role").is_some() {
        "role"
    } else if !choice["finish_reason"].is_null() {
        "finish"
    } else if !seen_content {
        "first"
    } else {
        "token"
    }
}

/// An SSE body as (kind sequence with runs collapsed, shape of each kind).
fn sse_shapes(
    body: &str,
    what: &str,
) -> (Vec<&'static str>, BTreeMap<&'static str, BTreeSet<String>>) {
    let mut kinds: Vec<&'static str> = Vec::new();
    let mut shapes: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    let mut seen_content = false;
    for event in body.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data = event
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("{what}: an event that is not `data: …`: {event:?}"));
        let kind = if data == "[DONE]" {
            "done"
        } else {
            let v: Value = serde_json::from_str(data)
                .unwrap_or_else(|e| panic!("{what}: a chunk that is not JSON ({e}): {data}"));
            let kind = chunk_kind(&v, seen_content);
            if matches!(kind, "first" | "token" | "finish") {
                seen_content = true;
            }
            shapes.entry(kind).or_default().extend(shape_of(&v));
            kind
        };
        if kinds.last() != Some(&kind) {
            kinds.push(kind);
        }
    }
    (kinds, shapes)
}

/// Prometheus text as family → (type, label names of its samples).
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(ty)) = (parts.next(), parts.next()) else {
                panic!("a TYPE line without name and type: {line}");
            };
            out.insert(name.to_string(), (ty.to_string(), BTreeSet::new()));
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let family = [name, name.trim_end_matches("_bucket")]
            .into_iter()
            .chain(["_sum", "_count"].map(|s| name.strip_suffix(s).unwrap_or(name)))
            .find(|f| out.contains_key(*f))
            .unwrap_or_else(|| panic!("a sample of no declared family: {line}"))
            .to_string();
        let labels = label_names(&line[name_end..]);
        if let Some(entry) = out.get_mut(&family) {
            entry.1.extend(labels);
        }
    }
    out
}

/// The label names of a sample's `{a="x",b="y"} value` tail (values may hold commas and
/// escaped quotes).
fn label_names(tail: &str) -> Vec<String> {
    let Some(inner) = tail.strip_prefix('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut chars = inner.chars();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let name = name.trim_start_matches(',').trim().to_string();
        if name.is_empty() || name.starts_with('}') {
            break;
        }
        names.push(name);
        assert_eq!(
            chars.next(),
            Some('"'),
            "a label value without quotes: {tail}"
        );
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => escaped = false,
            }
        }
    }
    names
}

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

async fn ask(client: &reqwest::Client, base: &str, entry: &Value) -> Answer {
    let path = entry["path"].as_str().expect("path");
    let url = format!("{base}{path}");
    let req = match entry["method"].as_str() {
        Some("GET") => client.get(&url),
        Some("POST") => client
            .post(&url)
            .header("content-type", "application/json")
            .body(entry["body"].to_string()),
        other => panic!("index.json: method {other:?}"),
    };
    let resp = req.send().await.expect("the simulator answers");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.text().await.expect("body");
    Answer {
        status,
        content_type,
        body,
    }
}

fn vllm_cpu(prompt_tokens_details: bool) -> Profile {
    Profile {
        prompt_tokens_details,
        ..Profile::load("vllm-cpu-smollm2").expect("built-in profile")
    }
}

/// Differences between two shapes, less the deliberate ones for `file`.
fn differences(file: &str, real: &BTreeSet<String>, sim: &BTreeSet<String>) -> Vec<String> {
    let allowed = |p: &String| {
        DELIBERATE
            .iter()
            .any(|(f, path, _)| *f == file && p == path)
    };
    let mut out: Vec<String> = real
        .difference(sim)
        .filter(|p| !allowed(p))
        .map(|p| format!("{file}: vLLM has {p}, the simulator does not"))
        .collect();
    out.extend(
        sim.difference(real)
            .filter(|p| !allowed(p))
            .map(|p| format!("{file}: the simulator has {p}, vLLM does not")),
    );
    out
}

fn compare_metrics(file: &str, real: &str, sim: &str, problems: &mut Vec<String>) {
    let real = families(real);
    let sim = families(sim);
    for name in READ_FAMILIES {
        for (side, fams) in [("vLLM", &real), ("the simulator", &sim)] {
            if !fams.contains_key(*name) {
                problems.push(format!("{file}: {side} does not serve {name}"));
            }
        }
    }
    for (name, (ty, labels)) in sim.iter().filter(|(n, _)| n.starts_with("vllm:")) {
        match real.get(name) {
            None => problems.push(format!(
                "{file}: the simulator serves {name}, vLLM does not"
            )),
            Some((real_ty, real_labels)) => {
                if real_ty != ty {
                    problems.push(format!(
                        "{file}: {name} is a {real_ty} in vLLM, a {ty} here"
                    ));
                }
                if real_labels != labels {
                    problems.push(format!(
                        "{file}: {name} has labels {real_labels:?} in vLLM, {labels:?} here"
                    ));
                }
            }
        }
    }
}

fn compare_body(file: &str, real: &str, sim: &str, problems: &mut Vec<String>) {
    if file.ends_with(".txt") {
        compare_metrics(file, real, sim, problems);
    } else if file.ends_with(".sse") {
        let (real_kinds, real_shapes) = sse_shapes(real, file);
        let (sim_kinds, sim_shapes) = sse_shapes(sim, &format!("{file} (simulator)"));
        if real_kinds != sim_kinds {
            problems.push(format!(
                "{file}: chunk kinds {real_kinds:?} from vLLM, {sim_kinds:?} here"
            ));
        }
        for (kind, shape) in &real_shapes {
            let empty = BTreeSet::new();
            let sim_shape = sim_shapes.get(kind).unwrap_or(&empty);
            problems.extend(differences(&format!("{file} [{kind}]"), shape, sim_shape));
        }
    } else if real.is_empty() || sim.is_empty() {
        if real.is_empty() != sim.is_empty() {
            problems.push(format!("{file}: one body is empty: {real:?} / {sim:?}"));
        }
    } else {
        let parse = |s: &str, side: &str| -> Value {
            serde_json::from_str(s)
                .unwrap_or_else(|e| panic!("{file} ({side}) is not JSON ({e}): {s}"))
        };
        let (real, sim) = (parse(real, "vLLM"), parse(sim, "simulator"));
        problems.extend(differences(file, &shape_of(&real), &shape_of(&sim)));
        if let Some(error) = real.get("error") {
            for key in ["type", "param", "code"] {
                if error[key] != sim["error"][key] {
                    problems.push(format!(
                        "{file}: error.{key} is {} in vLLM, {} here",
                        error[key], sim["error"][key]
                    ));
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_as_vllm_0_32_does() {
    let index: Value = serde_json::from_slice(
        &std::fs::read(captured().join("index.json")).expect("fixtures/vllm/captured/index.json"),
    )
    .expect("index.json is JSON");
    assert_eq!(index["engine"], "vllm");
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let plain = SimServer::start(vllm_cpu(false), addr).await.expect("sim");
    let details = SimServer::start(vllm_cpu(true), addr).await.expect("sim");
    let client = reqwest::Client::new();
    let answers = index["answers"].as_array().expect("answers");
    assert!(answers.len() >= 30, "index.json lists {}", answers.len());
    let mut problems = Vec::new();
    for entry in answers {
        let file = entry["file"].as_str().expect("file");
        let flags: Vec<&str> = entry["server_flags"]
            .as_array()
            .expect("server_flags")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let server = match flags.as_slice() {
            [] => &plain,
            ["--enable-prompt-tokens-details"] => &details,
            other => panic!("{file}: no simulated server for flags {other:?}"),
        };
        let sim = ask(&client, &server.url(), entry).await;
        let real = std::fs::read_to_string(captured().join(file)).expect("captured file");
        if entry["status"] != sim.status {
            problems.push(format!(
                "{file}: status {} from vLLM, {} here: {}",
                entry["status"], sim.status, sim.body
            ));
            continue;
        }
        if entry["content_type"] != sim.content_type.as_str() {
            problems.push(format!(
                "{file}: content type {} from vLLM, {:?} here",
                entry["content_type"], sim.content_type
            ));
        }
        compare_body(file, &real, &sim.body, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "the simulator differs from vLLM 0.32.0 in {} ways:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The comparison itself can fail: a key the engine sends and the simulator drops, a
/// type that changes, a metric label that goes missing are each found.
#[test]
fn the_comparison_finds_a_changed_key_type_or_label() {
    let real = shape_of(&serde_json::json!({"a": 1, "b": [{"c": null}]}));
    let sim = shape_of(&serde_json::json!({"a": 1.5, "b": [{"d": null}]}));
    let found = differences("x.json", &real, &sim);
    assert_eq!(found.len(), 4, "{found:?}");
    let mut problems = Vec::new();
    compare_metrics(
        "m.txt",
        "# TYPE vllm:x gauge\nvllm:x{a=\"1,2\",b=\"q\\\"\"} 1\n",
        "# TYPE vllm:x counter\nvllm:x{a=\"1\"} 1\n",
        &mut problems,
    );
    let about_x: Vec<_> = problems.iter().filter(|p| p.contains("vllm:x ")).collect();
    assert_eq!(about_x.len(), 2, "{problems:?}");
    let (kinds, _) = sse_shapes(
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n\
         data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n\
         data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":null}]}\n\n\
         data: {\"choices\":[{\"delta\":{\"content\":\"c\"},\"finish_reason\":null}]}\n\n\
         data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
         data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
        "t",
    );
    assert_eq!(kinds, ["role", "first", "token", "finish", "usage", "done"]);
}
