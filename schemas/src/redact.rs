//! Keeping secrets off disk: strips credentials from URLs and redacts secret-bearing
//! arguments of launch commands before they go into `manifest.json`.

/// The replacement for a secret.
pub const REDACTED: &str = "<redacted>";

/// `url` without user-info (`user:pass@`) and with the values of secret-looking query
/// parameters (`key`, `token`, `secret`, `password`, `auth`, `signature`) redacted.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (path, query_and_fragment) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let mut out = String::new();
    if let Some(s) = scheme {
        out.push_str(s);
        out.push_str("://");
    }
    out.push_str(host);
    out.push_str(path);
    if let Some(qf) = query_and_fragment {
        let (query, fragment) = match qf.split_once('#') {
            Some((q, f)) => (q, Some(f)),
            None => (qf, None),
        };
        out.push('?');
        let parts: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if is_secret_name(k) => format!("{k}={REDACTED}"),
                _ => kv.to_string(),
            })
            .collect();
        out.push_str(&parts.join("&"));
        if let Some(f) = fragment {
            out.push('#');
            out.push_str(f);
        }
    }
    out
}

fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "auth",
        "signature",
        "credential",
    ]
    .iter()
    .any(|s| n.contains(s))
}

/// A launch command with secrets redacted: the value of any option whose name looks
/// secret (`--api-key X`, `--api-key=X`, `--hf-token X`), `NAME=value` environment
/// assignments with secret-looking names (`HF_TOKEN=...`), and `Bearer` tokens.
/// Whitespace between words is kept as given.
pub fn redact_command(cmd: &str) -> String {
    let mut out = String::with_capacity(cmd.len());
    let mut redact_next = false;
    let mut rest = cmd;
    while !rest.is_empty() {
        let ws = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..ws]);
        rest = &rest[ws..];
        if rest.is_empty() {
            break;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..end];
        rest = &rest[end..];
        if redact_next {
            // Keep closing quotes so the command still reads as it was written.
            let quotes = word.len() - word.trim_end_matches(['"', '\'']).len();
            out.push_str(REDACTED);
            out.push_str(&word[word.len() - quotes..]);
            redact_next = false;
            continue;
        }
        if word.eq_ignore_ascii_case("bearer") {
            out.push_str(word);
            redact_next = true;
            continue;
        }
        let bare = word.trim_start_matches(['"', '\'']);
        if let Some(opt) = bare.strip_prefix("--").or_else(|| bare.strip_prefix('-')) {
            match opt.split_once('=') {
                Some((name, _)) if is_secret_name(name) => {
                    let prefix_len = word.len() - opt.len() + name.len() + 1;
                    out.push_str(&word[..prefix_len]);
                    out.push_str(REDACTED);
                }
                None if is_secret_name(opt) => {
                    out.push_str(word);
                    redact_next = true;
                }
                _ => out.push_str(word),
            }
            continue;
        }
        match word.split_once('=') {
            Some((name, _))
                if !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && is_secret_name(name) =>
            {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
            }
            _ => out.push_str(word),
        }
    }
    out
}
