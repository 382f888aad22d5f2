//! A fault proxy for the tests and the chaos benchmark: TCP between the recorder and a
//! server, with the faults of the networks users record through (latency, a bandwidth
//! cap, burst buffering, resets, half-open links, stalls, refusals, 1-byte segments,
//! idle closes), each drawn from a seed so that a run can be repeated.
//!
//! Why not a Toxiproxy port: `noxious` 1.0.4 (the Rust one on crates.io, last released in
//! 2021) has latency, bandwidth, timeout, slicer and slow-close, but no burst buffering,
//! no refusal window, no RST and no idle close, its toxics are a closed enum in a private
//! module (they cannot be added from outside), and its jitter and toxicity draw from
//! `thread_rng`, so a run cannot be repeated. Toxiproxy itself is a Go binary that no
//! registry this project installs from carries.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// One kind of network fault, applied to the response direction (server to recorder)
/// unless it says otherwise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Nothing: bytes pass as they come.
    None,
    /// Each read from the server is delayed by `base` ± `jitter` (uniform, seeded); the
    /// order of bytes is kept.
    Latency { base: Duration, jitter: Duration },
    /// At most `bytes_per_s` pass.
    Bandwidth { bytes_per_s: u64 },
    /// Bytes are held and released together every `every`, as some reverse proxies and
    /// port-forwards do.
    Burst { every: Duration },
    /// After a seeded number of response bytes in `after`, the connection is reset (RST).
    Reset { after: (u64, u64) },
    /// After a seeded number of response bytes in `after`, nothing passes either way
    /// and the connection stays open: no FIN, no RST.
    HalfOpen { after: (u64, u64) },
    /// After a seeded number of response bytes in `after`, the response stops for
    /// `pause`, then goes on.
    Stall { after: (u64, u64), pause: Duration },
    /// `at` after the first connection, every open connection is reset and the port
    /// refuses connections for `down` (a tunnel that restarts); then it listens again.
    Refuse { at: Duration, down: Duration },
    /// Response bytes are written one at a time, each its own TCP segment.
    OneByte,
    /// A connection with no byte either way for `idle` is closed (FIN), as load
    /// balancers close kept-alive connections between requests.
    IdleClose { idle: Duration },
    /// Each faulted connection draws one of [`CHAOS_MENU`] (seeded), and every
    /// `refuse_every` the port refuses connections for 5 s (open ones reset).
    Chaos { refuse_every: Option<Duration> },
}

/// The faults a `Chaos` connection draws from, each as likely.
pub const CHAOS_MENU: [Fault; 8] = [
    Fault::Latency {
        base: Duration::from_millis(50),
        jitter: Duration::from_millis(30),
    },
    Fault::Bandwidth {
        bytes_per_s: 64 * 1024,
    },
    Fault::Burst {
        every: Duration::from_millis(500),
    },
    Fault::Reset { after: (400, 8000) },
    Fault::HalfOpen { after: (400, 8000) },
    Fault::Stall {
        after: (400, 8000),
        pause: Duration::from_secs(10),
    },
    Fault::OneByte,
    Fault::IdleClose {
        idle: Duration::from_secs(2),
    },
];

/// How long a `Chaos` refusal window lasts.
pub const CHAOS_DOWN: Duration = Duration::from_secs(5);

impl Fault {
    /// The fault's class, as the tests, the chaos benchmark and the warnings name it.
    pub fn class(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Latency { .. } => "latency",
            Fault::Bandwidth { .. } => "bandwidth",
            Fault::Burst { .. } => "burst",
            Fault::Reset { .. } => "reset",
            Fault::HalfOpen { .. } => "half-open",
            Fault::Stall { .. } => "stall",
            Fault::Refuse { .. } => "refused",
            Fault::OneByte => "1-byte",
            Fault::IdleClose { .. } => "idle-close",
            Fault::Chaos { .. } => "chaos",
        }
    }
}

/// What the proxy does: one fault, on a seeded share of the connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    pub fault: Fault,
    /// The share of connections (0 to 1) the fault is applied to, drawn per connection.
    /// `Refuse` ignores it (a restart meets every connection).
    pub share: f64,
    /// Only connections whose first request streams a completion (`POST /v1/...
    /// completions`) meet the fault: not the probe's control calls or the scrapes.
    pub streams_only: bool,
    pub seed: u64,
}

impl Plan {
    /// `fault` on every connection.
    pub fn every(fault: Fault, seed: u64) -> Plan {
        Plan {
            fault,
            share: 1.0,
            streams_only: false,
            seed,
        }
    }

    /// `fault` on a seeded `share` of the connections that stream completions.
    pub fn streams(fault: Fault, share: f64, seed: u64) -> Plan {
        Plan {
            fault,
            share,
            streams_only: true,
            seed,
        }
    }
}

