//! tokentrace-wire: bytes -> rows, and nothing else. SSE framing, event parsing and the
//! per-request chunk assembler, with no runtime and no I/O, so that the recorder (live)
//! and `tokentrace reparse` (offline, from `raw.sse.zst`) share one parser.

pub mod assemble;
pub mod event;
pub mod sse;

pub use assemble::{Assembler, End, MAX_ERROR_BODY, TokenCounting};
