//! Pacing under refusals: a cell's requests share one pacer. While the server turns
//! requests away, sends are spaced by a capped exponential backoff (so a refusing server
//! sees a bounded rate whatever the concurrency), and after too many refusals in a row
//! the cell gives up with the server's own message.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::send::client::Refusal;

/// The first backoff after a refusal; it doubles with each refusal in a row …
pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// … up to this. While refusals continue, the server sees at most one request per
/// backoff from the whole cell.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Refusals in a row (no token in between) after which the cell fails.
pub const GIVE_UP_AFTER: u32 = 16;
/// Refusals in a row after which the cell fails when the server says the request
/// itself is wrong (a 4xx other than 408 and 429: sending it again cannot help).
pub const GIVE_UP_AFTER_PERMANENT: u32 = 4;

#[derive(Debug, Default)]
struct State {
    in_row: u32,
    total: u64,
    backoff: Duration,
    /// The earliest time the next request may go, while refusals continue.
    next_at: Option<Instant>,
    last: Option<Refusal>,
    gave_up: Option<GaveUp>,
}

/// Why a cell gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaveUp {
    /// How many refusals in a row, and the server's last answer.
    pub message: String,
    /// The server said the request itself is wrong (see [`Refusal::permanent`]).
    pub permanent: bool,
    /// The user skipped the cell (the screen's `s`): not the server's doing.
    pub by_user: bool,
}

/// Refusals of one cell and the pacing they impose.
#[derive(Debug, Default)]
pub struct Pacer {
    state: Mutex<State>,
}

/// What the cell learned from a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterRefusal {
    /// Send again, after the backoff.
    Retry,
    /// Too many refusals in a row: the cell fails.
    GiveUp(GaveUp),
}

impl Pacer {
    pub fn new() -> Self {
        Pacer::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A poisoned lock only means a panic elsewhere; the state is still usable.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s)
    }

    /// When the next request may be sent: `None` (now) unless refusals are in progress,
    /// in which case each caller gets its own turn, one backoff after the previous one.
    pub fn turn(&self) -> Option<Instant> {
        self.with(|s| {
            let at = s.next_at?;
            let at = at.max(Instant::now());
            s.next_at = Some(at + s.backoff);
            Some(at)
        })
    }

    /// A request produced a token: the refusals in a row are over.
    pub fn served(&self) {
        self.with(|s| {
            if s.in_row > 0 {
                s.in_row = 0;
                s.backoff = Duration::ZERO;
                s.next_at = None;
            }
        });
    }

    /// A request was refused.
    pub fn refused(&self, r: Refusal) -> AfterRefusal {
        self.with(|s| {
            s.in_row += 1;
            s.total += 1;
            s.backoff = (s.backoff * 2).clamp(BACKOFF_FIRST, BACKOFF_MAX);
            s.next_at = Some(Instant::now() + s.backoff);
            let limit = if r.permanent() {
                GIVE_UP_AFTER_PERMANENT
            } else {
                GIVE_UP_AFTER
            };
            if s.gave_up.is_none() && s.in_row >= limit {
                s.gave_up = Some(GaveUp {
                    message: match r.status {
                        Some(_) => {
                            format!("the server refused {} requests in a row ({r})", s.in_row)
                        }
                        // Connections refused or cut, heads that never came: no answer.
                        None => format!(
                            "the server refused or left unanswered {} requests in a row ({r})",
                            s.in_row
                        ),
                    },
                    permanent: r.permanent(),
                    by_user: false,
                });
            }
            s.last = Some(r);
            match &s.gave_up {
                Some(m) => AfterRefusal::GiveUp(m.clone()),
                None => AfterRefusal::Retry,
            }
        })
    }

    /// The cell gives up for `why` (unless it already did).
    pub fn give_up(&self, why: GaveUp) {
        self.with(|s| {
            s.gave_up.get_or_insert(why);
        });
    }

    /// Why the cell gave up, if it did.
    pub fn gave_up(&self) -> Option<GaveUp> {
        self.with(|s| s.gave_up.clone())
    }

    /// Refusals so far, and the last one.
    pub fn refusals(&self) -> (u64, Option<Refusal>) {
        self.with(|s| (s.total, s.last.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: u16) -> Refusal {
        Refusal {
            status: Some(status),
            message: "no".to_string(),
        }
    }

    #[test]
    fn backoff_spaces_sends_and_gives_up() {
        let p = Pacer::new();
        assert_eq!(p.turn(), None, "no refusal: send now");
        assert_eq!(p.refused(refusal(429)), AfterRefusal::Retry);
        let a = p.turn().expect("paced");
        let b = p.turn().expect("paced");
        assert!(b >= a + BACKOFF_FIRST, "turns are a backoff apart");
        p.served();
        assert_eq!(p.turn(), None, "a token ends the pacing");
        for _ in 1..GIVE_UP_AFTER {
            assert_eq!(p.refused(refusal(503)), AfterRefusal::Retry);
        }
        let AfterRefusal::GiveUp(g) = p.refused(refusal(503)) else {
            panic!("gives up after {GIVE_UP_AFTER}");
        };
        assert!(!g.permanent);
        let m = g.message;
        assert!(
            m.contains("16 requests in a row") && m.contains("HTTP 503"),
            "{m}"
        );
        assert_eq!(p.refusals().0, 17);
    }

    #[test]
    fn a_wrong_request_gives_up_sooner_and_backoff_is_capped() {
        let p = Pacer::new();
        for _ in 1..GIVE_UP_AFTER_PERMANENT {
            assert_eq!(p.refused(refusal(400)), AfterRefusal::Retry);
        }
        assert!(matches!(
            p.refused(refusal(400)),
            AfterRefusal::GiveUp(GaveUp {
                permanent: true,
                ..
            })
        ));
        let q = Pacer::new();
        for _ in 0..12 {
            q.refused(refusal(429));
        }
        let a = q.turn().expect("paced");
        let b = q.turn().expect("paced");
        assert_eq!(b - a, BACKOFF_MAX);
    }
}
