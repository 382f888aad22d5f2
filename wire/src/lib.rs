//! tokentrace-wire: bytes -> rows, and nothing else. SSE framing, event parsing and the
//! per-request chunk assembler (which also reports what a stream carried: token ids,
//! usage, reasoning), with no runtime and no I/O, so that the recorder (live) and
//! `tokentrace reparse` (offline, from `raw.sse.zst`) share one parser; and the
//! production traces a replay reads (`workload`), checked row by row before a request,
//! and the recorded conversations a conversation cell sends again (`sessions`).

pub mod assemble;
pub mod event;
pub mod refbench;
pub mod sessions;
pub mod sse;
pub mod workload;

pub use assemble::{Assembler, Counting, End, MAX_ERROR_BODY, Seen};
