//! The conversation cell: N live multi-turn sessions for a fixed window. Each turn sends
//! the whole history (the shared system prompt, every earlier message and every answer
//! the server gave) plus a new message, waits for the answer and a think time; a
//! session that has sent its turns is replaced by a new one. Each turn gets a `turns` row.

use serde_json::{Value, json};
use tokentrace_schemas::manifest::{ConversationConfig, Think};
use tokentrace_schemas::rng::{Rng, mix};
use tokentrace_schemas::tables::{EndReason, TurnRow};

use super::*;
use crate::send::request::stream_body;

/// What a conversation cell's sessions are made of.
#[derive(Debug)]
pub struct ConversationPlan {
    pub config: ConversationConfig,
    pub model: String,
    pub endpoint: Endpoint,
    /// The new message of every turn, `config.message_tokens` tokens by the server's
    /// count; each turn sends it reworded (its words reordered) by session and turn.
    pub message: String,
    /// The system prompt every session starts with; `None` without one.
    pub system: Option<String>,
    /// The tool-result block every turn after the first sends instead of a message,
    /// `config.tool_tokens` tokens, reworded as the message is; `None`: messages only.
    pub tool: Option<String>,
    /// Recorded sessions sent again, each once, in order (`config.from`); `None`:
    /// sessions of the message above.
    pub scripts: Option<Arc<Vec<tokentrace_wire::sessions::Script>>>,
}

/// Who said a piece of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaker {
    System,
    User,
    Assistant,
    Tool,
}

impl Speaker {
    fn role(self) -> &'static str {
        match self {
            Speaker::System => "system",
            Speaker::User => "user",
            Speaker::Assistant => "assistant",
            Speaker::Tool => "tool",
        }
    }
}

/// Goes before each message of a completions history but the first (a chat history is
/// messages). An answer follows its message as it was generated, with nothing between,
/// so that the prompt it continued and the answer are one token sequence again, as the
/// engine's prefix cache holds them.
pub const COMPLETIONS_JOIN: &str = "\n";

/// A completions history as one text: messages joined by [`COMPLETIONS_JOIN`], each
/// answer right after the message it answered.
fn completions_text(history: &[(Speaker, String)]) -> String {
    let mut text = String::new();
    for (i, (who, piece)) in history.iter().enumerate() {
        if i > 0 && *who != Speaker::Assistant {
            text.push_str(COMPLETIONS_JOIN);
        }
        text.push_str(piece);
    }
    text
}

impl ConversationPlan {
    /// A session's number of turns, drawn from its number.
    fn turns(&self, session: i64) -> u32 {
        let c = &self.config;
        let span = u64::from(c.turns_max.saturating_sub(c.turns_min)) + 1;
        let mut rng = Rng::new(mix(
            c.seed ^ session.unsigned_abs().wrapping_mul(0xA076_1D64)
        ));
        c.turns_min + u32::try_from(rng.below(span)).unwrap_or(0)
    }

    /// The think time before turn `turn` (from 2) of `session`.
    fn think(&self, session: i64, turn: u32) -> Duration {
        let c = &self.config;
        let mean = Duration::from_nanos(u64::try_from(c.think_ns).unwrap_or(0));
        match c.think {
            Think::Fixed => mean,
            Think::Exponential => {
                let mut rng = Rng::new(self.request_seed(session, turn) ^ 0x0074_6869_6E6B);
                // 1 − u is in (0, 1]: its logarithm is finite.
                mean.mul_f64(-(1.0 - rng.unit()).ln())
            }
        }
    }

    /// The `seed` sent with turn `turn` of `session`: the same conversation gets the
    /// same answers from an engine that honours it.
    fn request_seed(&self, session: i64, turn: u32) -> u64 {
        mix(self.config.seed ^ mix(session.unsigned_abs() << 16 | u64::from(turn))) >> 33
    }

    /// The recorded session `session` (from 1) sends again; `None` when the cell has
    /// none, or when every one has been sent.
    fn script(&self, session: i64) -> Option<&tokentrace_wire::sessions::Script> {
        let i = usize::try_from(session.checked_sub(1)?).ok()?;
        self.scripts.as_ref()?.get(i)
    }

