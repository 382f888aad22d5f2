//! The prefix cache's blocks with their last use, evicted least recently used first in
//! O(log n) a block: an age index beside the map, where a sort of the whole cache on
//! every eviction cost the engine thread a step's time per finished request. As in
//! vLLM, a block a running sequence holds is out of the age index (never evicted), and
//! the cached blocks no sequence holds live in the KV cache's free room.

use std::collections::{BTreeSet, HashMap};

/// Block-chain hashes with the step that last used each, at most `capacity` of them.
#[derive(Debug)]
pub(super) struct PrefixCache {
    last: HashMap<u64, u64>,
    /// `(last use, hash)` of every block in `last` that is not held: the first is the
    /// one to evict (the lowest hash among blocks last used in the same step).
    by_age: BTreeSet<(u64, u64)>,
    /// Blocks held by running sequences, with how many hold each: cached ones are
    /// pinned (never evicted); each takes its room in the KV cache once, however many
    /// hold it.
    held: HashMap<u64, u32>,
    capacity: usize,
}

impl PrefixCache {
    pub(super) fn new(capacity: usize) -> Self {
        PrefixCache {
            last: HashMap::new(),
            by_age: BTreeSet::new(),
            held: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    pub(super) fn contains(&self, hash: u64) -> bool {
        self.last.contains_key(&hash)
    }

    /// Marks a cached block used at `step`; a block not cached stays out.
    pub(super) fn touch(&mut self, hash: u64, step: u64) {
        if self.contains(hash) {
            self.insert(hash, step);
        }
    }

    /// Caches a block used at `step`, then evicts the least recently used blocks no
    /// sequence holds past capacity.
    pub(super) fn insert(&mut self, hash: u64, step: u64) {
        if let Some(old) = self.last.insert(hash, step) {
            self.by_age.remove(&(old, hash));
        }
        if !self.held.contains_key(&hash) {
            self.by_age.insert((step, hash));
        }
        while self.last.len() > self.capacity && self.evict_oldest() {}
    }

    /// A running sequence holds a block: cached, it stays cached until no sequence
    /// holds it; a block not cached stays out.
    pub(super) fn hold(&mut self, hash: u64) {
        let count = self.held.entry(hash).or_insert(0);
        *count += 1;
        if *count == 1
            && let Some(&step) = self.last.get(&hash)
        {
            self.by_age.remove(&(step, hash));
        }
    }

    /// A sequence lets go of a block it held (it finished, was preempted or aborted).
    /// Once none holds it, a cached block goes back among the evictable as the most
    /// recently used, at `step` (vLLM appends a freed block to its free queue's end).
    pub(super) fn release(&mut self, hash: u64, step: u64) {
        let Some(count) = self.held.get_mut(&hash) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.held.remove(&hash);
            self.touch(hash, step);
        }
    }

    pub(super) fn is_held(&self, hash: u64) -> bool {
        self.held.contains_key(&hash)
    }

    /// Blocks held by running sequences, each once.
    pub(super) fn held_blocks(&self) -> usize {
        self.held.len()
    }

    /// Evicts the least recently used blocks no sequence holds until at most `room` are
    /// left: the
    /// KV cache's blocks not in use by running sequences, which vLLM's cached-but-free
    /// blocks share with every new allocation.
    pub(super) fn fit_free(&mut self, room: usize) {
        while self.by_age.len() > room && self.evict_oldest() {}
    }

    /// Evicts the least recently used block no sequence holds; false when all are held.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, oldest)) = self.by_age.pop_first() else {
            return false;
        };
        self.last.remove(&oldest);
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_schemas::rng::Rng;

    /// The cache as it was kept before the age index: a map, and on overflow a sort of
    /// every `(last use, hash)` with the lowest evicted.
    struct Sorted {
        last: HashMap<u64, u64>,
        capacity: usize,
    }

    impl Sorted {
        fn insert(&mut self, hash: u64, step: u64) {
            self.last.insert(hash, step);
            if self.last.len() > self.capacity {
                let mut ages: Vec<(u64, u64)> = self.last.iter().map(|(h, t)| (*t, *h)).collect();
                ages.sort_unstable();
                let excess = self.last.len() - self.capacity;
                for (_, h) in ages.into_iter().take(excess) {
                    self.last.remove(&h);
                }
            }
        }
    }

    #[test]
    fn evicts_the_same_blocks_as_a_sort_of_the_whole_cache() {
        let mut rng = Rng::new(7);
        for capacity in [1, 5, 64] {
            let mut cache = PrefixCache::new(capacity);
            let mut sorted = Sorted {
                last: HashMap::new(),
                capacity,
            };
            for step in 0..5_000u64 {
                // Few distinct hashes, so blocks come back, are touched, and share steps.
                let hash = rng.next_u64() % 200;
                if rng.next_u64().is_multiple_of(3) {
                    cache.touch(hash, step / 4);
                    if let Some(t) = sorted.last.get_mut(&hash) {
                        *t = step / 4;
                    }
                } else {
                    cache.insert(hash, step / 4);
                    sorted.insert(hash, step / 4);
                }
                assert_eq!(cache.last, sorted.last, "capacity {capacity}, step {step}");
                assert_eq!(cache.by_age.len(), cache.len());
            }
            assert_eq!(cache.len(), capacity);
        }
    }

    #[test]
    fn touching_a_block_keeps_it_over_older_ones() {
        let mut cache = PrefixCache::new(2);
        cache.insert(1, 0);
        cache.insert(2, 1);
        cache.touch(1, 2);
        cache.touch(3, 2);
        cache.insert(4, 3);
        assert!(cache.contains(1) && cache.contains(4));
        assert!(!cache.contains(2) && !cache.contains(3));
    }

    #[test]
    fn a_held_block_outlives_the_free_room_and_comes_back_as_just_used() {
        let mut cache = PrefixCache::new(10);
        for (hash, step) in [(1, 0), (2, 1), (3, 2), (4, 3)] {
            cache.insert(hash, step);
        }
        cache.hold(1);
        cache.hold(9);
        cache.fit_free(1);
        assert!(cache.contains(1) && cache.contains(4));
        assert!(!cache.contains(2) && !cache.contains(3) && !cache.contains(9));
        cache.release(1, 5);
        cache.release(9, 5);
        cache.fit_free(1);
        assert!(cache.contains(1) && !cache.contains(4), "1 was freed last");
        assert!(!cache.contains(9));
        cache.fit_free(0);
        assert_eq!(cache.len(), 0);
    }
}
