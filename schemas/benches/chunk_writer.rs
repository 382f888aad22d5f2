//! The chunk writer: rows into a Parquet `chunks` table (encode, compress, write) at the
//! sizes a cell produces. `cargo bench -p tokentrace-schemas`.

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use tokentrace_schemas::tables::{ChunkKind, ChunkRow, Chunks};
use tokentrace_schemas::writer::TableWriter;

fn rows(n: usize) -> Vec<ChunkRow> {
    let words = [
        "the", " model", " writes", " a", " token", ",", " then", " another",
    ];
    (0..n)
        .map(|i| {
            let request = (i % 64) as i64;
            let seq = (i / 64) as i32;
            ChunkRow {
                request_id: request,
                seq,
                arrival_ns: (i as i64) * 156_250 + (i as i64 * 7919) % 20_000,
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
        })
        .collect()
}

#[divan::bench(args = [10_000, 100_000])]
fn write_chunks(bencher: Bencher, n: usize) {
    let dir = tempfile::tempdir().ok();
    let path = dir
        .as_ref()
        .map(|d| d.path().join("chunks.parquet"))
        .unwrap_or_default();
    let input = rows(n);
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| input.clone())
        .bench_values(|rows| {
            let Ok(mut w) = TableWriter::<Chunks>::create(&path) else {
                return;
            };
            for r in rows {
                if w.push(r).is_err() {
                    return;
                }
            }
            black_box(w.finish().ok());
        });
}

fn main() {
    divan::main();
}