/// What happened to one connection, for the tests' evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// Reset after this many response bytes.
    Reset(u64),
    /// Held half-open after this many response bytes.
    HalfOpen(u64),
    /// Stalled after this many response bytes.
    Stalled(u64),
    /// Reset by a refusal window.
    RefusedReset,
    /// Closed after being idle.
    IdleClosed,
}

/// The proxy's log: connections accepted, and each fault that met one.
#[derive(Debug, Default)]
struct Log {
    accepted: AtomicU64,
    hits: Mutex<Vec<(u64, Hit)>>,
    refusals: AtomicU64,
    /// Each ended connection: index, fault class, opened and closed (CLOCK_MONOTONIC ns).
    lives: Mutex<Vec<Life>>,
}

/// One proxied connection's life, on the host's CLOCK_MONOTONIC (the clock a run's
/// `clock.monotonic_at_zero_ns` maps onto).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    pub index: u64,
    pub class: &'static str,
    pub opened_ns: i64,
    pub closed_ns: i64,
}

/// The host's CLOCK_MONOTONIC in ns.
pub fn monotonic_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

impl Log {
    fn hit(&self, conn: u64, hit: Hit) {
        self.hits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((conn, hit));
    }
}

/// A running fault proxy; dropping it stops it (its runtime goes with it).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    log: Arc<Log>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port, in front of `upstream`, on a runtime of
    /// its own (so that synchronous tests can use it, and asynchronous ones too).
    pub fn start(upstream: SocketAddr, plan: Plan) -> io::Result<FaultProxy> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let addr = listener.local_addr()?;
        let log = Arc::new(Log::default());
        runtime.spawn(serve(listener, upstream, plan, log.clone()));
        Ok(FaultProxy {
            addr,
            log,
            runtime: Some(runtime),
        })
    }

    /// Where the recorder connects.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.log.accepted.load(Ordering::Relaxed)
    }

    /// Refusal windows so far.
    pub fn refusals(&self) -> u64 {
        self.log.refusals.load(Ordering::Relaxed)
    }

    /// Every connection that has ended: its fault class and when it lived.
    pub fn lives(&self) -> Vec<Life> {
        self.log
            .lives
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Each fault that met a connection: the connection's index and what happened.
    pub fn hits(&self) -> Vec<(u64, Hit)> {
        self.log
            .hits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// The accept loop; a `Refuse` plan closes the listener for its window and reopens it on
/// the same port.
async fn serve(mut listener: TcpListener, upstream: SocketAddr, plan: Plan, log: Arc<Log>) {
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    // Each refusal window bumps the generation; connections of an older one are reset.
    let (generation, _) = watch::channel(0u64);
    let mut refuse_at: Option<Instant> = None;
    loop {
        let window = refuse_at;
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = sleep_until(window) => {
                let (down, next) = match plan.fault {
                    // One window per run: the tests count on it.
                    Fault::Refuse { down, .. } => (down, None),
                    Fault::Chaos { refuse_every } => (CHAOS_DOWN, refuse_every),
                    _ => continue,
                };
                drop(listener);
                log.refusals.fetch_add(1, Ordering::Relaxed);
                generation.send_modify(|g| *g += 1);
                let opened_ns = monotonic_ns();
                tokio::time::sleep(down).await;
                // The window, as a life of its own: the chaos benchmark's cells that
                // overlap it are not unaffected.
                log.lives.lock().unwrap_or_else(|e| e.into_inner()).push(Life {
                    index: u64::MAX,
                    class: "refused",
                    opened_ns,
                    closed_ns: monotonic_ns(),
                });
                listener = match rebind(addr).await {
                    Some(l) => l,
                    None => return,
                };
                refuse_at = Some(match next {
                    Some(every) => Instant::now() + every,
                    None => Instant::now() + Duration::from_secs(365 * 24 * 3600),
                });
                continue;
            }
        };
        let Ok((client, _)) = accepted else { continue };
        let index = log.accepted.fetch_add(1, Ordering::Relaxed);
        match (plan.fault, refuse_at) {
            (Fault::Refuse { at, .. }, None) => refuse_at = Some(Instant::now() + at),
            (
                Fault::Chaos {
                    refuse_every: Some(every),
                },
                None,
            ) => {
                refuse_at = Some(Instant::now() + every);
            }
            _ => {}
        }
        let mut rng =
            fastrand::Rng::with_seed(plan.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let fault = match plan.fault {
            Fault::Refuse { .. } => plan.fault,
            Fault::Chaos { .. } if rng.f64() < plan.share => {
                CHAOS_MENU[rng.usize(..CHAOS_MENU.len())]
            }
            Fault::Chaos { .. } => Fault::None,
            f if rng.f64() < plan.share => f,
            _ => Fault::None,
        };
        let conn = Conn {
            index,
            fault,
            streams_only: plan.streams_only,
            rng,
            log: log.clone(),
            killed: generation.subscribe(),
        };
        let log = log.clone();
        tokio::spawn(async move {
            let (index, opened_ns) = (conn.index, monotonic_ns());
            let class = conn.run(client, upstream).await;
            let life = Life {
                index,
                class,
                opened_ns,
                closed_ns: monotonic_ns(),
            };
            log.lives
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(life);
        });
    }
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The listener again on `addr` after a refusal window (the port may take a moment).
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..100 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return Some(l);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// One proxied connection.
struct Conn {
    index: u64,
    fault: Fault,
    streams_only: bool,
    rng: fastrand::Rng,
    log: Arc<Log>,
    killed: watch::Receiver<u64>,
}

/// Milliseconds since the proxy's clock began, for idle tracking.
fn now_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Conn {
    /// Proxies the connection to its end; the class of the fault it met.
    async fn run(mut self, client: TcpStream, upstream: SocketAddr) -> &'static str {
        self.pump(client, upstream).await;
        self.fault.class()
    }

    async fn pump(&mut self, client: TcpStream, upstream: SocketAddr) {
        let Ok(server) = TcpStream::connect(upstream).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (mut cr, cw) = client.into_split();
        let (mut ur, mut uw) = server.into_split();
        if self.streams_only && !matches!(self.fault, Fault::Refuse { .. } | Fault::None) {
            // The request line says what the connection carries first.
            let mut first = vec![0u8; 16 * 1024];
            let n = match cr.read(&mut first).await {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            let line = first[..n].split(|b| *b == b'\n').next().unwrap_or_default();
            let streams =
                line.starts_with(b"POST /v1/") && line.windows(11).any(|w| w == b"completions");
            if !streams {
                self.fault = Fault::None;
            }
            if uw.write_all(&first[..n]).await.is_err() {
                return;
            }
        }
        let start = Instant::now();
        let last = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel::<(Vec<u8>, Instant)>(256);
        let writer = Writer {
            index: self.index,
            fault: self.fault,
            threshold: self.threshold(),
            jitter_rng: self.rng.clone(),
            log: self.log.clone(),
            killed: self.killed.clone(),
        };
        let mut writer = tokio::spawn(writer.run(cw, rx));
        let idle = match self.fault {
            Fault::IdleClose { idle } => Some(idle),
            _ => None,
        };
        let (mut up_buf, mut down_buf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
        let (mut client_open, mut server_open) = (true, true);
        let mut tx = Some(tx);
        loop {
            let idle_at =
                idle.map(|i| start + Duration::from_millis(last.load(Ordering::Relaxed)) + i);
            tokio::select! {
                r = cr.read(&mut up_buf), if client_open => match r {
                    Ok(0) | Err(_) => {
                        client_open = false;
                        let _ = uw.shutdown().await;
                    }
                    Ok(n) => {
                        last.store(now_ms(start), Ordering::Relaxed);
                        if uw.write_all(&up_buf[..n]).await.is_err() {
                            client_open = false;
                        }
                    }
                },
                r = ur.read(&mut down_buf), if server_open => match r {
                    Ok(0) | Err(_) => {
                        server_open = false;
                        tx = None;
                    }
                    Ok(n) => {
                        last.store(now_ms(start), Ordering::Relaxed);
                        let sent = match &tx {
                            Some(tx) => tx.send((down_buf[..n].to_vec(), Instant::now())).await.is_ok(),
                            None => false,
                        };
                        if !sent {
                            server_open = false;
                        }
                    }
                },
                _ = &mut writer => return,
                () = sleep_until(idle_at) => {
                    self.log.hit(self.index, Hit::IdleClosed);
                    // The writer's half is dropped with the task: a FIN to the client.
                    writer.abort();
                    return;
                }
            }
            if !client_open && !server_open && tx.is_none() {
                // Let the writer flush what it holds, then end.
                let _ = (&mut writer).await;
                return;
            }
        }
    }

    /// The byte count at which a Reset, HalfOpen or Stall fault acts, drawn from its
    /// range.
    fn threshold(&mut self) -> u64 {
        match self.fault {
            Fault::Reset { after } | Fault::HalfOpen { after } | Fault::Stall { after, .. } => {
                let (lo, hi) = (after.0.min(after.1), after.0.max(after.1));
                self.rng.u64(lo..=hi)
            }
            _ => u64::MAX,
        }
    }
}

/// The response direction: where the faults act.
struct Writer {
    index: u64,
    fault: Fault,
    threshold: u64,
    jitter_rng: fastrand::Rng,
    log: Arc<Log>,
    killed: watch::Receiver<u64>,
}

/// How the writer ended.
enum Ended {
    /// The response direction ended (or the client went away).
    Done,
    /// Reset: the socket closes with RST when its read half goes too.
    Reset,
}

impl Writer {
    async fn run(mut self, mut cw: OwnedWriteHalf, mut rx: mpsc::Receiver<(Vec<u8>, Instant)>) {
        let generation = *self.killed.borrow();
        let mut killed = self.killed.clone();
        let ended = tokio::select! {
            e = self.pump(&mut cw, &mut rx) => e,
            _ = killed.wait_for(|g| *g != generation) => {
                self.log.hit(self.index, Hit::RefusedReset);
                Ended::Reset
            }
        };
        if let Ended::Reset = ended {
            let _ = cw.as_ref().set_zero_linger();
            // No FIN first: the socket closes with RST once the read half is dropped.
            cw.forget();
        }
    }

    async fn pump(
        &mut self,
        cw: &mut OwnedWriteHalf,
        rx: &mut mpsc::Receiver<(Vec<u8>, Instant)>,
    ) -> Ended {
        if let Fault::Burst { every } = self.fault {
            return burst(cw, rx, every).await;
        }
        let mut written: u64 = 0;
        let mut release = Instant::now();
        let started = Instant::now();
        while let Some((bytes, arrived)) = rx.recv().await {
            let mut rest: &[u8] = &bytes;
            // The part before the threshold passes; the fault acts at the threshold.
            if written + rest.len() as u64 >= self.threshold && self.threshold != u64::MAX {
                let before = usize::try_from(self.threshold.saturating_sub(written)).unwrap_or(0);
                if cw.write_all(&rest[..before.min(rest.len())]).await.is_err() {
                    return Ended::Done;
                }
                written = self.threshold;
                rest = &rest[before.min(rest.len())..];
                let at = self.threshold;
                self.threshold = u64::MAX;
                match self.fault {
                    Fault::Reset { .. } => {
                        self.log.hit(self.index, Hit::Reset(at));
                        return Ended::Reset;
                    }
                    Fault::HalfOpen { .. } => {
                        self.log.hit(self.index, Hit::HalfOpen(at));
                        // Nothing more passes; the connection stays open (no FIN)
                        // until the server's side closes, which the client's giving up
                        // brings about (its read half ends the upstream direction).
                        while rx.recv().await.is_some() {}
                        return Ended::Done;
                    }
                    Fault::Stall { pause, .. } => {
                        self.log.hit(self.index, Hit::Stalled(at));
                        tokio::time::sleep(pause).await;
                    }
                    _ => {}
                }
            }
            let ok = match self.fault {
                Fault::Latency { base, jitter } => {
                    let j = jitter.as_micros() as i64;
                    let d = base.as_micros() as i64 + self.jitter_rng.i64(-j..=j);
                    release = release.max(arrived + Duration::from_micros(d.max(0) as u64));
                    tokio::time::sleep_until(release).await;
                    cw.write_all(rest).await.is_ok()
                }
                Fault::Bandwidth { bytes_per_s } => {
                    paced(cw, rest, bytes_per_s.max(1), started, written).await
                }
                Fault::OneByte => one_by_one(cw, rest).await,
                _ => cw.write_all(rest).await.is_ok(),
            };
            written += rest.len() as u64;
            if !ok {
                return Ended::Done;
            }
        }
        Ended::Done
    }
}

/// Holds the response and writes what arrived every `every`.
async fn burst(
    cw: &mut OwnedWriteHalf,
    rx: &mut mpsc::Receiver<(Vec<u8>, Instant)>,
    every: Duration,
) -> Ended {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut held = Vec::new();
    let mut open = true;
    while open {
        tick.tick().await;
        loop {
            match rx.try_recv() {
                Ok((bytes, _)) => held.extend_from_slice(&bytes),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if !held.is_empty() {
            if cw.write_all(&held).await.is_err() {
                return Ended::Done;
            }
            held.clear();
        }
    }
    Ended::Done
}

/// Writes `bytes` at `rate` bytes a second, `written` having gone since `started`.
async fn paced(
    cw: &mut OwnedWriteHalf,
    bytes: &[u8],
    rate: u64,
    started: Instant,
    mut written: u64,
) -> bool {
    // Pieces of a twentieth of a second's worth, so the cap holds within a read.
    let piece = usize::try_from((rate / 20).max(1)).unwrap_or(usize::MAX);
    for part in bytes.chunks(piece) {
        written += part.len() as u64;
        let due = started + Duration::from_secs_f64(written as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
        if cw.write_all(part).await.is_err() {
            return false;
        }
    }
    true
}

/// Writes `bytes` one byte a segment (the socket has TCP_NODELAY).
async fn one_by_one(cw: &mut OwnedWriteHalf, bytes: &[u8]) -> bool {
    for b in bytes {
        if cw.write_all(std::slice::from_ref(b)).await.is_err() {
            return false;
        }
        // A yield between bytes, so that each goes out on its own.
        tokio::task::yield_now().await;
    }
    true
}
