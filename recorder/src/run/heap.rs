//! The recording process's heap and runtime, made ready before the first request: each
//! runtime worker's malloc arena has its top already touched and kept, so that the records
//! a cell holds until it ends cost no page faults while its requests run.
//!
//! Why (measured, BENCHMARKS.md "Equal load beside vllm-bench"): a cell's records are
//! built on the runtime's workers and held by the writer until the cell's requests end.
//! glibc gives each thread an arena of its own, grown a few pages at a time (an
//! `mprotect` call each: 5,400 in a 400-request cell at 20 req/s), and every new page is
//! a fault on first touch (about 5,300): together 7% of the recorder's CPU during the
//! load. Each worker touches its share of [`PREFAULT_BYTES`] when it first goes idle,
//! before any request, and the trim threshold keeps those pages (later cells reuse them).
//! One arena for every thread did as well at 20 req/s but made the workers wait on its
//! lock (1,500 futex calls a cell), a cost that grows with the cores of a GPU box.
//!
//! A cell's writer thread does the same with [`WRITER_PREFAULT_BYTES`] of its own arena
//! ([`prepare_writer`]), for a second reason: its transient buffers (a row group's pages,
//! a part's footer, the stash's deque) land at new places in its heap as a long cell goes
//! on, and each new high-water mark stays resident. Touched at the start, that room is
//! resident once, and a long cell's RSS stays flat (BENCHMARKS.md, "The writer's arena
//! touched at the start").
//!
//! Only on Linux with glibc; elsewhere [`prepare`], [`prepare_writer`] and the hook do
//! nothing.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes of heap touched before the first request, shared by the runtime's workers: the
/// writer queue's bound ([`crate::store::queue::QUEUE_BYTES`]), which covers what a cell of 400
/// requests at 20 req/s holds.
pub const PREFAULT_BYTES: usize = crate::store::queue::QUEUE_BYTES;

/// Bytes of heap a cell's writer thread touches before its first record: above the
/// writer's arena at the end of a 15-minute cell at 1,000 requests per second without it
/// (30.1-33.9 MiB in four runs, BENCHMARKS.md), below the 64 MiB of one arena's heap.
pub const WRITER_PREFAULT_BYTES: usize = 40 << 20;

/// The allocator took the settings [`prepare`] gives it.
static READY: AtomicBool = AtomicBool::new(false);

/// Sets the allocator up as the module says. Call it first thing in `main`, before any
/// thread starts.
pub fn prepare() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if glibc::settings() {
        READY.store(true, Ordering::Release);
    }
}

/// Sets the allocator up for a process that reads run folders rather than records
/// (`report`, `rescore`, `diff`, `watch`...): blocks of [`ANALYSIS_MMAP_BYTES`] and more
/// get mappings of their own, given back to the system when freed. glibc's default raises
/// that threshold each time such a block is freed (up to 32 MiB); the reader's large
/// transient buffers (record batches, a column's values, a batch of answers) then come
/// from the heap and keep its pages resident after they are freed. Measured on a cell of
/// 80 M tokens: 61.3 -> 53.5 MB peak RSS at the same heap peak (BENCHMARKS.md, "Cells of
/// any length"). Call it first thing, before any thread starts; only on Linux with glibc.
pub fn prepare_analysis() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::fixed_mmap_threshold(ANALYSIS_MMAP_BYTES);
}

/// The fixed threshold [`prepare_analysis`] sets: glibc's initial one.
pub const ANALYSIS_MMAP_BYTES: usize = 128 << 10;

/// Touches [`WRITER_PREFAULT_BYTES`] of the calling thread's arena, the first time a
/// cell's writer runs on this thread (a later cell's writer on the same blocking-pool
/// thread finds it touched). Does nothing unless [`prepare`] took.
pub fn prepare_writer() {
    touch_once(WRITER_PREFAULT_BYTES);
}

/// The multi-threaded runtime a recording runs on (tokio's defaults: a worker per CPU),
/// whose workers each touch their share of [`PREFAULT_BYTES`] once, when they first go
/// idle (which they do at start, before any task).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let workers = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let share = PREFAULT_BYTES / workers;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .on_thread_park(move || touch_once(share))
        .build()
}

