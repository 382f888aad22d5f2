//! What a Parquet table writer holds per row group until its file closes: the live heap
//! (a counting allocator) after each row group of `chunks` rows, written as one file and
//! as the recorder writes it, in parts (`writer::DEFAULT_PART_ROW_GROUPS`).
//! `cargo run --release --manifest-path bench/row-group-memory/Cargo.toml -- [GROUPS] [ROWS]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use tokentrace_schemas::tables::{ChunkKind, ChunkRow, Chunks};
use tokentrace_schemas::writer::{TableWriter, WriterLimits};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn row(i: usize) -> ChunkRow {
    let words = [" the", " model", " writes", " a", " token", ",", " then"];
    let request = (i / 18) as i64;
    let seq = (i % 18) as i32;
    ChunkRow {
        request_id: request,
        seq,
        arrival_ns: (i as i64) * 53_000 + (i as i64 * 7919) % 20_000,
        queue_delay_ns: Some(2_000 + (i as i64 * 31) % 9_000),
        bytes: 180,
        kind: ChunkKind::Data,
        tokens: Some(1),
        completion_tokens: Some(seq + 1),
        content: Some(words[i % words.len()].to_string()),
        reasoning: None,
        finish_reason: None,
        error: None,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let groups: usize = std::env::args().nth(1).map_or(Ok(96), |s| s.parse())?;
    let rows_per: usize = std::env::args()
        .nth(2)
        .map_or(Ok(128 * 1024), |s| s.parse())?;
    println!("{groups} row groups of {rows_per} `chunks` rows; live heap after each 8th");
    println!("| row groups | one file: live bytes | in parts: live bytes | parts |");
    println!("|---:|---:|---:|---:|");
    let mut table = vec![(0isize, 0isize, 0usize); groups];
    for (i, part_row_groups) in [usize::MAX, WriterLimits::default().part_row_groups]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir()?;
        let limits = WriterLimits {
            max_row_group_rows: rows_per,
            part_row_groups,
            ..WriterLimits::default()
        };
        let path = dir.path().join("chunks.parquet");
        let base = LIVE.load(Ordering::Relaxed);
        let mut w = TableWriter::<Chunks>::with_limits(&path, limits)?;
        for (g, row_of) in table.iter_mut().enumerate() {
            for r in 0..rows_per {
                w.push(row(g * rows_per + r))?;
            }
            let live = LIVE.load(Ordering::Relaxed) - base;
            if i == 0 {
                row_of.0 = live;
            } else {
                row_of.1 = live;
                row_of.2 = 1 + tokentrace_schemas::layout::later_parts(&path).len();
            }
        }
        drop(w.finish()?);
    }
    for (g, (one, parts, n)) in table.iter().enumerate() {
        if (g + 1) % 8 == 0 {
            println!("| {} | {one} | {parts} | {n} |", g + 1);
        }
    }
    Ok(())
}
