//! A cell's per-token values (gaps between token events, queueing delays) held in
//! bounded memory: appended in order, kept in memory up to a limit and written to an
//! unnamed temporary file beyond it; exact order statistics by radix selection.
//!
//! Selection takes a few passes over the values: each pass counts the values of the
//! interval that holds a wanted rank in 65,536 buckets, and keeps the bucket holding
//! it, until the interval is one value wide or holds few enough values to sort. The
//! result is the value a sort of the whole column would put at that rank.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Mutex;

/// Values a column holds in memory before it first writes them to its file (8 MiB);
/// from then on it writes every [`READ_VALUES`].
pub const MEMORY_VALUES: usize = 1 << 20;

/// Buckets of one counting pass.
const BUCKETS: usize = 1 << 16;

/// An interval with at most this many values is gathered and sorted.
const GATHER: u64 = 1 << 16;

/// What the passes of one scan may allocate together, counters and gathered values (at
/// least one pass is made whatever it needs: at most 512 KiB). The ITL summary's 18
/// ranks fit in one scan; a drill-down's 601 ranks take more where their intervals are
/// dense.
const SCAN_BYTES: usize = 8 << 20;

/// Values read from the file at a time, and written once a column has a file.
const READ_VALUES: usize = 1 << 16;

/// An append-only column of `i64`, exact order statistics in bounded memory.
pub struct Column {
    /// The values not yet written to the file (all of them while it has none).
    memory: Vec<i64>,
    /// The unnamed file holding the values before `memory`, and how many.
    file: Option<Mutex<std::fs::File>>,
    in_file: usize,
    limit: usize,
    min: i64,
    max: i64,
    /// The first error writing the file: the column's values are then incomplete.
    failed: Option<String>,
}

impl Default for Column {
    fn default() -> Self {
        Column::with_limit(MEMORY_VALUES)
    }
}

impl std::fmt::Debug for Column {
    /// The values in order (what the tests compare two loads by).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut values = Vec::new();
        let read = self.scan(&mut |v| values.push(v));
        match read {
            Ok(()) => f.debug_list().entries(values).finish(),
            Err(e) => write!(f, "<unreadable column: {e}>"),
        }
    }
}

/// A column with no values (what a cell without gaps or delays reads).
pub static EMPTY: Column = Column {
    memory: Vec::new(),
    file: None,
    in_file: 0,
    limit: 1,
    min: i64::MAX,
    max: i64::MIN,
    failed: None,
};

impl Column {
    /// A column holding at most `limit` values in memory (at least one).
    pub fn with_limit(limit: usize) -> Self {
        Column {
            memory: Vec::new(),
            file: None,
            in_file: 0,
            limit: limit.max(1),
            min: i64::MAX,
            max: i64::MIN,
            failed: None,
        }
    }

