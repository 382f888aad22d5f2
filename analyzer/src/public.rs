//! What a scoring may show the public: host names, IP addresses and file paths are
//! dropped from every text of it (facts, target, launch command, cell reasons, evidence),
//! and each drop is listed by where it was and what it was, never by its value.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::Scoring;

/// What was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    HostName,
    IpAddress,
    Path,
}

impl Kind {
    fn words(self, n: usize) -> String {
        let (one, many) = match self {
            Kind::HostName => ("host name", "host names"),
            Kind::IpAddress => ("IP address", "IP addresses"),
            Kind::Path => ("path", "paths"),
        };
        format!("{n} {}", if n == 1 { one } else { many })
    }

    /// What stands in for a dropped value of this kind.
    fn mark(self) -> &'static str {
        match self {
            Kind::HostName => "[host]",
            Kind::IpAddress => "[ip]",
            Kind::Path => "…",
        }
    }
}

/// One place something was dropped from, and how many of each kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Where: `run.target`, `fact engine.model_path`, `cell decode 1024×4 reason`.
    pub place: String,
    pub counts: BTreeMap<Kind, usize>,
}

impl Dropped {
    /// "run.launch_command: 2 paths, 1 IP address".
    pub fn line(&self) -> String {
        let what: Vec<String> = self.counts.iter().map(|(k, n)| k.words(*n)).collect();
        format!("{}: {}", self.place, what.join(", "))
    }
}

/// Absolute paths that say nothing of a host: server routes (a route or below it),
/// kernel interfaces, and the files every Linux names its release in.
const ROUTES: [&str; 13] = [
    "/v1",
    "/metrics",
    "/version",
    "/props",
    "/health",
    "/tokenize",
    "/detokenize",
    "/slots",
    "/server_info",
    "/get_server_info",
    "/get_model_info",
    "/etc/os-release",
    "/usr/lib/os-release",
];

/// Kernel interfaces, the same on every Linux box: anything below them.
const KERNEL: [&str; 2] = ["/proc/", "/sys/"];

/// Whether option or variable `key` (`--host`, `--dist-init-addr`, `MASTER_ADDR`,
/// `VLLM_HOST_IP`) names a host.
fn host_key(key: &str) -> bool {
    let k = key.trim_start_matches('-').to_ascii_lowercase();
    k.contains("host") || k.contains("addr") || matches!(k.as_str(), "bind" | "listen")
}

/// `--name`, `-n`, `NAME`, `name`: what may stand before `=` in an option or a variable.
fn option_like(key: &str) -> bool {
    let name = key.trim_start_matches('-');
    key.len() - name.len() <= 2
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `s` as the public may see it: every text scrubbed of host names, IP addresses and
/// paths (a path keeps its last part: `/data/models/Llama-3` becomes `…/Llama-3`), and
/// the list of what was dropped, by place, in the order met. Object keys are scrubbed
/// as their values are (an engine's details are keyed by what it reported).
pub fn scrub(s: &Scoring) -> Result<(Scoring, Vec<Dropped>), serde_json::Error> {
    let mut value = serde_json::to_value(s)?;
    let mut dropped = Vec::new();
    walk(&mut value, &mut String::new(), &mut dropped);
    Ok((serde_json::from_value(value)?, dropped))
}

/// `text` scrubbed, with what was dropped recorded at `place`.
pub fn scrub_at(text: &str, place: &str, dropped: &mut Vec<Dropped>) -> String {
    let mut counts = BTreeMap::new();
    let clean = scrub_text(text, &mut counts);
    if !counts.is_empty() {
        dropped.push(Dropped {
            place: scrub_text(place, &mut BTreeMap::new()),
            counts,
        });
    }
    clean
}

/// A label for element `i` of an array: a fact by its key, a cell by its name.
fn element_label(v: &Value, i: usize) -> String {
    let text = |k: &str| v.get(k).and_then(Value::as_str);
    let number = |k: &str| v.get(k).and_then(Value::as_u64);
    if let Some(key) = text("key") {
        return key.to_string();
    }
    if let (Some(p), Some(c), Some(n)) = (text("phase"), number("context"), number("concurrency")) {
        return format!("{p} {c}×{n}");
    }
    i.to_string()
}

fn walk(v: &mut Value, place: &mut String, dropped: &mut Vec<Dropped>) {
    match v {
        Value::String(text) => {
            let host_fact = place.starts_with("run.facts[")
                && place.ends_with(".value")
                && place
                    .strip_prefix("run.facts[")
                    .and_then(|r| r.split_once(']'))
                    .is_some_and(|(key, _)| {
                        key == "host.name"
                            || key.contains("hostname")
                            || key.contains("addr")
                            || key.ends_with(".ip")
                    });
            if host_fact && !text.is_empty() {
                dropped.push(Dropped {
                    place: shown_place(place),
                    counts: BTreeMap::from([(Kind::HostName, 1)]),
                });
                *text = Kind::HostName.mark().to_string();
            } else {
                *text = scrub_at(text, &shown_place(place), dropped);
            }
        }
        Value::Array(items) => {
            let at = place.len();
            for (i, item) in items.iter_mut().enumerate() {
                place.push_str(&format!("[{}]", element_label(item, i)));
                walk(item, place, dropped);
                place.truncate(at);
            }
        }
        Value::Object(map) => {
            let at = place.len();
            let entries = std::mem::take(map);
            for (k, mut item) in entries {
                if !place.is_empty() {
                    place.push('.');
                }
                let key = scrub_at(&k, &format!("{} (a name)", shown_place(place)), dropped);
                place.push_str(&key);
                walk(&mut item, place, dropped);
                place.truncate(at);
                map.insert(key, item);
            }
        }
        _ => {}
    }
}

/// A JSON place as a reader names it: `run.facts[engine.model_path].value` is
/// `fact engine.model_path`, `cells[decode 1024×4].reason` is `cell decode 1024×4 reason`.
fn shown_place(place: &str) -> String {
    if let Some(rest) = place.strip_prefix("run.facts[")
        && let Some((key, field)) = rest.split_once(']')
    {
        let field = field.trim_start_matches('.');
        return if field == "value" {
            format!("fact {key}")
        } else {
            format!("fact {key} {field}")
        };
    }
    if let Some(rest) = place.strip_prefix("cells[")
        && let Some((cell, field)) = rest.split_once(']')
    {
        return format!("cell {cell} {}", field.trim_start_matches('.'))
            .trim_end()
            .to_string();
    }
    place.to_string()
}

/// Characters that end a token of text (kept as they are).
fn separator(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | ',' | ';' | '(' | ')' | '<' | '>' | '{' | '}' | '|' | '`'
        )
}

