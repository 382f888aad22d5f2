//! The queue between a cell's request tasks (and scraper) and its writer thread, bounded
//! twice: by records (bursts of small token events) and by bytes (a 100 MB event read at
//! loopback speed, a 100,000-series scrape), so what waits between network and disk stays
//! under [`QUEUE_BYTES`] whatever the server sends. A sender waits for room.

use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};

use tokentrace_schemas::tables::{ChunkRow, EventRow, RequestRow};

/// What goes to a cell's writer.
#[derive(Debug, Clone)]
pub enum Record {
    /// One socket read of a response body and the rows of the events it completed.
    Read {
        request_id: i64,
        arrival_ns: i64,
        /// The body bytes of the read (transfer framing removed); may be empty when
        /// only rows are handed over (at the end of a request).
        bytes: Vec<u8>,
        chunks: Vec<ChunkRow>,
    },
    Request(Box<RequestRow>),
    /// Samples of one metrics scrape (the server's, or the recorder's own health).
    Metrics(Vec<tokentrace_schemas::tables::MetricRow>),
    /// One GPU telemetry sample (a row per GPU).
    Gpu(Vec<tokentrace_schemas::tables::GpuRow>),
    Event(EventRow),
    /// One request of a replay cell's workload (`replay` table).
    Replay(Box<tokentrace_schemas::tables::ReplayRow>),
    /// One turn of a conversation cell (`turns` table).
    Turn(tokentrace_schemas::tables::TurnRow),
    /// The cell ended normally: commit it. A writer whose channel closes without this
    /// (Ctrl-C, a crash) leaves the cell uncommitted, to be redone by `--resume`.
    Commit,
}

/// Records the queue holds at most.
pub const QUEUE_RECORDS: usize = 8 * 1024;
/// Bytes (an estimate of the records' memory) the queue holds at most.
pub const QUEUE_BYTES: usize = 32 << 20;
/// The writer gives room back in steps of at least this many bytes (or when the queue
/// runs empty): one semaphore release per step rather than per record.
const RELEASE_STEP: usize = 256 << 10;

/// The writer has gone (it failed or was stopped): nothing more is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// A queue holding at most `records` records and about `bytes` bytes of them.
pub fn queue(records: usize, bytes: usize) -> (Sender, Receiver) {
    let bytes = bytes.clamp(1, u32::MAX as usize);
    let (tx, rx) = mpsc::channel(records.max(1));
    let room = Arc::new(Semaphore::new(bytes));
    let writer = Arc::new(OnceLock::new());
    (
        Sender {
            tx,
            room: room.clone(),
            most: u32::try_from(bytes).unwrap_or(u32::MAX),
            writer: writer.clone(),
        },
        Receiver {
            rx,
            room,
            most: bytes,
            freed: 0,
            writer,
        },
    )
}

/// The sending side; cheap to clone.
#[derive(Debug, Clone)]
pub struct Sender {
    tx: mpsc::Sender<Record>,
    room: Arc<Semaphore>,
    /// The whole budget: a record heavier than it takes all of it.
    most: u32,
    /// The thread that parks in [`Receiver::park`], once it has.
    writer: Arc<OnceLock<Thread>>,
}

impl Sender {
    /// Queues `r` once there is room for it.
    /// The parked writer is woken when the queue is half full (so a burst never waits for
    /// room while the writer sleeps) or on [`Record::Commit`] (so a cell ends promptly).
    pub async fn send(&self, r: Record) -> Result<(), Closed> {
        let w = u32::try_from(weight(&r)).unwrap_or(u32::MAX).min(self.most);
        if w > 0 {
            self.room
                .acquire_many(w)
                .await
                .map_err(|_| Closed)?
                .forget();
        }
        let commit = matches!(r, Record::Commit);
        self.tx.send(r).await.map_err(|_| Closed)?;
        if (commit
            || self.tx.capacity() < self.tx.max_capacity() / 2
            || self.room.available_permits() < self.most as usize / 2)
            && let Some(t) = self.writer.get()
        {
            t.unpark();
        }
        Ok(())
    }
}

