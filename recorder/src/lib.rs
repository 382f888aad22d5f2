//! tokentrace recorder: drives an inference server through the context × concurrency
//! matrix and writes every chunk, request, metric sample and raw byte to a run folder.
//! Its dependency tree holds the format and wire crates, tokio and reqwest: no polars,
//! no simulator, no axum. It is what the GPU box builds.

pub mod cell;
pub mod cli;
pub mod client;
pub mod facts;
pub mod gpu;
pub mod host;
pub mod http;
pub mod pace;
pub mod probe;
pub mod prompt;
pub mod queue;
pub mod replay;
pub mod runner;
pub mod scrape;
pub mod store;

pub use tokentrace_schemas as schemas;
pub use tokentrace_wire as wire;
