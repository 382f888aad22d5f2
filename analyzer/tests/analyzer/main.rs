//! Integration tests of the analyzer, one binary:
//! - `figures`: scored figures agree with the same figures computed row by row;
//! - `verdicts`: each verdict fires on the cell built to trigger it, with its evidence;
//! - `loops`: long cycles, a cycle beyond the cap, Unicode, chunking;
//! - `read`: the product's cell-by-cell read and scoring agree with the oracle's;
//! - `report`: the Markdown report's wording;
//! - `fuzz`: property tests: any rules text loads or names its file;
//! - `rules`: built-in rule sets, `extends`, and bad rule files;
//! - `schema`: real JSON output validates against the committed JSON Schema;
//! - `interop`: polars reads every table arrow-rs wrote, with the Hive columns, and
//!   incomplete cells are reported rather than read;
//! - `oracle` (no tests of its own): a whole run loaded at once with polars, what
//!   `read` holds the product's scoring to.

mod figures;
mod fuzz;
mod interop;
mod loops;
mod oracle;
mod read;
mod report;
mod rules;
mod schema;
mod verdicts;
