//! Kernel receive timestamps on a TCP socket (Linux: `SO_TIMESTAMPING`, software receive
//! stamps): a read also says how long before it returned the kernel received the newest
//! bytes it read. The recorder takes that age off its read times, the simulator's ground
//! truth off its reads of requests, so neither counts its own scheduling delay.

use std::io;
use std::os::fd::AsFd;

/// An age above this is taken for a step of the wall clock between the kernel's stamp
/// and the read (both are CLOCK_REALTIME), and not used.
const MAX_AGE_NS: i64 = 60_000_000_000;

/// The age of a read's stamp: `now − stamp` (both CLOCK_REALTIME ns), when it is one a
/// clock step cannot have made (not negative, at most [`MAX_AGE_NS`]).
fn age(now_ns: i64, stamp_ns: i64) -> Option<i64> {
    let age = now_ns.checked_sub(stamp_ns)?;
    (stamp_ns > 0 && (0..=MAX_AGE_NS).contains(&age)).then_some(age)
}

/// CLOCK_REALTIME in ns, the clock of the kernel's receive stamps.
fn realtime_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    t.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::io;
    use std::os::fd::{AsFd, AsRawFd};

    use nix::sys::socket::{
        ControlMessageOwned, MsgFlags, TimestampingFlag, Timestamps, recvmsg, setsockopt, sockopt,
    };

    /// A socket's receive-timestamp state: the control-message buffer of its reads.
    #[derive(Debug)]
    pub struct Stamped {
        cmsg: Vec<u8>,
    }

    /// Asks the kernel for software receive timestamps on `socket`; None where it refuses.
    pub fn enable(socket: &impl AsFd) -> Option<Stamped> {
        let flags = TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE;
        setsockopt(socket, sockopt::Timestamping, &flags).ok()?;
        Some(Stamped {
            cmsg: nix::cmsg_space!(Timestamps),
        })
    }

    impl Stamped {
        /// One `recvmsg` into `buf` (non-blocking on a non-blocking socket): the bytes
        /// read and the kernel's stamp of the newest of them (CLOCK_REALTIME ns), when it
        /// came with them.
        pub fn recv(&mut self, socket: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, i64)> {
            let fd = socket.as_fd().as_raw_fd();
            let mut iov = [io::IoSliceMut::new(buf)];
            let msg = recvmsg::<()>(fd, &mut iov, Some(&mut self.cmsg), MsgFlags::empty())
                .map_err(io::Error::from)?;
            let mut stamp = 0;
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmTimestampsns(t) = c {
                        stamp = t.system.tv_sec() * 1_000_000_000 + t.system.tv_nsec();
                    }
                }
            }
            Ok((msg.bytes, stamp))
        }
    }
}

/// No receive timestamps off Linux: [`enable`] gives none.
#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::os::fd::AsFd;

    #[derive(Debug)]
    pub enum Stamped {}

    pub fn enable(_: &impl AsFd) -> Option<Stamped> {
        None
    }

    impl Stamped {
        pub fn recv(&mut self, _: &impl AsFd, _: &mut [u8]) -> io::Result<(usize, i64)> {
            match *self {}
        }
    }
}

/// A socket whose reads come with the kernel's receive stamps.
#[derive(Debug)]
pub struct RxStamps(imp::Stamped);

impl RxStamps {
    /// Turns receive stamps on for `socket`; None where the platform or the kernel gives
    /// none (reads then go the usual way, stamped when they return).
    pub fn enable(socket: &impl AsFd) -> Option<RxStamps> {
        imp::enable(socket).map(RxStamps)
    }

    /// One read into `buf` (a would-block error on a non-blocking socket with nothing to
    /// read): the bytes read, and how long before this call returned the kernel received
    /// the newest of them (ns), when the kernel stamped them.
    pub fn recv(&mut self, socket: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<i64>)> {
        let (n, stamp) = self.0.recv(socket, buf)?;
        Ok((n, age(realtime_ns(), stamp)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_age_is_kept_only_where_no_clock_step_can_have_made_it() {
        assert_eq!(age(1_000_500, 1_000_000), Some(500));
        assert_eq!(age(1_000_000, 1_000_000), Some(0));
        // The wall clock stepped back between the stamp and the read.
        assert_eq!(age(1_000_000, 1_000_500), None);
        // Or forward by more than a minute; or no stamp came.
        assert_eq!(age(MAX_AGE_NS + 2, 1), None);
        assert_eq!(age(5, 0), None);
    }

    /// Bytes written and left unread for 30 ms are read with an age of at least 30 ms:
    /// the stamp is the kernel's, not the read's. (The kernel turns stamping on for the
    /// whole host through deferred work, so the first segments after the first socket of
    /// a process asks may come unstamped: a few tries.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_read_says_how_long_its_bytes_waited_in_the_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let mut stamps = RxStamps::enable(&server).expect("Linux gives receive stamps");
        let mut ages = Vec::new();
        for _ in 0..20 {
            client.write_all(b"hello").expect("write");
            std::thread::sleep(std::time::Duration::from_millis(30));
            let mut buf = [0u8; 16];
            let (n, age) = stamps.recv(&server, &mut buf).expect("recv");
            assert_eq!(&buf[..n], b"hello");
            ages.push(age);
            if age.is_some() {
                break;
            }
        }
        let age = ages.iter().flatten().next().copied();
        let age = age.unwrap_or_else(|| panic!("no read stamped in {} tries", ages.len()));
        assert!(
            (30_000_000..MAX_AGE_NS).contains(&age),
            "age {age} ns of bytes left 30 ms in the socket"
        );
    }

    /// A closed peer reads as 0 bytes, and no age is invented for them.
    #[test]
    fn a_closed_peer_reads_as_nothing_with_no_age() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        drop(client);
        if let Some(mut stamps) = RxStamps::enable(&server) {
            let mut buf = [0u8; 4];
            let (n, age) = stamps.recv(&server, &mut buf).expect("recv");
            assert_eq!((n, age), (0, None));
        }
    }
}