/// `text` with its host names, IP addresses and paths replaced, counting each.
pub fn scrub_text(text: &str, counts: &mut BTreeMap<Kind, usize>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut token = String::new();
    let mut host_next = false;
    let flush = |token: &mut String,
                 out: &mut String,
                 host_next: &mut bool,
                 counts: &mut BTreeMap<Kind, usize>| {
        if token.is_empty() {
            return;
        }
        let (clean, kind) = if std::mem::take(host_next) {
            let kind = if ip(token) {
                Kind::IpAddress
            } else {
                Kind::HostName
            };
            (kind.mark().to_string(), Some(kind))
        } else {
            scrub_token(token)
        };
        if let Some(k) = kind {
            *counts.entry(k).or_default() += 1;
        }
        // `--host gpu7`, and `--host="gpu7"`: the next token is the host.
        *host_next = token.starts_with('-')
            && option_like(token.trim_end_matches('='))
            && host_key(token.trim_end_matches('='));
        out.push_str(&clean);
        token.clear();
    };
    for c in text.chars() {
        if separator(c) {
            flush(&mut token, &mut out, &mut host_next, counts);
            out.push(c);
            // Whitespace and quotes keep an option's value coming; anything else ends it.
            if !(c.is_whitespace() || c == '"' || c == '\'') {
                host_next = false;
            }
        } else {
            token.push(c);
        }
    }
    flush(&mut token, &mut out, &mut host_next, counts);
    out
}

/// Whether `t` is an IP address, with or without a port or brackets.
fn ip(t: &str) -> bool {
    let t = t.trim_end_matches(['.', ':']);
    t.parse::<IpAddr>().is_ok()
        || t.parse::<SocketAddr>().is_ok()
        || t.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok()
}

/// Endings of file names, which a host name never has.
const FILE_ENDINGS: [&str; 22] = [
    "json",
    "jsonl",
    "parquet",
    "csv",
    "zst",
    "gz",
    "tar",
    "zip",
    "gguf",
    "safetensors",
    "bin",
    "pt",
    "txt",
    "log",
    "toml",
    "yaml",
    "yml",
    "py",
    "sh",
    "html",
    "md",
    "sse",
];

/// A name like `gpu-node-7.cluster.internal`: three or more labels of letters, digits
/// and hyphens, the last all letters and no file's ending (so `0.32.0`, `model.gguf`
/// and `results-0.4.18.json` are not).
fn host_name(t: &str) -> bool {
    let labels: Vec<&str> = t.split('.').collect();
    labels.len() >= 3
        && labels
            .last()
            .is_some_and(|l| !FILE_ENDINGS.contains(&l.to_ascii_lowercase().as_str()))
        && labels
            .iter()
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        && labels
            .last()
            .is_some_and(|l| l.len() >= 2 && l.chars().all(|c| c.is_ascii_alphabetic()))
        && labels
            .iter()
            .any(|l| l.chars().any(|c| c.is_ascii_alphabetic()))
}

