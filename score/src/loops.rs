//! Exact-repetition finder for the Looped verdict: the longest stretches of a text that
//! repeat one cycle back to back, measured in Unicode characters. Linear-ish in the
//! text's length: k-gram anchors propose cycle lengths, and each proposal is verified
//! by extending a character-by-character match.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use tokentrace_schemas::rng::mix;

/// A cheap hasher (SplitMix64's finalizer) for keys that are single integers (k-gram
/// hashes, cycle lengths); std's SipHash costs more than the search itself.
#[derive(Debug, Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = mix(self.0 ^ u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = mix(v as u64);
    }
}

/// A stretch of text that repeats a cycle back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repetition {
    /// First character of the stretch.
    pub start: usize,
    /// Length of the cycle, in characters.
    pub cycle: usize,
    /// Length of the whole stretch, in characters (at least two cycles).
    pub span: usize,
}

impl Repetition {
    /// Whole cycles in the stretch.
    pub fn cycles(&self) -> usize {
        self.span / self.cycle.max(1)
    }
}

/// What to look for.
#[derive(Debug, Clone, Copy)]
pub struct Search {
    /// Shortest cycle looked for (1: all).
    pub min_cycle: usize,
    /// Longest cycle looked for.
    pub max_cycle: usize,
    /// Per position, compare with at most this many earlier occurrences of its k-gram,
    /// the nearest first (0: all within `max_cycle`). Bounds the cost of a search
    /// without a cycle cap: in a repeated passage the previous copy is the nearest.
    pub nearest: usize,
    /// Shortest stretch reported.
    pub min_span: usize,
    /// Skip cycles of whitespace only.
    pub ignore_whitespace: bool,
}

const HASH_BASE: u64 = 0x100_0000_01b3;

/// Bits of the anchor filter (8 KiB: stays in the first-level cache).
const FILTER_BITS: usize = 1 << 16;

/// A k-gram hash's bit in the anchor filter: its high bits after a multiply that mixes
/// every bit of it into them.
fn filter_bit(h: u64) -> usize {
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize
}

/// Every maximal repetition of at least `search.min_span` characters and two cycles, one
/// per (cycle length, stretch), ordered by start then cycle.
pub fn repetitions(text: &[char], search: Search) -> Vec<Repetition> {
    let n = text.len();
    let min_span = search.min_span.max(2);
    // A repetition spans at least two cycles of at least `min_cycle` characters.
    if n < min_span
        || n < search.min_cycle.saturating_mul(2)
        || search.max_cycle == 0
        || search.min_cycle > search.max_cycle
    {
        return Vec::new();
    }
    // A repetition of two cycles or more spanning min_span has a match run of at least
    // min_span / 2 characters; k-gram + stride below min_span / 4 guarantees an anchor
    // falls wholly inside any such run.
    let k = (min_span / 8).clamp(1, 16);
    let stride = (min_span / 8).clamp(1, 32);
    let mut pow = 1u64;
    for _ in 0..k {
        pow = pow.wrapping_mul(HASH_BASE);
    }
    let mut hashes = Vec::with_capacity(n + 1 - k);
    let mut h = 0u64;
    for (i, c) in text.iter().enumerate() {
        h = h.wrapping_mul(HASH_BASE).wrapping_add(u64::from(*c as u32));
        if i >= k {
            h = h.wrapping_sub(pow.wrapping_mul(u64::from(text[i - k] as u32)));
        }
        if i + 1 >= k {
            hashes.push(h);
        }
    }
    // Anchors every `stride` positions, by hash; every position then looks up the
    // anchors that share its k-gram within `max_cycle` before it.
    let mut anchors: HashMap<u64, Vec<usize>, BuildHasherDefault<Identity>> = HashMap::default();
    // A bit per anchor hash (a few bits of it, mixed): most positions share no anchor's
    // k-gram, and one bit test rules them out before the map is asked.
    let mut filter = vec![0u64; FILTER_BITS / 64];
    for a in (0..hashes.len()).step_by(stride) {
        anchors.entry(hashes[a]).or_default().push(a);
        let b = filter_bit(hashes[a]);
        filter[b / 64] |= 1 << (b % 64);
    }
    // Per cycle length, where the last verified stretch's match run ended.
    let mut covered: HashMap<usize, usize, BuildHasherDefault<Identity>> = HashMap::default();
    let mut found = Vec::new();
    for (j, h) in hashes.iter().enumerate() {
        let b = filter_bit(*h);
        if filter[b / 64] & (1 << (b % 64)) == 0 {
            continue;
        }
        let Some(list) = anchors.get(h) else { continue };
        let from = list.partition_point(|&a| a.saturating_add(search.max_cycle) < j);
        let to = list.partition_point(|&a| a + search.min_cycle.max(1) <= j);
        let candidates = list.get(from..to).unwrap_or(&[]);
        let take = if search.nearest == 0 {
            candidates.len()
        } else {
            search.nearest
        };
        for &a in candidates.iter().rev().take(take) {
            let p = j - a;
            if covered.get(&p).is_some_and(|&end| a < end) {
                continue;
            }
            if text[a..a + k] != text[j..j + k] {
                continue; // hash collision
            }
            let mut s = a;
            while s > 0 && text[s - 1] == text[s - 1 + p] {
                s -= 1;
            }
            let mut e = a + k;
            while e + p < n && text[e] == text[e + p] {
                e += 1;
            }
            covered.insert(p, e);
            let span = e - s + p;
            if span < min_span || span < 2 * p {
                continue;
            }
            if search.ignore_whitespace && text[s..s + p].iter().all(|c| c.is_whitespace()) {
                continue;
            }
            found.push(Repetition {
                start: s,
                cycle: p,
                span,
            });
        }
    }
    found.sort_by_key(|r| (r.start, r.cycle));
    // The same stretch is found at every multiple of its cycle: keep the shortest cycle.
    let mut kept: Vec<Repetition> = Vec::new();
    for r in found {
        let dup = kept.iter().any(|k| {
            r.cycle % k.cycle == 0 && r.start >= k.start && r.start + r.span <= k.start + k.span
        });
        if !dup {
            kept.push(r);
        }
    }
    kept
}

