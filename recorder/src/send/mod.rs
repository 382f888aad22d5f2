//! Sending: a request before it is sent (request), small JSON calls through reqwest
//! (control), the measured HTTP/1.1 connection (http), one streamed request recorded
//! (client), prompts of an exact length (prompt), pacing under refusals (pace),
//! exact waits (alarm), workloads from runs and traces (replay).

pub mod alarm;
pub mod client;
pub mod control;
pub mod http;
pub mod pace;
pub mod prompt;
pub mod replay;
pub mod request;
