//! The recorder's per-byte hot path: SSE framing of socket reads, reading each event into
//! chunk fields, and the whole assembler (rows built, as the recorder does per read).
//! Input: captured streams (fixtures/sse), repeated, fed in the read sizes a socket
//! gives. `cargo bench -p tokentrace-wire`.

use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};
use tokentrace_schemas::manifest::TokenCounting;
use tokentrace_schemas::tables::{Endpoint, RequestRow, Role};
use tokentrace_wire::event::parse;
use tokentrace_wire::sse::SseFramer;
use tokentrace_wire::{Assembler, End};

fn stream(name: &str, events: usize) -> (Vec<u8>, usize) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sse")
        .join(name);
    let one = std::fs::read(path).unwrap_or_default();
    let per = one.windows(2).filter(|w| w == b"\n\n").count().max(1);
    let copies = events.div_ceil(per);
    (one.repeat(copies), per * copies)
}

#[divan::bench(args = [64, 1024, 16384])]
fn frame_and_parse(bencher: Bencher, read_size: usize) {
    let (bytes, events) = stream("sim-completions-usage-ids.sse", 10_000);
    bencher
        .counter(BytesCount::new(bytes.len()))
        .counter(ItemsCount::new(events))
        .bench(|| {
            let mut framer = SseFramer::new();
            let mut tokens = 0usize;
            for (i, read) in bytes.chunks(read_size).enumerate() {
                let _ = framer.push_each(read, i as i64, |ev| {
                    tokens += parse(&ev).token_ids.unwrap_or(0) as usize;
                });
            }
            black_box(tokens)
        });
}

#[divan::bench]
fn frame_only(bencher: Bencher) {
    let (bytes, events) = stream("llamacpp-chat.sse", 10_000);
    bencher
        .counter(BytesCount::new(bytes.len()))
        .counter(ItemsCount::new(events))
        .bench(|| {
            let mut framer = SseFramer::new();
            let mut n = 0usize;
            for (i, read) in bytes.chunks(1024).enumerate() {
                let _ = framer.push_each(read, i as i64, |_| n += 1);
            }
            black_box(n)
        });
}

/// Reads of one event each (as a socket gives them at 100 tokens/s per stream) through
/// the assembler: framing, parsing and the `chunks` rows the recorder hands its writer.
#[divan::bench]
fn assemble_rows(bencher: Bencher) {
    let (bytes, events) = stream("sim-completions-usage-ids.sse", 10_000);
    let mut reads = Vec::new();
    let mut start = 0;
    for i in 1..bytes.len() {
        if bytes[i - 1] == b'\n' && bytes[i] == b'\n' {
            reads.push(&bytes[start..=i]);
            start = i + 1;
        }
    }
    bencher.counter(ItemsCount::new(events)).bench(|| {
        let row = RequestRow::unsent(1, Role::Measured, Endpoint::Completions, 0);
        let mut a = Assembler::new(TokenCounting::TokenIds, row);
        let mut rows = Vec::new();
        let mut stamp = || 0i64;
        for (i, read) in reads.iter().enumerate() {
            let _ = a.read(i as i64, read, &mut stamp, &mut rows);
            if rows.len() > 1024 {
                rows.clear();
            }
        }
        black_box(a.finish(End::Clean, 0, &mut rows))
    });
}

fn main() {
    divan::main();
}