/// An absolute path of the host (not a server route, not a kernel interface): two or
/// more parts (`/data/x`; a lone `/script` is markup's or a route's more often than a
/// folder worth hiding), a home-relative one, a Windows or a network one.
fn path(t: &str) -> bool {
    let route = |r: &&str| t == *r || t.strip_prefix(*r).is_some_and(|rest| rest.starts_with('/'));
    (t.starts_with('/')
        && t.split('/').filter(|p| !p.is_empty()).count() >= 2
        && !ROUTES.iter().any(route)
        && !KERNEL.iter().any(|k| t.starts_with(k)))
        || t.starts_with("~/")
        || t.starts_with("\\\\")
        || (t.len() > 2 && t.as_bytes()[1] == b':' && matches!(t.as_bytes()[2], b'\\' | b'/'))
}

/// A path's stand-in: `…/` and its last part.
fn path_mark(t: &str) -> String {
    let last = t
        .trim_end_matches(['/', '\\'])
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default();
    format!("{}/{last}", Kind::Path.mark())
}

/// A host as written in an address (`gpu7.corp:8000`, `[::1]:80`, `alice@10.0.0.1`):
/// its kind, when it is an IP address or a host name.
fn host_kind(authority: &str) -> Option<Kind> {
    let host = authority.rsplit('@').next().unwrap_or(authority);
    if ip(host) {
        return Some(Kind::IpAddress);
    }
    let bare = host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    if ip(bare) {
        Some(Kind::IpAddress)
    } else if host_name(bare) {
        Some(Kind::HostName)
    } else {
        None
    }
}