/// Touches `bytes` of this thread's arena the first time it is called on this thread.
fn touch_once(bytes: usize) {
    thread_local! {
        static TOUCHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if TOUCHED.get() || !READY.load(Ordering::Acquire) {
        return;
    }
    TOUCHED.set(true);
    touch(bytes);
}

/// Allocates `bytes` in this thread's arena, writes them (calloc would skip fresh pages)
/// and frees them: with [`prepare`]'s settings the pages stay at the arena's top.
fn touch(bytes: usize) {
    let block = vec![1u8; bytes];
    std::hint::black_box(&block);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    /// Allocations below this come from an arena, not from `mmap` of their own (a worker's
    /// touched block must; a held record never needs its own mapping).
    const MMAP_THRESHOLD: usize = 64 << 20;
    /// Free memory at an arena's top is given back only above this.
    const TRIM_THRESHOLD: usize = 256 << 20;
    /// The main arena grows by at least this past what an allocation needs.
    const TOP_PAD: usize = 16 << 20;

    fn set(param: libc::c_int, value: usize) -> bool {
        let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets allocator tunables from plain integers; it is called
        // before any other thread exists.
        unsafe { libc::mallopt(param, value) == 1 }
    }

    /// Applies the settings; false when glibc refused one (the heap then works as before).
    pub fn settings() -> bool {
        set(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            & set(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            & set(libc::M_TOP_PAD, TOP_PAD)
    }

    /// A fixed mmap threshold (a set one is not raised as blocks are freed); false when
    /// glibc refused it.
    pub fn fixed_mmap_threshold(bytes: usize) -> bool {
        set(libc::M_MMAP_THRESHOLD, bytes)
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    /// Resident bytes of this process (`VmRSS`, in kB, from /proc).
    fn resident_bytes() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kb: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        kb * 1024
    }

    /// Runs test `name` again in a child process of its own (the test harness has
    /// threads already, and the allocator's settings must come before any): true in the
    /// child, which then runs the test's body; false in the parent, once the child
    /// passed.
    fn in_child(name: &str) -> bool {
        if std::env::var_os("TOKENTRACE_HEAP_CHILD").is_some() {
            return true;
        }
        let me = std::env::current_exe().expect("test binary");
        let out = std::process::Command::new(me)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env("TOKENTRACE_HEAP_CHILD", "1")
            .output()
            .expect("run the child");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("heap child ok"),
            "{text}"
        );
        false
    }

    #[test]
    fn the_prefaulted_block_stays_resident_after_it_is_freed() {
        if !in_child("run::heap::tests::the_prefaulted_block_stays_resident_after_it_is_freed") {
            return;
        }
        let before = resident_bytes();
        assert!(super::glibc::settings(), "glibc took the settings");
        super::touch(32 << 20);
        let after = resident_bytes();
        assert!(
            after >= before + (30 << 20),
            "resident {before} -> {after}: the freed block went back to the system"
        );
        // A later allocation is served from the touched top: no new resident pages.
        let v = vec![2u8; 16 << 20];
        std::hint::black_box(&v);
        let later = resident_bytes();
        assert!(later < after + (1 << 20), "resident {after} -> {later}");
        println!("heap child ok");
    }

    #[test]
    fn a_writer_thread_churns_inside_its_touched_arena() {
        if !in_child("run::heap::tests::a_writer_thread_churns_inside_its_touched_arena") {
            return;
        }
        super::prepare();
        // A thread of its own gets an arena of its own, as a cell's writer does.
        let report = std::thread::spawn(|| {
            let start = resident_bytes();
            super::prepare_writer();
            let touched = resident_bytes();
            // What a writer does: blocks of many sizes, some held while others come and
            // go (16-256 KiB, about 22 MiB at the most at once), in an order that leaves
            // holes.
            let mut held: Vec<Vec<u8>> = Vec::new();
            let mut peak = 0;
            for round in 0..6usize {
                for i in 0..150usize {
                    held.push(vec![3u8; (16 << 10) << ((i + round) % 5)]);
                }
                peak = peak.max(held.iter().map(Vec::len).sum::<usize>());
                let keep: Vec<Vec<u8>> = held.drain(..).step_by(3).collect();
                held = keep;
            }
            drop(held);
            let churned = resident_bytes();
            super::prepare_writer();
            let again = resident_bytes();
            (start, touched, peak, churned, again)
        })
        .join()
        .expect("the writer thread");
        let (start, touched, peak, churned, again) = report;
        assert!(
            touched >= start + super::WRITER_PREFAULT_BYTES - (2 << 20),
            "resident {start} -> {touched}: the writer's arena was not touched"
        );
        assert!(
            peak > 16 << 20,
            "held {peak} bytes at once: too few to tell"
        );
        assert!(
            churned < touched + (1 << 20),
            "resident {touched} -> {churned} after the churn: it went past the touched room"
        );
        assert!(
            again < churned + (1 << 20),
            "resident {churned} -> {again}: a second call touched again"
        );
        println!("heap child ok");
    }
}