    pub fn len(&self) -> usize {
        self.in_file + self.memory.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `v`; past the memory limit, the values in memory go to the file.
    pub fn push(&mut self, v: i64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.memory.push(v);
        if self.memory.len() >= self.limit {
            self.spill();
        }
    }

    pub fn extend(&mut self, values: impl IntoIterator<Item = i64>) {
        for v in values {
            self.push(v);
        }
    }

    fn spill(&mut self) {
        if self.failed.is_some() {
            self.memory.clear();
            return;
        }
        let written = (|| -> std::io::Result<()> {
            if self.file.is_none() {
                self.file = Some(Mutex::new(tempfile::tempfile()?));
            }
            let Some(file) = &self.file else {
                return Ok(());
            };
            let mut file = file
                .lock()
                .map_err(|_| std::io::Error::other("a reader of the column panicked"))?;
            file.seek(SeekFrom::End(0))?;
            // A block at a time: a copy of every value in memory was 8 MiB more at the
            // peak of every long cell.
            let mut bytes = Vec::with_capacity(READ_VALUES * 8);
            for block in self.memory.chunks(READ_VALUES) {
                bytes.clear();
                for v in block {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                file.write_all(&bytes)?;
            }
            Ok(())
        })();
        match written {
            Ok(()) => self.in_file += self.memory.len(),
            Err(e) => {
                self.failed = Some(format!("cannot write a temporary file: {e}"));
            }
        }
        self.memory.clear();
        // A column that has a file writes a block at a time from then on: holding its
        // first limit's worth as a write buffer was 16 MiB at the peak of every long
        // cell, for two columns.
        if self.limit > READ_VALUES {
            self.limit = READ_VALUES;
            self.memory = Vec::with_capacity(READ_VALUES);
        }
    }

    /// The error that left the column incomplete, if writing its file failed.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Calls `f` with every value, in the order they were appended.
    pub fn scan(&self, f: &mut dyn FnMut(i64)) -> std::io::Result<()> {
        if let Some(e) = &self.failed {
            return Err(std::io::Error::other(e.clone()));
        }
        if let Some(file) = &self.file {
            let mut file = file
                .lock()
                .map_err(|_| std::io::Error::other("a reader of the column panicked"))?;
            file.seek(SeekFrom::Start(0))?;
            let mut buf = vec![0u8; READ_VALUES * 8];
            let mut left = self.in_file;
            while left > 0 {
                let n = left.min(READ_VALUES);
                file.read_exact(&mut buf[..n * 8])?;
                for b in buf[..n * 8].chunks_exact(8) {
                    let mut v = [0u8; 8];
                    v.copy_from_slice(b);
                    f(i64::from_le_bytes(v));
                }
                left -= n;
            }
        }
        for v in &self.memory {
            f(*v);
        }
        Ok(())
    }

    /// The count, least and greatest value (`None` when empty).
    pub fn extent(&self) -> Option<Extent> {
        (!self.is_empty()).then_some(Extent {
            n: self.len(),
            min: self.min,
            max: self.max,
        })
    }

    /// The values at `ranks` (0-based, ascending order) as a sort of the column would
    /// place them.
    pub fn select(&self, ranks: &[usize]) -> std::io::Result<BTreeMap<usize, i64>> {
        match (self.extent(), &self.file) {
            (None, _) => Ok(BTreeMap::new()),
            (Some(_), None) => {
                let mut sorted = self.memory.clone();
                sorted.sort_unstable();
                Ok(ranks
                    .iter()
                    .filter_map(|&r| sorted.get(r).map(|v| (r, *v)))
                    .collect())
            }
            (Some(e), Some(_)) => select(&|f| self.scan(f), e, ranks),
        }
    }
}

/// Something that calls its argument with each of a column's values in order (or
/// fails to read them).
pub type Scan<'a> = dyn Fn(&mut dyn FnMut(i64)) -> std::io::Result<()> + 'a;

/// How many values a scan gives, and their least and greatest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub n: usize,
    pub min: i64,
    pub max: i64,
}

impl Extent {
    /// The extent of the values a scan gives (one pass); `None` when it gives none.
    pub fn of(scan: &Scan<'_>) -> std::io::Result<Option<Self>> {
        let mut e = Extent {
            n: 0,
            min: i64::MAX,
            max: i64::MIN,
        };
        scan(&mut |v| {
            e.n += 1;
            e.min = e.min.min(v);
            e.max = e.max.max(v);
        })?;
        Ok((e.n > 0).then_some(e))
    }
}

/// Exactly what `figure` computes from the values at the ranks it reads: `figure` is
/// called once to learn its ranks (each read as 0), `select` gives the values at them,
/// and `figure` is called again with those values, each mapped by `value`. A rank
/// `select` leaves out reads as NaN.
pub fn at_ranks<T>(
    select: impl FnOnce(&[usize]) -> std::io::Result<BTreeMap<usize, i64>>,
    figure: impl Fn(&dyn Fn(usize) -> f64) -> T,
    value: impl Fn(i64) -> f64,
) -> std::io::Result<T> {
    let wanted = std::cell::RefCell::new(Vec::new());
    figure(&|i| {
        wanted.borrow_mut().push(i);
        0.0
    });
    let got = select(&wanted.into_inner())?;
    Ok(figure(&|i| got.get(&i).map_or(f64::NAN, |v| value(*v))))
}

/// One wanted rank being narrowed: the values of `[lo, hi]` hold it; `below` values
/// are less than `lo` and `count` lie in the interval.
#[derive(Debug, Clone, Copy)]
struct Target {
    rank: u64,
    lo: i64,
    hi: i64,
    below: u64,
    count: u64,
}

/// The values at `ranks` of what `scan` gives (whose extent is `e`) in ascending order,
/// exactly, in passes over `scan` that each hold at most 65,536 counters or values per
/// interval being narrowed, and [`SCAN_BYTES`] for all of them. Ranks at or past `e.n`
/// are left out.
pub fn select(
    scan: &Scan<'_>,
    e: Extent,
    ranks: &[usize],
) -> std::io::Result<BTreeMap<usize, i64>> {
    select_within(scan, e, ranks, SCAN_BYTES)
}

/// [`select`] with the passes of one scan holding at most `budget` bytes.
fn select_within(
    scan: &Scan<'_>,
    e: Extent,
    ranks: &[usize],
    budget: usize,
) -> std::io::Result<BTreeMap<usize, i64>> {
    let mut found = BTreeMap::new();
    let mut targets: Vec<Target> = ranks
        .iter()
        .filter(|&&r| r < e.n)
        .map(|&r| Target {
            rank: r as u64,
            lo: e.min,
            hi: e.max,
            below: 0,
            count: e.n as u64,
        })
        .collect();
    targets.sort_by_key(|t| t.rank);
    targets.dedup_by_key(|t| t.rank);
    loop {
        targets.retain(|t| {
            if t.lo == t.hi {
                found.insert(t.rank as usize, t.lo);
                false
            } else {
                true
            }
        });
        if targets.is_empty() {
            return Ok(found);
        }
        // The distinct intervals still to narrow (disjoint: each is one bucket of an
        // earlier pass, or the whole range), in order. A scan counts (or gathers) as
        // many as fit in `budget`, at least one; the rest wait for the next.
        let mut intervals: Vec<(i64, i64, u64)> =
            targets.iter().map(|t| (t.lo, t.hi, t.count)).collect();
        intervals.sort_unstable();
        intervals.dedup();
        debug_assert!(
            intervals.windows(2).all(|w| w[0].1 < w[1].0),
            "{intervals:?}"
        );
        let mut used = 0usize;
        let mut passes: Vec<Pass> = Vec::new();
        for &(lo, hi, count) in &intervals {
            let bytes = Pass::bytes(lo, hi, count);
            if !passes.is_empty() && used + bytes > budget {
                continue;
            }
            used += bytes;
            passes.push(Pass::new(lo, hi, count));
        }
        scan(&mut |v| {
            // The last interval starting at or below v, if v lies in it.
            let i = passes.partition_point(|p| p.lo <= v);
            if let Some(p) = i.checked_sub(1).and_then(|i| passes.get_mut(i)) {
                p.add(v);
            }
        })?;
        for p in &mut passes {
            if let Some(values) = &mut p.values {
                values.sort_unstable();
            }
        }
        for t in &mut targets {
            let Some(p) = passes.iter().find(|p| p.lo == t.lo && p.hi == t.hi) else {
                continue;
            };
            p.narrow(t);
        }
    }
}

/// One pass over one interval: its values gathered when few, else counted per bucket.
struct Pass {
    lo: i64,
    hi: i64,
    /// Bucket width (values per bucket) when counting.
    width: u128,
    counts: Counts,
    values: Option<Vec<i64>>,
}

/// Values per bucket: 32-bit while the interval holds fewer than 2^32 values (half the
/// bytes: a pass per wanted rank can be live at once, 18 of them for the ITL summary).
enum Counts {
    Narrow(Vec<u32>),
    Wide(Vec<u64>),
}

impl Counts {
    /// Whether an interval of `count` values needs 64-bit counts.
    fn wide(count: u64) -> bool {
        count > u64::from(u32::MAX)
    }