/// One token scrubbed, and what it was when something was dropped.
fn scrub_token(t: &str) -> (String, Option<Kind>) {
    // scheme://[user@]host[:port]/route?query: the authority goes, the route stays, the
    // query's values are scrubbed; whatever stands before the scheme (`--url=`) stays.
    if let Some(at) = t.find("://") {
        let scheme_start = t[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
            .map_or(0, |i| i + 1);
        let (before, scheme) = t[..at].split_at(scheme_start);
        let rest = &t[at + 3..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, route) = rest.split_at(end);
        let (route, query) = route.split_at(route.find('?').unwrap_or(route.len()));
        let mut kind = None;
        let mut query_out = String::new();
        for (i, part) in query.trim_start_matches('?').split('&').enumerate() {
            if query.is_empty() {
                break;
            }
            query_out.push(if i == 0 { '?' } else { '&' });
            let (clean, k) = scrub_token(part);
            kind = kind.or(k);
            query_out.push_str(&clean);
        }
        if authority.is_empty() {
            return if path(route) {
                (
                    format!("{before}{scheme}://{}{query_out}", path_mark(route)),
                    Some(Kind::Path),
                )
            } else {
                (t.to_string(), kind)
            };
        }
        let k = host_kind(authority).unwrap_or(Kind::HostName);
        return (
            format!("{before}{scheme}://{}{route}{query_out}", k.mark()),
            Some(k),
        );
    }
    let trimmed = t.trim_end_matches(['.', ':', ']', '[']);
    if ip(t) || ip(trimmed) {
        return (Kind::IpAddress.mark().to_string(), Some(Kind::IpAddress));
    }
    if path(t) {
        return (path_mark(t), Some(Kind::Path));
    }
    // An address without a scheme: `gpu7.corp:8000`, `10.0.0.1:8000/v1`, `10.0.0.0/8`,
    // `alice@gpu7.corp`; what follows the first `/` stays.
    let (head, tail) = trimmed.split_at(trimmed.find('/').unwrap_or(trimmed.len()));
    if let Some(k) = host_kind(head) {
        return (
            format!("{}{tail}{}", k.mark(), &t[trimmed.len()..]),
            Some(k),
        );
    }
    // `--model=/data/x`, `HOST=10.0.0.1`: the value after an option's or a variable's `=`.
    if let Some((key, value)) = t.split_once('=')
        && option_like(key)
        && !value.is_empty()
    {
        if host_key(key) {
            let kind = if ip(value) {
                Kind::IpAddress
            } else {
                Kind::HostName
            };
            return (format!("{key}={}", kind.mark()), Some(kind));
        }
        let (clean, kind) = scrub_token(value);
        return (format!("{key}={clean}"), kind);
    }
    (t.to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubbed(text: &str) -> (String, BTreeMap<Kind, usize>) {
        let mut counts = BTreeMap::new();
        (scrub_text(text, &mut counts), counts)
    }

    #[test]
    fn a_launch_command_keeps_its_options_and_loses_where_it_ran() {
        let (text, counts) = scrubbed(
            "vllm serve /home/alice/models/Llama-3 --host 10.1.2.3 --port 8000 \
             --download-dir=/mnt/cache --served-model-name org/Llama-3 -tp 4",
        );
        assert_eq!(
            text,
            "vllm serve …/Llama-3 --host [ip] --port 8000 --download-dir=…/cache \
             --served-model-name org/Llama-3 -tp 4"
        );
        assert_eq!(counts[&Kind::Path], 2);
        assert_eq!(counts[&Kind::IpAddress], 1);
    }

    #[test]
    fn urls_lose_their_authority_and_keep_their_route() {
        assert_eq!(
            scrubbed("http://gpu7.corp.example:8000/v1").0,
            "http://[host]/v1"
        );
        assert_eq!(scrubbed("http://[fe80::1]:8000").0, "http://[ip]");
        assert_eq!(scrubbed("https://user:pw@10.0.0.1/x").0, "https://[ip]/x");
        assert_eq!(scrubbed("file:///data/runs/a").0, "file://…/a");
    }

    #[test]
    fn host_names_ips_and_paths_in_prose_are_found() {
        let (text, counts) = scrubbed(
            "connect to node-3.cluster.internal failed (::1, 192.168.0.7:8000); see '/var/log/x.log'.",
        );
        assert_eq!(
            text,
            "connect to [host] failed ([ip], [ip]); see '…/x.log'."
        );
        assert_eq!(counts.values().sum::<usize>(), 4);
        assert_eq!(scrubbed("--hostname=box1").0, "--hostname=[host]");
        assert_eq!(scrubbed("--host box1 --port 1").0, "--host [host] --port 1");
    }

    #[test]
    fn addresses_without_a_scheme_queries_and_cell_paths_are_found() {
        for (text, want) in [
            ("gpu-node-7.cluster.internal:8000", "[host]"),
            ("10.0.0.1:8000/v1", "[ip]/v1"),
            ("10.0.0.0/8", "[ip]/8"),
            ("alice@gpu7.corp.example", "[host]"),
            (
                "--dist-init-addr node1.corp.example:5000",
                "--dist-init-addr [host]",
            ),
            ("--master-addr=gpu7", "--master-addr=[host]"),
            (
                "MASTER_ADDR=gpu7 VLLM_HOST_IP=10.1.1.1",
                "MASTER_ADDR=[host] VLLM_HOST_IP=[ip]",
            ),
            ("--host=\"gpu7\"", "--host=\"[host]\""),
            (
                "https://myco.openai.azure.com/openai/completions?api-version=2024-06-01",
                "https://[host]/openai/completions?api-version=2024-06-01",
            ),
            (
                "http://h/x?next=http://10.0.0.2/y",
                "http://[host]/x?next=http://[ip]/y",
            ),
            (
                "/home/alice/runs/x/cells/phase=decode/context=1024/concurrency=4: cell is incomplete",
                "…/concurrency=4: cell is incomplete",
            ),
            ("/dev/shm/models/x", "…/x"),
            ("/health-data/alice/x", "…/x"),
            ("\\\\server\\share\\models", "…/models"),
        ] {
            assert_eq!(scrubbed(text).0, want, "{text}");
        }
    }

    #[test]
    fn a_scoring_loses_its_hosts_in_values_keys_and_places() {
        let mut v = serde_json::json!({
            "run": {
                "target": "http://gpu7.corp.example:8000",
                "engine_details": {"gpu7.corp.example": "up"},
                "facts": [
                    {"key": "host.name", "value": "gpu7", "source": "--describe"},
                    {"key": "host.cpu", "value": "AMD EPYC 9654", "source": "/proc/cpuinfo"}
                ]
            }
        });
        let mut dropped = Vec::new();
        walk(&mut v, &mut String::new(), &mut dropped);
        let text = v.to_string();
        assert!(!text.contains("gpu7"), "{text}");
        assert!(text.contains("AMD EPYC 9654"), "{text}");
        let lines: Vec<String> = dropped.iter().map(Dropped::line).collect();
        assert!(lines.iter().all(|l| !l.contains("gpu7")), "{lines:?}");
        assert_eq!(lines.len(), 3, "{lines:?}");
    }

    #[test]
    fn what_is_not_a_host_an_ip_or_a_path_stays() {
        for text in [
            "vLLM 0.32.0",
            "2026-12-06T09:05:19.123456789Z",
            "deepseek-ai/DeepSeek-V4-Flash",
            "Qwen2.5-7B-Instruct model.gguf",
            "vllm:num_requests_running",
            "vLLM /version, metrics vllm:cache_config_info, /proc/meminfo",
            "/v1/chat/completions",
            "4× NVIDIA H200",
            "std::vector<int>",
            "results-0.4.18.json, /script, /etc/os-release",
        ] {
            let (out, counts) = scrubbed(text);
            assert_eq!(out, text);
            assert!(counts.is_empty(), "{text}: {counts:?}");
        }
    }
}