impl Drop for Sender {
    /// The last sender gone wakes the writer, which then finds the queue done. (Two last
    /// senders dropped at once may both miss it; the writer's sleep then ends it.)
    fn drop(&mut self) {
        if Arc::strong_count(&self.writer) <= 2
            && let Some(t) = self.writer.get()
        {
            t.unpark();
        }
    }
}

/// Why nothing was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Empty {
    /// Nothing queued now.
    Now,
    /// Every sender is gone and everything was taken.
    Done,
}

/// The writer's side. Dropping it closes the queue: waiting senders get [`Closed`].
#[derive(Debug)]
pub struct Receiver {
    rx: mpsc::Receiver<Record>,
    room: Arc<Semaphore>,
    /// The whole budget (a record's room is its weight, up to this).
    most: usize,
    /// Room taken back from records but not yet given to the senders.
    freed: usize,
    writer: Arc<OnceLock<Thread>>,
}

impl Receiver {
    /// The next record, without waiting. Its room goes back to the senders.
    pub fn try_recv(&mut self) -> Result<Record, Empty> {
        self.try_recv_weighed().map(|(r, _)| r)
    }

    /// [`Receiver::try_recv`], with the record's [`weight`] (for a caller that holds it).
    pub fn try_recv_weighed(&mut self) -> Result<(Record, usize), Empty> {
        match self.rx.try_recv() {
            Ok(r) => {
                let w = weight(&r);
                self.freed += w.min(self.most);
                if self.freed >= RELEASE_STEP {
                    self.release();
                }
                Ok((r, w))
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                self.release();
                Err(Empty::Now)
            }
            Err(mpsc::error::TryRecvError::Disconnected) => Err(Empty::Done),
        }
    }

    /// The next record, waiting for one; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<Record> {
        match self.try_recv() {
            Ok(r) => Some(r),
            Err(Empty::Done) => None,
            Err(Empty::Now) => {
                let r = self.rx.recv().await?;
                self.freed += weight(&r).min(self.most);
                self.release();
                Some(r)
            }
        }
    }

    /// Parks the calling thread for at most `most`, or until a sender finds the queue half
    /// full or sends [`Record::Commit`]. Only one thread may park on a queue.
    pub fn park(&self, most: Duration) {
        self.writer.get_or_init(std::thread::current);
        std::thread::park_timeout(most);
    }

    fn release(&mut self) {
        if self.freed > 0 {
            self.room.add_permits(self.freed);
            self.freed = 0;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.room.close();
    }
}

/// About how much memory `r` holds: its bytes, rows and strings.
pub fn weight(r: &Record) -> usize {
    use std::mem::size_of;
    use tokentrace_schemas::tables::{ChunkRow, EventRow, GpuRow, MetricRow, RequestRow};
    let s = |o: &Option<String>| o.as_ref().map_or(0, String::len);
    match r {
        Record::Read { bytes, chunks, .. } => {
            bytes.len()
                + chunks
                    .iter()
                    .map(|c| {
                        size_of::<ChunkRow>()
                            + s(&c.content)
                            + s(&c.reasoning)
                            + s(&c.finish_reason)
                            + s(&c.error)
                    })
                    .sum::<usize>()
        }
        Record::Request(q) => size_of::<RequestRow>() + s(&q.error),
        Record::Metrics(rows) => rows
            .iter()
            .map(|m| size_of::<MetricRow>() + m.family.len() + m.name.len() + m.labels.len())
            .sum(),
        Record::Gpu(rows) => rows.len() * size_of::<GpuRow>(),
        Record::Event(e) => size_of::<EventRow>() + s(&e.detail),
        Record::Replay(r) => size_of::<tokentrace_schemas::tables::ReplayRow>() + s(&r.skipped),
        Record::Turn(_) => size_of::<tokentrace_schemas::tables::TurnRow>(),
        Record::Commit => 0,
    }
}
