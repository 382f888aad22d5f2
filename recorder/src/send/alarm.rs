//! Waits to an exact time on the runtime itself, for open-loop schedules and the lateness
//! tick: a Linux timerfd (nanosecond expiry) watched by the runtime's reactor, so a due
//! request wakes the worker that sends it and nothing else, and a periodic tick needs no
//! re-arming (tokio's timer wakes its driver once more at each). Elsewhere, or if the
//! timerfd cannot be made, the runtime's timer (which rounds every wait up to the next
//! millisecond).

use std::time::{Duration, Instant};

/// One timer, re-armed for each wait.
#[derive(Debug)]
pub struct Alarm {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<Timer>>,
}

impl Alarm {
    /// A timer on the current runtime (call it from within one).
    pub fn new() -> Self {
        Alarm {
            #[cfg(target_os = "linux")]
            fd: timerfd(None),
        }
    }

    /// Returns at `due` (at once if it has passed).
    pub async fn until(&mut self, due: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd
            && timerfd_until(fd, due).await.is_ok()
        {
            return;
        }
        // No timerfd, or it failed: the runtime's timer.
        tokio::time::sleep_until(due.into()).await;
    }
}

impl Default for Alarm {
    fn default() -> Self {
        Alarm::new()
    }
}

/// A periodic tick: fires every `period` from its creation; ticks missed while the runtime
/// was busy are skipped, not made up.
#[derive(Debug)]
pub struct Ticker {
    start: Instant,
    period: Duration,
    /// Periods from `start` to the last tick returned.
    done: u32,
    source: Source,
}

/// What a [`Ticker`] waits on.
#[derive(Debug)]
enum Source {
    #[cfg(target_os = "linux")]
    Timerfd(tokio::io::unix::AsyncFd<Timer>),
    /// The runtime's timer, without a timerfd.
    Interval(tokio::time::Interval),
}

impl Ticker {
    /// A tick every `period` (at least a microsecond), the first one `period` from now.
    /// Call it from within a runtime.
    pub fn new(period: Duration) -> Self {
        let period = period.max(Duration::from_micros(1));
        let start = Instant::now();
        #[cfg(target_os = "linux")]
        let source = timerfd(Some(period)).map(Source::Timerfd);
        #[cfg(not(target_os = "linux"))]
        let source = None;
        Ticker {
            start,
            period,
            done: 0,
            source: source.unwrap_or_else(|| Source::Interval(interval(start + period, period))),
        }
    }

    /// Waits for the next tick and returns the time it was due (the latest one due, when
    /// several passed while the runtime was busy).
    pub async fn tick(&mut self) -> Instant {
        loop {
            match &mut self.source {
                Source::Interval(i) => return i.tick().await.into_std(),
                #[cfg(target_os = "linux")]
                Source::Timerfd(fd) => match read_expiries(fd).await {
                    Ok(n) => {
                        let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
                        self.done = self.done.saturating_add(n);
                        return self.start + self.period.saturating_mul(self.done);
                    }
                    // The timerfd failed: the runtime's timer from here on.
                    Err(_) => {
                        let next = Instant::now() + self.period;
                        self.source = Source::Interval(interval(next, self.period));
                    }
                },
            }
        }
    }
}

/// The runtime's timer as a ticker's fallback: first at `first`, then every `period`.
fn interval(first: Instant, period: Duration) -> tokio::time::Interval {
    let mut i = tokio::time::interval_at(first.into(), period);
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    i
}

/// A timerfd on CLOCK_MONOTONIC (`Instant`'s clock on Linux), watched by the current
/// runtime's reactor; firing every `period` from now when given, else unarmed. `None`
/// when the system refuses one.
#[cfg(target_os = "linux")]
fn timerfd(period: Option<Duration>) -> Option<tokio::io::unix::AsyncFd<Timer>> {
    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    let t = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )
    .ok()?;
    if let Some(p) = period {
        let every = Expiration::Interval(TimeSpec::from_duration(p));
        t.set(every, TimerSetTimeFlags::empty()).ok()?;
    }
    register(Timer(t)).ok()
}

