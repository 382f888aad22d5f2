//! tokentrace scoring without polars: the rule sets, the per-cell scorer (one function
//! per verdict rule and warning), the loop finder and the scoring contract, over plain
//! per-cell data ([`data::Loaded`]). The analyzer, the recorder's live view and `watch`
//! build that data one way: a committed cell folder read back by [`read`], its rows
//! reduced by [`fold`].

pub mod column;
pub mod contract;
pub mod data;
pub mod error;
pub mod figures;
pub mod fold;
pub mod imported;
pub mod judge;
pub mod live;
pub mod loops;
pub mod marks;
pub mod numbers;
pub mod presets;
pub mod read;
pub mod rules;
pub mod said;
pub mod stages;
pub mod stats;
pub mod timeline;

pub use contract::Scoring;
pub use error::{Error, Result};
pub use rules::RuleSet;