    /// The new message of turn `turn` of `session` (a tool result after the first turn,
    /// when the cell has one), who sends it, and its tokens.
    fn message(&self, session: i64, turn: u32) -> (Speaker, String, u32) {
        let key = session.unsigned_abs() << 16 | u64::from(turn);
        let (who, text, tokens) = match &self.tool {
            Some(tool) if turn > 1 => (Speaker::Tool, tool, self.config.tool_tokens),
            _ => (Speaker::User, &self.message, self.config.message_tokens),
        };
        let text = crate::send::prompt::reworded(text, key).unwrap_or_else(|| text.clone());
        (who, text, tokens)
    }

    /// The request body of a turn whose history (new message included) is `history`.
    fn body(&self, history: &[(Speaker, String)], seed: u64) -> bytes::Bytes {
        let c = &self.config;
        let prompt = match self.endpoint {
            Endpoint::Completions => Value::String(completions_text(history)),
            Endpoint::Chat => Value::String(String::new()),
        };
        let mut b = stream_body(&self.model, self.endpoint, &prompt, c.answer_tokens);
        if self.endpoint == Endpoint::Chat {
            b["messages"] = history
                .iter()
                .map(|(who, t)| json!({"role": who.role(), "content": t}))
                .collect();
        }
        b["ignore_eos"] = json!(!c.stop_at_eos);
        b["seed"] = json!(seed);
        b.to_string().into()
    }
}

/// Records a conversation cell: N sessions through the window, cancel, drain.
pub async fn record_conversation(
    ctx: &RunCtx,
    plan: &CellPlan,
    run: &Path,
) -> Result<Recorded, CellError> {
    debug_assert_eq!(plan.key.phase, Phase::Conversation);
    let Some(talk) = plan.conversation.clone() else {
        return Err(CellError::Writer(
            "a conversation cell was planned without its sessions".to_string(),
        ));
    };
    let (cell, handle) = start(ctx, plan, run).await?;
    let n = plan.key.concurrency.max(1);
    let background = Background::start(&cell);
    cell.scrape_once().await;
    cell.event(EventKind::WindowOpen, None, None).await;
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let sessions = Arc::new(AtomicI64::new(0));
    let mut workers = Vec::new();
    for place in 0..n {
        let worker = Talker {
            cell: cell.clone(),
            talk: talk.clone(),
            place: i32::try_from(place).unwrap_or(i32::MAX),
            sessions: sessions.clone(),
            cancel: cancel_rx.clone(),
        };
        workers.push(tokio::spawn(worker.run()));
    }
    tokio::select! {
        () = tokio::time::sleep(plan.window) => {}
        () = cell.gave_up.notified() => {}
    }
    cell.event(EventKind::WindowClose, None, None).await;
    let _ = cancel_tx.send(true);
    for w in workers {
        let _ = w.await;
    }
    settle(cell, handle, background).await
}

/// One place of a conversation cell: runs sessions one after another until the window
/// closes.
struct Talker {
    cell: Arc<Cell>,
    talk: Arc<ConversationPlan>,
    place: i32,
    sessions: Arc<AtomicI64>,
    cancel: watch::Receiver<bool>,
}

/// How a session's turn ended, for the session.
enum Next {
    /// The answer came: go on with it in the history.
    Answered { prompt: i32, completion: i32 },
    /// The session cannot go on (the turn failed): start a new one.
    Broken,
    /// The window closed or the cell gave up: stop.
    Stop,
}

impl Talker {
    async fn run(mut self) {
        let mut lane = Lane::new(self.cell.ctx.transport.clone());
        while !*self.cancel.borrow() {
            let session = self.sessions.fetch_add(1, Ordering::Relaxed) + 1;
            if !self.session(&mut lane, session).await {
                break;
            }
        }
    }