    fn new(buckets: usize, count: u64) -> Self {
        if Counts::wide(count) {
            Counts::Wide(vec![0; buckets])
        } else {
            Counts::Narrow(vec![0; buckets])
        }
    }

    fn add(&mut self, b: usize) {
        match self {
            Counts::Narrow(c) => {
                if let Some(c) = c.get_mut(b) {
                    *c += 1;
                }
            }
            Counts::Wide(c) => {
                if let Some(c) = c.get_mut(b) {
                    *c += 1;
                }
            }
        }
    }

    /// Each bucket's count, in order.
    fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Counts::Narrow(c) => Box::new(c.iter().map(|&n| u64::from(n))),
            Counts::Wide(c) => Box::new(c.iter().copied()),
        }
    }
}

impl Pass {
    /// The bucket width of a pass over `[lo, hi]` and its buckets; `None` when it gathers
    /// its `count` values instead.
    fn shape(lo: i64, hi: i64, count: u64) -> (u128, Option<usize>) {
        let span = (i128::from(hi) - i128::from(lo) + 1) as u128;
        let width = span.div_ceil(BUCKETS as u128).max(1);
        let buckets = (count > GATHER).then(|| span.div_ceil(width) as usize);
        (width, buckets)
    }

    /// What a pass over `[lo, hi]` holding `count` values allocates.
    fn bytes(lo: i64, hi: i64, count: u64) -> usize {
        match Pass::shape(lo, hi, count).1 {
            None => count as usize * 8,
            Some(buckets) => buckets * if Counts::wide(count) { 8 } else { 4 },
        }
    }

