//! Waits to an exact time on the runtime itself, for open-loop schedules: a Linux timerfd
//! (nanosecond expiry) watched by the runtime's reactor, so a due request wakes the worker
//! that sends it and nothing else. Elsewhere, or if the timerfd cannot be made, the
//! runtime's timer (which rounds every wait up to the next millisecond).

use std::time::Instant;

/// One timer, re-armed for each wait.
#[derive(Debug)]
pub struct Alarm {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<Timer>>,
}

impl Alarm {
    /// A timer on the current runtime (call it from within one).
    pub fn new() -> Self {
        #[cfg(target_os = "linux")]
        {
            use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
            let fd = TimerFd::new(
                ClockId::CLOCK_MONOTONIC,
                TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
            )
            .ok()
            .and_then(|t| register(Timer(t)).ok());
            Alarm { fd }
        }
        #[cfg(not(target_os = "linux"))]
        Alarm {}
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

impl Default for Alarm {
    fn default() -> Self {
        Alarm::new()
    }
}

/// Arms `fd` for `due` (relative to now: `Instant` is CLOCK_MONOTONIC on Linux) and waits
/// for it to fire.
#[cfg(target_os = "linux")]
async fn timerfd_until(fd: &tokio::io::unix::AsyncFd<Timer>, due: Instant) -> std::io::Result<()> {
    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
    use std::os::fd::AsRawFd;
    let now = Instant::now();
    if now >= due {
        return Ok(());
    }
    // A zero expiry would disarm the timer: at least a nanosecond.
    let wait = (due - now).max(std::time::Duration::from_nanos(1));
    fd.get_ref()
        .0
        .set(
            Expiration::OneShot(TimeSpec::from_duration(wait)),
            TimerSetTimeFlags::empty(),
        )
        .map_err(std::io::Error::from)?;
    loop {
        let mut ready = fd.readable().await?;
        let read = ready.try_io(|t| {
            let mut count = [0u8; 8];
            nix::unistd::read(t.get_ref().as_raw_fd(), &mut count).map_err(std::io::Error::from)
        });
        match read {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            // Not fired yet (a readiness left from before): wait again.
            Err(_would_block) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