    /// Runs one session; false when the cell is over (or its recorded sessions are all
    /// sent).
    async fn session(&mut self, lane: &mut Lane, session: i64) -> bool {
        let talk = self.talk.clone();
        let script = talk.script(session);
        if talk.scripts.is_some() && script.is_none() {
            return false;
        }
        let turns = script.map_or_else(
            || talk.turns(session),
            |s| u32::try_from(s.user.len()).unwrap_or(u32::MAX),
        );
        let mut history: Vec<(Speaker, String)> = Vec::new();
        let mut history_tokens = 0i32;
        if let Some(system) = script.and_then(|s| s.system.clone()) {
            // Not counted: the server's usage of turn 1 says what it came to.
            history.push((Speaker::System, system));
        } else if let Some(system) = &talk.system {
            history.push((Speaker::System, system.clone()));
            history_tokens = i32::try_from(talk.config.system_tokens).unwrap_or(i32::MAX);
        }
        let mut answered_at: Option<i64> = None;
        for turn in 1..=turns {
            let think_ns = match answered_at {
                Some(at) => {
                    if !self.wait(talk.think(session, turn)).await {
                        return false;
                    }
                    Some(self.cell.ctx.clock.now_ns() - at)
                }
                None => None,
            };
            let (who, text, tokens) = match script {
                Some(s) => {
                    let i = usize::try_from(turn - 1).unwrap_or(usize::MAX);
                    let text = s.user.get(i).cloned().unwrap_or_default();
                    (Speaker::User, text, None)
                }
                None => {
                    let (who, text, tokens) = talk.message(session, turn);
                    (who, text, Some(tokens))
                }
            };
            history.push((who, text));
            let row = TurnRow {
                request_id: 0,
                session,
                turn: i32::try_from(turn).unwrap_or(i32::MAX),
                turns: i32::try_from(turns).unwrap_or(i32::MAX),
                message_tokens: tokens.map(|t| i32::try_from(t).unwrap_or(i32::MAX)),
                history_tokens,
                think_ns,
            };
            let (next, text) = self.turn(lane, row, &history, session, turn).await;
            match next {
                Next::Answered { prompt, completion } => {
                    history.push((Speaker::Assistant, text));
                    history_tokens = prompt.saturating_add(completion);
                    answered_at = Some(self.cell.ctx.clock.now_ns());
                }
                Next::Broken => return true,
                Next::Stop => return false,
            }
        }
        true
    }

    /// Sends one turn and writes its `turns` row; returns how it went and the answer.
    async fn turn(
        &mut self,
        lane: &mut Lane,
        mut row: TurnRow,
        history: &[(Speaker, String)],
        session: i64,
        turn: u32,
    ) -> (Next, String) {
        let cell = &self.cell;
        let talk = &self.talk;
        let body = talk.body(history, talk.request_seed(session, turn));
        let role = Role::Measured;
        let mut spec = cell.spec(
            Some(self.place),
            role,
            &body,
            i32::try_from(talk.config.answer_tokens).unwrap_or(i32::MAX),
        );
        spec.prompt_tokens_requested = row
            .history_tokens
            .saturating_add(row.message_tokens.unwrap_or(0));
        row.request_id = spec.request_id;
        let mut stop = self.cancel.clone();
        if !cell.paced(&mut stop).await || *self.cancel.borrow() {
            return (Next::Stop, String::new());
        }
        let ran = cell.run(lane, &spec, self.cancel.clone(), None).await;
        let _ = cell.tx.send(Record::Turn(row)).await;
        if !cell.account(&ran) {
            return (Next::Stop, String::new());
        }
        let next = match ran.end_reason {
            EndReason::Cancelled => Next::Stop,
            EndReason::FinishedStop | EndReason::FinishedLength | EndReason::FinishedOther => {
                Next::Answered {
                    prompt: ran.prompt_tokens.unwrap_or(spec.prompt_tokens_requested),
                    completion: ran.completion_tokens.unwrap_or(0),
                }
            }
            _ => Next::Broken,
        };
        (next, ran.text.unwrap_or_default())
    }

    /// Waits `think`; false when the window closed first.
    async fn wait(&mut self, think: Duration) -> bool {
        let mut stop = self.cancel.clone();
        tokio::select! {
            () = tokio::time::sleep(think) => !*self.cancel.borrow(),
            _ = stop.wait_for(|s| *s) => false,
        }
    }
}
