//! The writer queue's byte bound: senders wait for room, the writer gives it back, a
//! record heavier than the whole bound still passes, and a gone writer frees waiters.

use futures_util::FutureExt;
use tokentrace_recorder::store::queue::Record;
use tokentrace_recorder::store::queue::{Closed, Empty, queue, weight};

fn read(bytes: usize) -> Record {
    Record::Read {
        request_id: 1,
        arrival_ns: 0,
        bytes: vec![b'x'; bytes],
        chunks: Vec::new(),
    }
}

#[tokio::test]
async fn senders_wait_for_room_the_writer_gives_back() {
    let (tx, mut rx) = queue(1000, 100 << 10);
    assert_eq!(weight(&read(60 << 10)), 60 << 10);
    tx.send(read(60 << 10))
        .now_or_never()
        .expect("room for the first")
        .expect("open");
    let mut second = Box::pin(tx.send(read(60 << 10)));
    assert!(
        (&mut second).now_or_never().is_none(),
        "120 KiB do not fit in 100 KiB: the second waits"
    );
    // Waiters are served in order: a small record queues behind the waiting one.
    let mut third = Box::pin(tx.send(read(10 << 10)));
    assert!((&mut third).now_or_never().is_none(), "no barging");
    assert!(matches!(rx.try_recv(), Ok(Record::Read { bytes, .. }) if bytes.len() == 60 << 10));
    // An empty queue gives the room back: the waiting senders go.
    assert_eq!(rx.try_recv().err(), Some(Empty::Now));
    second.await.expect("sent once the room came back");
    third.await.expect("and the next");
    assert!(matches!(rx.try_recv(), Ok(Record::Read { bytes, .. }) if bytes.len() == 60 << 10));
    assert!(matches!(rx.try_recv(), Ok(Record::Read { bytes, .. }) if bytes.len() == 10 << 10));
}

#[tokio::test]
async fn a_record_heavier_than_the_bound_takes_all_of_it() {
    let (tx, mut rx) = queue(1000, 1 << 10);
    tx.send(read(5 << 10))
        .now_or_never()
        .expect("never stuck")
        .expect("open");
    assert!(
        tx.send(read(1)).now_or_never().is_none(),
        "the bound is spent"
    );
    assert!(rx.try_recv().is_ok());
    assert_eq!(rx.try_recv().err(), Some(Empty::Now));
    tx.send(read(1))
        .now_or_never()
        .expect("room again")
        .expect("open");
    drop(tx);
    assert!(rx.recv().await.is_some());
    assert!(rx.recv().await.is_none(), "every sender gone, all taken");
}

#[tokio::test]
async fn a_gone_writer_frees_waiting_senders() {
    let (tx, rx) = queue(1000, 1 << 10);
    tx.send(read(1 << 10)).await.expect("open");
    let waiting = tokio::spawn({
        let tx = tx.clone();
        async move { tx.send(read(1 << 10)).await }
    });
    tokio::task::yield_now().await;
    drop(rx);
    assert_eq!(waiting.await.expect("task"), Err(Closed));
    assert_eq!(tx.send(read(0)).await, Err(Closed));
}
