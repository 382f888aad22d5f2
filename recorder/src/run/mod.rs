//! The run: a run's setup (session: folder or resume, probe, facts, manifest, the
//! settings a resumed run keeps), the cell loop (runner), and the process's heap
//! readied before the first request (heap).

pub mod heap;
pub mod runner;
pub mod session;
