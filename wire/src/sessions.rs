//! Recorded conversations a conversation cell sends again (`record --conversations-from`):
//! a JSON array or JSON lines of sessions, ShareGPT's (`conversations` of `from` /
//! `value`) or OpenAI's (`messages` of `role` / `content`). Only the user's side is kept:
//! the answers are the server's own, generated live.

use serde_json::Value;

/// One recorded session: its system prompt, if it opened with one, and its user
/// messages in order (a tool result counts as one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// Where it is in the file: the 1-based line of a JSON-lines file, or the 1-based
    /// place in a JSON array.
    pub at: usize,
    pub system: Option<String>,
    pub user: Vec<String>,
}

/// Why a sessions file cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionsError {
    #[error("{what} {at}: {message}")]
    Bad {
        what: &'static str,
        at: usize,
        message: String,
    },
    #[error("no session with a user message")]
    Empty,
}

/// The sessions of `bytes`, each with at least one user message (others are left out,
/// and counted in the second value).
pub fn parse(bytes: &[u8]) -> Result<(Vec<Script>, usize), SessionsError> {
    let text = std::str::from_utf8(bytes).map_err(|e| SessionsError::Bad {
        what: "byte",
        at: e.valid_up_to() + 1,
        message: "not UTF-8".to_string(),
    })?;
    let items: Vec<(&'static str, usize, Value)> = if text.trim_start().starts_with('[') {
        let all: Vec<Value> = serde_json::from_str(text).map_err(|e| SessionsError::Bad {
            what: "line",
            at: e.line(),
            message: e.to_string(),
        })?;
        all.into_iter()
            .enumerate()
            .map(|(i, v)| ("session", i + 1, v))
            .collect()
    } else {
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v = serde_json::from_str(line).map_err(|e| SessionsError::Bad {
                what: "line",
                at: i + 1,
                message: e.to_string(),
            })?;
            out.push(("line", i + 1, v));
        }
        out
    };
    let mut scripts = Vec::new();
    let mut empty = 0;
    for (what, at, v) in items {
        let script = script(&v, at).map_err(|message| SessionsError::Bad { what, at, message })?;
        if script.user.is_empty() {
            empty += 1;
        } else {
            scripts.push(script);
        }
    }
    if scripts.is_empty() {
        return Err(SessionsError::Empty);
    }
    Ok((scripts, empty))
}

/// One session's script from its JSON object.
fn script(v: &Value, at: usize) -> Result<Script, String> {
    let (list, role_key, text_key) = if let Some(l) = v.get("conversations") {
        (l, "from", "value")
    } else if let Some(l) = v.get("messages") {
        (l, "role", "content")
    } else {
        return Err(
            "a session needs `conversations` (ShareGPT) or `messages` (OpenAI)".to_string(),
        );
    };
    let list = list.as_array().ok_or_else(|| {
        format!(
            "`{}` is not a list",
            if role_key == "from" {
                "conversations"
            } else {
                "messages"
            }
        )
    })?;
    let mut out = Script {
        at,
        system: None,
        user: Vec::new(),
    };
    for (i, m) in list.iter().enumerate() {
        let role = m[role_key]
            .as_str()
            .ok_or_else(|| format!("message {}: no `{role_key}`", i + 1))?;
        let text = m[text_key]
            .as_str()
            .ok_or_else(|| format!("message {}: `{text_key}` is not text", i + 1))?;
        match role {
            "system" if i == 0 => out.system = Some(text.to_string()),
            "human" | "user" | "tool" => out.user.push(text.to_string()),
            // Answers are generated live; a later system message is left out.
            "gpt" | "assistant" | "chatgpt" | "bing" | "bard" | "model" | "system" => {}
            other => return Err(format!("message {}: unknown `{role_key}` {other:?}", i + 1)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharegpt_arrays_and_openai_lines_keep_the_users_side() {
        let sharegpt = br#"[
 {"id": "a", "conversations": [{"from": "system", "value": "Be brief."},
   {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
   {"from": "human", "value": "Why?"}]},
 {"id": "b", "conversations": [{"from": "gpt", "value": "only an answer"}]}
]"#;
        let (scripts, empty) = parse(sharegpt).expect("sharegpt");
        assert_eq!(empty, 1);
        assert_eq!(
            scripts,
            vec![Script {
                at: 1,
                system: Some("Be brief.".to_string()),
                user: vec!["Hi".to_string(), "Why?".to_string()],
            }]
        );
        let lines = b"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n\n{\"messages\": [{\"role\": \"user\", \"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"c\"}, {\"role\": \"tool\", \"content\": \"d\"}]}\n";
        let (scripts, _) = parse(lines).expect("jsonl");
        assert_eq!(scripts.len(), 2);
        assert_eq!(
            (scripts[1].at, scripts[1].user.clone()),
            (3, vec!["b".to_string(), "d".to_string()])
        );
    }

    #[test]
    fn bad_sessions_are_named_by_line() {
        let err = parse(b"{\"messages\": []}\n{\"turns\": 3}\n").expect_err("bad");
        assert_eq!(
            err.to_string(),
            "line 2: a session needs `conversations` (ShareGPT) or `messages` (OpenAI)"
        );
        let err = parse(b"[{\"messages\": [{\"role\": \"judge\", \"content\": \"x\"}]}]")
            .expect_err("role");
        assert!(
            err.to_string()
                .starts_with("session 1: message 1: unknown `role`"),
            "{err}"
        );
        assert_eq!(
            parse(b"{\"messages\": []}").expect_err("empty"),
            SessionsError::Empty
        );
        assert!(
            parse(b"{not json")
                .expect_err("json")
                .to_string()
                .starts_with("line 1:")
        );
    }
}
