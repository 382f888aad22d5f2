//! Integration tests of the analyzer, one binary:
//! - `interop`: polars reads every table arrow-rs wrote, with the Hive columns, and
//!   incomplete cells are reported rather than read.

mod interop;
