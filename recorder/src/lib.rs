//! tokentrace recorder: drives an inference server through the context × concurrency
//! matrix and writes every chunk, request, metric sample and raw byte to a run folder.
//! Its dependency tree holds the format, wire and score (live hints) crates, tokio,
//! reqwest and ratatui: no polars, no simulator, no axum. It is what the GPU box builds.
//!
//! The map, in the order a run flows: [`run`] (the session's setup, the cell loop, the
//! heap readied), [`send`] (requests, the measured connection, one streamed request
//! recorded, prompts, pacing, exact waits, replayed workloads), [`observe`] (the probe,
//! scrapes and the gauges they feed, GPUs, facts, the host), [`store`] (the writer queue,
//! one cell recorded and committed, object storage), [`view`] (screen, live and plain
//! views, `watch`, the screen's keys), [`cli`].

pub mod cli;
pub mod observe;
pub mod run;
pub mod send;
pub mod store;
pub mod view;

pub use tokentrace_schemas as schemas;
pub use tokentrace_wire as wire;