    fn new(lo: i64, hi: i64, count: u64) -> Self {
        let (width, buckets) = Pass::shape(lo, hi, count);
        Pass {
            lo,
            hi,
            width,
            counts: Counts::new(buckets.unwrap_or(0), count),
            values: buckets
                .is_none()
                .then(|| Vec::with_capacity(count as usize)),
        }
    }

    fn add(&mut self, v: i64) {
        if v < self.lo || v > self.hi {
            return;
        }
        match &mut self.values {
            Some(values) => values.push(v),
            None => {
                let b = ((i128::from(v) - i128::from(self.lo)) as u128 / self.width) as usize;
                self.counts.add(b);
            }
        }
    }

    /// Narrows `t` to the bucket holding its rank, or settles it from the gathered
    /// values (sorted).
    fn narrow(&self, t: &mut Target) {
        let within = t.rank - t.below;
        if let Some(values) = &self.values {
            let v = values.get(within as usize).copied().unwrap_or(t.hi);
            (t.lo, t.hi) = (v, v);
            return;
        }
        let mut before = 0u64;
        for (b, c) in self.counts.iter().enumerate() {
            if within < before + c {
                let lo = i128::from(self.lo) + (b as i128) * self.width as i128;
                let hi = (lo + self.width as i128 - 1).min(i128::from(self.hi));
                // Inside [self.lo, self.hi], so both fit an i64.
                t.lo = i64::try_from(lo).unwrap_or(self.lo);
                t.hi = i64::try_from(hi).unwrap_or(self.hi);
                t.below += before;
                t.count = c;
                return;
            }
            before += c;
        }
        // The counts hold every value of the interval, so the rank was found above.
        (t.lo, t.hi) = (self.hi, self.hi);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift), so the tests need no crate.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed.max(1);
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    fn check(values: &[i64], limit: usize) {
        let mut c = Column::with_limit(limit);
        c.extend(values.iter().copied());
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let mut ranks: Vec<usize> = vec![0, n / 2, n.saturating_sub(1), n * 9 / 10, n * 99 / 100];
        ranks.extend([n / 2 + 1, n * 999 / 1000, 1, n.saturating_sub(2)]);
        ranks.retain(|r| *r < n);
        let got = c.select(&ranks).expect("selects");
        for r in ranks {
            assert_eq!(
                got.get(&r),
                Some(&sorted[r]),
                "rank {r} of {n} (limit {limit})"
            );
        }
        let mut back = Vec::new();
        c.scan(&mut |v| back.push(v)).expect("scans");
        assert_eq!(back, values, "scan gives the values in order");
    }

    #[test]
    fn selection_equals_a_sort_on_random_constant_and_heavy_tailed_values() {
        let mut next = rng(7);
        let random: Vec<i64> = (0..200_000).map(|_| next() as i64).collect();
        let constant = vec![10_000_000i64; 150_000];
        // Heavy-tailed: mostly 10 ms with a few µs of jitter, 1% of stalls up to 30 s.
        let heavy: Vec<i64> = (0..300_000)
            .map(|_| {
                let r = next();
                if r.is_multiple_of(100) {
                    (r % 30_000_000_000) as i64
                } else {
                    10_000_000 + (r % 5_000) as i64
                }
            })
            .collect();
        let extremes: Vec<i64> = (0..100_000)
            .map(|i| match i % 3 {
                0 => i64::MIN + i,
                1 => i64::MAX - i,
                _ => i,
            })
            .collect();
        let two_values: Vec<i64> = (0..120_000)
            .map(|i| if i % 7 == 0 { -3 } else { 5 })
            .collect();
        for values in [&random, &constant, &heavy, &extremes, &two_values] {
            for limit in [1_000, 65_537, MEMORY_VALUES] {
                check(values, limit);
            }
        }
        check(&[], 4);
        check(&[42], 1);
        check(&[3, -1, 2], 1);
    }

