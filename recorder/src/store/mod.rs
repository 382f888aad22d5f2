//! Storing: the bounded queue to a cell's writer and what goes on it (queue), one cell
//! recorded and committed (cell), object storage (bucket).

pub mod bucket;
pub mod cell;
pub mod queue;