/// A timerfd, as the reactor takes it.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Timer(nix::sys::timerfd::TimerFd);

#[cfg(target_os = "linux")]
impl std::os::fd::AsRawFd for Timer {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

/// The timer, watched by the current runtime's reactor.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn register(t: Timer) -> std::io::Result<tokio::io::unix::AsyncFd<Timer>> {
    // SAFETY: `Timer` owns its file descriptor (an `OwnedFd` inside nix's `TimerFd`),
    // which stays open, and is not replaced, for as long as the `AsyncFd` holds it.
    unsafe { tokio::io::unix::AsyncFd::register(t) }.map_err(std::io::Error::from)
}

/// Arms `fd` for `due` (relative to now, on `Instant`'s clock) and waits for it to fire.
#[cfg(target_os = "linux")]
async fn timerfd_until(fd: &tokio::io::unix::AsyncFd<Timer>, due: Instant) -> std::io::Result<()> {
    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
    let now = Instant::now();
    if now >= due {
        return Ok(());
    }
    // A zero expiry would disarm the timer: at least a nanosecond. Arming it anew also
    // clears an expiry left unread by a wait that was dropped.
    let wait = (due - now).max(Duration::from_nanos(1));
    fd.get_ref()
        .0
        .set(
            Expiration::OneShot(TimeSpec::from_duration(wait)),
            TimerSetTimeFlags::empty(),
        )
        .map_err(std::io::Error::from)?;
    read_expiries(fd).await.map(drop)
}

/// Waits for `fd` to fire; returns how many times it fired since it was last read.
#[cfg(target_os = "linux")]
async fn read_expiries(fd: &tokio::io::unix::AsyncFd<Timer>) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    loop {
        let mut ready = fd.readable().await?;
        let read = ready.try_io(|t| {
            let mut count = [0u8; 8];
            nix::unistd::read(t.get_ref().as_raw_fd(), &mut count)
                .map(|_| u64::from_ne_bytes(count))
                .map_err(std::io::Error::from)
        });
        match read {
            Ok(Ok(n)) => {
                // The read took every expiry: the next wait needs a new one (tokio keeps
                // the readiness if the reactor saw another since this guard was made).
                ready.clear_ready();
                return Ok(n);
            }
            Ok(Err(e)) => return Err(e),
            // Not fired yet (a readiness left from before): wait again.
            Err(_would_block) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_alarm_never_returns_before_its_time_and_can_be_reused() {
        let mut a = Alarm::new();
        #[cfg(target_os = "linux")]
        assert!(a.fd.is_some(), "a timerfd on Linux");
        for ms in [3u64, 1, 0, 2] {
            let due = Instant::now() + Duration::from_millis(ms);
            a.until(due).await;
            assert!(Instant::now() >= due, "returned before {ms} ms");
        }
        // A time already passed returns at once, and the timer still works after.
        a.until(Instant::now() - Duration::from_millis(5)).await;
        let due = Instant::now() + Duration::from_millis(2);
        a.until(due).await;
        assert!(Instant::now() >= due);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ticker_fires_on_its_period_and_skips_what_it_missed() {
        let period = Duration::from_millis(5);
        let mut t = Ticker::new(period);
        #[cfg(target_os = "linux")]
        assert!(matches!(t.source, Source::Timerfd(_)), "a timerfd on Linux");
        let start = t.start;
        // Each tick returned is a whole number of periods from the start, and has passed.
        let periods = |at: Instant| {
            let d = (at - start).as_nanos();
            assert_eq!(d % period.as_nanos(), 0, "{d} ns from the start");
            d / period.as_nanos()
        };
        let first = t.tick().await;
        assert!(periods(first) >= 1);
        assert!(Instant::now() >= first);
        // Busy for several periods: the next tick is the latest one due, not each missed.
        std::thread::sleep(period * 4);
        let late = t.tick().await;
        assert!(periods(late) >= periods(first) + 4, "{:?}", late - start);
        assert!(Instant::now() >= late);
        let next = t.tick().await;
        assert!(periods(next) > periods(late));
        assert!(Instant::now() >= next);
    }
}