    /// Many ranks at once (a drill-down asks 601), their passes admitted a few per
    /// scan, or one: the same values as a sort.
    #[test]
    fn many_ranks_in_a_small_budget_equal_a_sort() {
        let mut next = rng(57);
        let random: Vec<i64> = (0..200_000).map(|_| (next() % 5_000_000) as i64).collect();
        let clustered: Vec<i64> = (0..200_000)
            .map(|i| {
                1_000_000_000 + (next() % 2_000) as i64 + if i % 50 == 0 { 1 << 40 } else { 0 }
            })
            .collect();
        let constant = vec![7i64; 70_000];
        for values in [&random, &clustered, &constant] {
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let n = sorted.len();
            let ranks: Vec<usize> = (0..n).step_by(n.div_ceil(600)).chain([n - 1]).collect();
            let e = Extent {
                n,
                min: sorted[0],
                max: sorted[n - 1],
            };
            let scan = |f: &mut dyn FnMut(i64)| -> std::io::Result<()> {
                values.iter().for_each(|v| f(*v));
                Ok(())
            };
            for budget in [1, 600_000, SCAN_BYTES] {
                let got = select_within(&scan, e, &ranks, budget).expect("selects");
                for r in &ranks {
                    assert_eq!(
                        got.get(r),
                        Some(&sorted[*r]),
                        "rank {r} of {n}, budget {budget}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_column_with_a_file_writes_a_block_at_a_time() {
        let mut c = Column::default();
        c.extend(0..(MEMORY_VALUES as i64 + 10));
        assert_eq!(c.in_file, MEMORY_VALUES);
        assert!(
            c.memory.capacity() <= READ_VALUES,
            "{}",
            c.memory.capacity()
        );
        c.extend(0..(READ_VALUES as i64));
        assert_eq!(c.in_file, MEMORY_VALUES + READ_VALUES);
        assert_eq!(c.memory.len(), 10);
        assert!(
            c.memory.capacity() <= READ_VALUES,
            "{}",
            c.memory.capacity()
        );
        let got = c.select(&[0, MEMORY_VALUES + 5]).expect("selects");
        assert_eq!(got.get(&0), Some(&0));
        // 0..1 Mi+10 then 0..64 Ki: the value at that rank among both runs, sorted.
        let mut all: Vec<i64> = (0..(MEMORY_VALUES as i64 + 10))
            .chain(0..(READ_VALUES as i64))
            .collect();
        all.sort_unstable();
        assert_eq!(got.get(&(MEMORY_VALUES + 5)), Some(&all[MEMORY_VALUES + 5]));
    }

    #[test]
    fn a_pass_over_more_values_than_32_bits_count_narrows_alike() {
        for count in [1_000_000, u64::from(u32::MAX) + 1] {
            let mut p = Pass::new(0, 999_999, count);
            assert_eq!(
                matches!(p.counts, Counts::Wide(_)),
                count > u64::from(u32::MAX)
            );
            for v in 0..1_000_000 {
                p.add(v);
            }
            let mut t = Target {
                rank: 500_000,
                lo: 0,
                hi: 999_999,
                below: 0,
                count: 1_000_000,
            };
            p.narrow(&mut t);
            assert!(t.lo <= 500_000 && 500_000 <= t.hi, "{t:?}");
            assert_eq!(t.below, t.lo as u64);
            assert!(t.hi - t.lo < 20, "{t:?}");
        }
    }

    #[test]
    fn a_column_beyond_its_limit_holds_only_the_limit_in_memory() {
        let mut c = Column::with_limit(100);
        c.extend(0..1_050);
        assert_eq!(c.len(), 1_050);
        assert!(c.memory.len() < 100);
        assert_eq!(c.in_file, 1_000);
        assert_eq!(
            c.extent(),
            Some(Extent {
                n: 1_050,
                min: 0,
                max: 1_049
            })
        );
    }
}
