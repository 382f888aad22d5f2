//! The recorder's per-byte hot path: SSE framing of socket reads, then reading each event
//! into chunk fields. Input: captured vLLM-shaped streams (fixtures/sse), repeated, fed in
//! the read sizes a socket gives. `cargo bench -p tokentrace-wire`.

use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};
use tokentrace_wire::event::parse;
use tokentrace_wire::sse::SseFramer;

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
                let Ok(evs) = framer.push(read, i as i64) else {
                    continue;
                };
                for ev in &evs {
                    tokens += parse(ev).token_ids.unwrap_or(0) as usize;
                }
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
                n += framer.push(read, i as i64).map(|e| e.len()).unwrap_or(0);
            }
            black_box(n)
        });
}

fn main() {
    divan::main();
}
