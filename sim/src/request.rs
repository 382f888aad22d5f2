//! What goes into the engine model and what comes out of a step: a request, the tokens it
//! produced in one step (an emission), the step itself, and why a sequence finished.
//! Shared by the engine, its metrics, the driver and the HTTP layer.

/// Why a sequence finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// End of sequence sampled (only when `ignore_eos` is false).
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// A request as the engine sees it.
#[derive(Debug, Clone)]
pub struct EngineRequest {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    /// The request's own `seed` (OpenAI's and vLLM's body field): when set, its answer
    /// depends on the profile, this seed and its prompt only, not on when it arrived.
    pub seed: Option<u64>,
}

/// Tokens a request produced in one step, visible at the step's end.
#[derive(Debug, Clone, PartialEq)]
pub struct Emission {
    pub request_id: u64,
    pub tokens: Vec<u32>,
    /// How many of `tokens` (from the front) belong to the reasoning phase.
    pub reasoning: usize,
    /// Completion tokens so far, this step included.
    pub completion_tokens: u32,
    pub prompt_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
    pub finish: Option<Finish>,
    /// When the step that produced it ends (engine seconds): its scheduled send time.
    pub at: f64,
    /// Seconds the request waited before it was admitted.
    pub queued: f64,
    /// The speculative step that produced it: (draft tokens proposed, accepted), as the
    /// engine's counters count them; `None` for a step that did not draft (a prefill's
    /// first token, or speculative decoding off).
    pub spec: Option<(u32, u32)>,
}

/// One engine step: how long it takes and what it emits at its end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub seconds: f64,
    pub emissions: Vec<Emission>,
    /// Sequences decoding and prefilling in this step.
    pub decoding: usize,
    pub prefilling: usize,
}
