//! Observing: what the server is (probe), its metrics (scrape) and what the live view
//! shows of them (gauges), the GPUs (gpu), the engine's and host's facts (facts,
//! host).

pub mod facts;
pub mod gauges;
pub mod gpu;
pub mod host;
pub mod probe;
pub mod scrape;