/// The text as characters, digits replaced by `0` when `normalize_digits`.
pub fn chars(text: &str, normalize_digits: bool) -> Vec<char> {
    text.chars()
        .map(|c| {
            if normalize_digits && c.is_ascii_digit() {
                '0'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(min_span: usize) -> Search {
        Search {
            min_cycle: 1,
            max_cycle: 4096,
            nearest: 0,
            min_span,
            ignore_whitespace: true,
        }
    }

    fn best(text: &str, min_span: usize) -> Option<Repetition> {
        repetitions(&chars(text, false), search(min_span))
            .into_iter()
            .max_by_key(|r| (r.span, std::cmp::Reverse(r.cycle)))
    }

    #[test]
    fn finds_a_loop_after_free_text() {
        let head: String = (0..300).map(|i| format!("w{i} ")).collect();
        let cycle = "The answer is that we should consider the following again. ";
        let text = format!("{head}{}", cycle.repeat(80));
        let r = best(&text, 1024).expect("a loop");
        assert_eq!(r.cycle, cycle.chars().count());
        assert!(r.cycles() >= 80, "{r:?}");
        // The stretch starts where the cycle's text starts (or a little before, if the
        // head happens to end like the cycle does).
        assert!(r.start <= head.chars().count(), "{r:?}");
        assert!(r.start + r.span == text.chars().count(), "{r:?}");
    }

    #[test]
    fn counts_unicode_characters() {
        let cycle = "数学は美しい。🙂 ";
        let text = cycle.repeat(200);
        let r = best(&text, 1024).expect("a loop");
        assert_eq!(r.cycle, cycle.chars().count());
        assert_eq!(r.span, text.chars().count());
    }

    #[test]
    fn numbered_lines_are_not_exact_repetition() {
        let text: String = (0..400)
            .map(|i| format!("item {i}: the same words\n"))
            .collect();
        assert_eq!(best(&text, 1024), None);
        let normalized = repetitions(&chars(&text, true), search(1024));
        assert!(!normalized.is_empty());
    }

    #[test]
    fn whitespace_runs_are_ignored() {
        let text = format!("start{}end", " ".repeat(5000));
        assert_eq!(best(&text, 1024), None);
    }

    #[test]
    fn free_text_has_no_repetition() {
        let text: String = (0..2000)
            .map(|i| format!("{} ", i * 7919 % 10007))
            .collect();
        assert_eq!(best(&text, 256), None);
    }

    #[test]
    fn short_text_and_long_cycles() {
        assert_eq!(best("abcabc", 1024), None);
        let mut x = 12345u32;
        let cycle: String = (0..3000)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                char::from(b'a' + ((x >> 16) % 26) as u8)
            })
            .collect();
        let text = cycle.repeat(3);
        let r = best(&text, 1024).expect("a repetition");
        assert_eq!(r.cycle, cycle.chars().count());
        assert_eq!(r.cycles(), 3);
    }
}
