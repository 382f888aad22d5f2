//! tokentrace recorder: drives an inference server through the context × concurrency
//! matrix and writes every chunk, request, metric sample and raw byte to a run folder.
//! Its dependency tree holds the format, wire and score (live hints) crates, tokio,
//! reqwest and ratatui: no polars, no simulator, no axum. It is what the GPU box builds.
//!
//! The map, leaves first: [`request`] (a request before it is sent), [`control`] (small
//! JSON calls through reqwest), [`queue`] (the bounded queue to a cell's writer and what
//! goes on it), [`http`] (the measured connection), [`client`] (one streamed request,
//! recorded), [`prompt`] (prompts of an exact length), [`probe`] (what the server is),
//! [`scrape`], [`gauges`] (what the live view shows of them), [`gpu`], [`host`],
//! [`facts`], [`heap`] (the process's heap and runtime, readied), [`pace`], [`replay`]
//! (workloads from files), [`alarm`] (exact waits), [`cell`] (one cell), [`store`]
//! (object storage), [`session`] (a run's setup: folder, probe, facts, manifest,
//! settings kept), [`runner`] (the cell loop), [`steer`] (the screen's keys), [`view`]
//! (screen, live and plain views, and `watch`), [`cli`].

pub mod alarm;
pub mod cell;
pub mod cli;
pub mod client;
pub mod control;
pub mod facts;
pub mod gauges;
pub mod gpu;
pub mod heap;
pub mod host;
pub mod http;
pub mod pace;
pub mod probe;
pub mod prompt;
pub mod queue;
pub mod replay;
pub mod request;
pub mod runner;
pub mod scrape;
pub mod session;
pub mod steer;
pub mod store;
pub mod view;

pub use tokentrace_schemas as schemas;
pub use tokentrace_wire as wire;
