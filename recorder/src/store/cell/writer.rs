//! A cell's writer thread: records from the bounded queue into the cell's tables (the
//! heaviest held back in the stash, to be encoded once the cell's requests have ended),
//! then the commit.

use super::*;

pub(super) fn writer_loop(
    mut w: CellWriter,
    mut rx: queue::Receiver,
    tokens: Arc<AtomicU64>,
    stop: &AtomicBool,
    feed: &crate::observe::gauges::Feed,
    key: CellKey,
) -> Result<Recorded, CellError> {
    let label = key.to_string();
    let mut commit = false;
    let mut tally = Outcomes::default();
    let mut lanes = feed.lanes_counter();
    let mut stash = Stash::default();
    loop {
        // Not woken per record (that costs the sender a futex call and a context switch
        // each): it sleeps [`WRITER_POLL`] at a time, woken early only by a queue half
        // full or the cell's commit.
        let (r, weight) = match rx.try_recv_weighed() {
            Ok(got) => got,
            Err(queue::Empty::Now) => {
                // Stopping before the cell was told to commit: nothing of it is kept.
                if !commit && stop.load(Ordering::Acquire) {
                    return Err(CellError::Abandoned);
                }
                rx.park(WRITER_POLL);
                continue;
            }
            Err(queue::Empty::Done) => break,
        };
        // Counted as it comes (the progress line and the live view), written later.
        match &r {
            Record::Read {
                request_id,
                arrival_ns,
                chunks,
                ..
            } => {
                let n: u64 = chunks
                    .iter()
                    .map(|c| c.tokens.and_then(|t| u64::try_from(t).ok()).unwrap_or(0))
                    .sum();
                tokens.fetch_add(n, Ordering::Relaxed);
                if let Some(l) = &mut lanes {
                    l.add(*request_id, n, *arrival_ns, &tally, feed);
                }
            }
            Record::Request(q) => {
                tally.count(q);
                if let Some(l) = &mut lanes {
                    l.ended(q, &label, feed);
                }
            }
            Record::Event(e) => {
                if let Some(l) = &mut lanes
                    && e.kind == EventKind::Fault
                {
                    l.fault(e.detail.as_deref().unwrap_or("a fault"), &label, feed);
                }
            }
            Record::Commit => commit = true,
            Record::Metrics(_) | Record::Gpu(_) | Record::Replay(_) | Record::Turn(_) => {}
        }
        for r in stash.hold(r, weight) {
            write_record(&mut w, r)?;
        }
    }
    match &lanes {
        Some(l) => l.finish(&tally, feed),
        None => feed.lanes(Vec::new()),
    }
    if !commit {
        return Err(CellError::Abandoned);
    }
    for r in stash.rest() {
        write_record(&mut w, r)?;
    }
    Ok(Recorded {
        meta: w.commit()?,
        tally,
    })
}

/// Records the writer holds back, oldest first, up to [`STASH_BYTES`]: while a cell's
/// load runs the writer only counts what comes, and encodes it (the zstd raw capture,
/// Parquet rows) once the cell's requests have ended, so that work does not compete with
/// the requests it records. Past the bound the oldest are written as new ones come, as
/// without a stash. Nothing is lost by waiting: a cell is kept only when it commits.
#[derive(Default)]
struct Stash {
    held: std::collections::VecDeque<(Record, usize)>,
    bytes: usize,
}

impl Stash {
    /// Holds `r`, of [`queue::weight`] `weight`; returns the records to write now to stay
    /// within the bound.
    fn hold(&mut self, r: Record, weight: usize) -> impl Iterator<Item = Record> + '_ {
        let weight = weight + std::mem::size_of::<(Record, usize)>();
        self.bytes += weight;
        self.held.push_back((r, weight));
        std::iter::from_fn(move || {
            if self.bytes <= STASH_BYTES {
                return None;
            }
            let (r, weight) = self.held.pop_front()?;
            self.bytes -= weight;
            Some(r)
        })
    }

    /// Everything held, oldest first.
    fn rest(self) -> impl Iterator<Item = Record> {
        self.held.into_iter().map(|(r, _)| r)
    }
}

/// Writes one record into the cell's tables.
fn write_record(w: &mut CellWriter, r: Record) -> Result<(), CellError> {
    match r {
        Record::Read {
            request_id,
            arrival_ns,
            bytes,
            chunks,
        } => {
            if !bytes.is_empty() {
                w.raw.write(request_id, arrival_ns, &bytes)?;
            }
            for c in chunks {
                w.push_chunk(c)?;
            }
        }
        Record::Request(q) => w.push_request(*q)?,
        Record::Metrics(rows) => {
            for m in rows {
                w.push_metric(m)?;
            }
        }
        Record::Gpu(rows) => {
            for g in rows {
                w.push_gpu(g)?;
            }
        }
        Record::Event(e) => w.push_event(e)?,
        Record::Replay(r) => w.push_replay(*r)?,
        Record::Turn(t) => w.push_turn(t)?,
        Record::Commit => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(id: i64, bytes: usize) -> Record {
        Record::Read {
            request_id: id,
            arrival_ns: id,
            bytes: vec![0; bytes],
            chunks: Vec::new(),
        }
    }

    /// Holds `r` with its queue weight, as the writer does.
    fn hold(stash: &mut Stash, r: Record) -> Vec<Record> {
        let w = queue::weight(&r);
        stash.hold(r, w).collect()
    }

    fn id(r: &Record) -> i64 {
        match r {
            Record::Read { request_id, .. } => *request_id,
            _ => -1,
        }
    }

    #[test]
    fn the_stash_holds_records_up_to_its_bound_then_writes_the_oldest() {
        let mut stash = Stash::default();
        let third = STASH_BYTES / 3;
        assert_eq!(hold(&mut stash, read(1, third)).len(), 0);
        assert_eq!(hold(&mut stash, read(2, third)).len(), 0);
        assert_eq!(hold(&mut stash, Record::Commit).len(), 0, "under the bound");
        // The fourth passes the bound: the oldest goes out, and only as many as needed.
        let out: Vec<i64> = hold(&mut stash, read(4, third)).iter().map(id).collect();
        assert_eq!(out, [1]);
        assert!(stash.bytes <= STASH_BYTES);
        // A record heavier than the whole bound goes out with everything before it.
        let out: Vec<i64> = hold(&mut stash, read(5, STASH_BYTES))
            .iter()
            .map(id)
            .collect();
        assert_eq!(out, [2, -1, 4, 5]);
        assert_eq!(stash.bytes, 0);
        assert_eq!(hold(&mut stash, read(6, 10)).len(), 0);
        let rest: Vec<i64> = stash.rest().map(|r| id(&r)).collect();
        assert_eq!(rest, [6], "the rest, oldest first");
    }
}
