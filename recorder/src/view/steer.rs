//! The user's steering of a recording, from the full-screen view's keys: a soft stop,
//! skipping the cell under way, and pausing before the next cell. The key reader sets
//! it; the runner and the cell under way read it (never on a request's path).

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, watch};

/// What the user asked for so far.
#[derive(Debug)]
pub struct Steer {
    /// Told once on `q`: the recording stops as on Ctrl-C.
    pub quit: Notify,
    paused: AtomicBool,
    /// Bumped on each `s`: the cell under way when it changes is skipped.
    skip: watch::Sender<u64>,
}

impl Default for Steer {
    fn default() -> Self {
        Steer {
            quit: Notify::new(),
            paused: AtomicBool::new(false),
            skip: watch::channel(0).0,
        }
    }
}

impl Steer {
    /// `q`: stop softly.
    pub fn stop(&self) {
        self.quit.notify_one();
    }

    /// `s`: skip the cell under way.
    pub fn skip(&self) {
        self.skip.send_modify(|n| *n += 1);
    }

    /// Heard by a cell from its start: changes on the next `s`.
    pub fn skips(&self) -> watch::Receiver<u64> {
        self.skip.subscribe()
    }

    /// `p`: pause before the next cell, or go on; returns whether now paused.
    pub fn toggle_pause(&self) -> bool {
        !self.paused.fetch_xor(true, Ordering::AcqRel)
    }

    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }
}
