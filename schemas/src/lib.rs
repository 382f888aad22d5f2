//! tokentrace trace format v1: the one definition of what a run folder holds, shared by
//! the recorder (which writes it) and the analyzer (which reads it). See `FORMAT.md`
//! next to this crate for every table, column, unit and null rule; [`protocol`] holds
//! what the two agree on beyond the tables (engine gauges, the client-lag series, typed
//! event details). [`manifest`] also holds the run's typed vocabulary (token counting,
//! tokenize shape, prefill mode, where a `--describe` key lives), parsed once at the edge.
//! Test data lives in the unpublished `tokentrace-testkit`.

pub mod build;
pub mod clock;
pub mod column;
pub mod digest;
pub mod error;
pub mod fsutil;
pub mod layout;
pub mod manifest;
pub mod protocol;
pub mod raw;
pub mod reader;
pub mod redact;
pub mod rng;
pub mod rx_stamp;
pub mod schedule;
pub mod table;
pub mod tables;
pub mod verify;
pub mod writer;

pub use error::{Error, Result};
// Re-exported for the `table!` and `str_enum!` macros and for crates that define tables.
pub use arrow_array;
pub use arrow_schema;
pub use layout::{CellKey, Phase, Rate};
pub use serde;
pub use table::Table;
pub use tables::{
    ChunkKind, ChunkRow, Chunks, EndReason, Endpoint, EventKind, EventRow, Events, MetricRow,
    MetricType, Metrics, Replay, ReplayRow, RequestRow, Requests, Role, TurnRow, Turns,
};

/// The trace format version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// The version of `manifest.json` and `cell.json` in a run that holds burst or rate
/// cells (FORMAT.md, "Cell kinds"). Its tables are unchanged (still
/// [`SCHEMA_VERSION`]); readers built before those cells refuse it as newer.
pub const CELL_KINDS_VERSION: u32 = 2;
/// The version of `manifest.json` and `cell.json` in a run that holds replay cells
/// (FORMAT.md, "Cell kinds"). Its tables are v1's plus the replay cells' own `replay`
/// table; readers built before replay refuse it as newer.
pub const REPLAY_VERSION: u32 = 3;
/// The version of `manifest.json` and `cell.json` in a run imported from another tool's
/// results (`tokentrace import`; FORMAT.md, "Imported runs"): its cells hold figures, no
/// tables, and readers built before refuse it as newer.
pub const IMPORTED_VERSION: u32 = 4;
/// The version of `manifest.json` and `cell.json` in a run that holds conversation cells
/// (FORMAT.md, "Cell kinds"): its tables are v1's plus the conversation cells' own
/// `turns` table; readers built before conversations refuse it as newer.
pub const CONVERSATION_VERSION: u32 = 5;
/// The newest JSON version this build reads.
pub const NEWEST_VERSION: u32 = CONVERSATION_VERSION;
/// This build's version.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
/// Parquet `created_by` of every file this build writes.
pub const CREATED_BY: &str = concat!("tokentrace ", env!("CARGO_PKG_VERSION"));
/// Parquet key-value metadata key holding the schema version.
pub const SCHEMA_VERSION_KEY: &str = "tokentrace.schema_version";
/// Parquet key-value metadata key holding the table name.
pub const TABLE_KEY: &str = "tokentrace.table";
