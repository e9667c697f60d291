//! Sampled KV block residency, as vLLM's `KVCacheMetricsCollector`
//! (`vllm/v1/core/kv_cache_metrics.py`) measures it: a sampled block is
//! born when allocated, accessed when a later request's prefix-cache hit
//! reuses it, and evicted when its memory is handed to new content; at the
//! eviction it yields its lifetime, its idle time and the gaps between its
//! last four accesses.
//!
//! The model of which block goes when: freed blocks join the tail of one
//! free queue and allocations take from its head (vLLM's LRU free queue),
//! so a block freed as the n-th entry is evicted by the n-th allocation.
//! Only sampled blocks are followed, by their place in that queue; a
//! prefix-cache hit of `h` blocks touches each resident sampled block with
//! probability `h / kv_blocks` (hits land anywhere in the cache), which
//! takes a free one back out of the queue.

use super::rng::Rng;
use crate::protocol::KvCacheEvictionEvent;

/// Where a sampled block is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// Held by the sequence with this key.
    Held(u64),
    /// In the free queue, evicted by the allocation that takes this entry.
    Free(u64),
}

#[derive(Debug)]
struct SampledBlock {
    birth: f64,
    /// The last four accesses, oldest first (vLLM's `deque(maxlen=4)`).
    accesses: Vec<f64>,
    place: Place,
}

impl SampledBlock {
    fn access(&mut self, now: f64) {
        if self.accesses.len() == 4 {
            self.accesses.remove(0);
        }
        self.accesses.push(now);
    }

    fn eviction(&self, now: f64) -> KvCacheEvictionEvent {
        let last = self.accesses.last().copied().unwrap_or(self.birth);
        KvCacheEvictionEvent {
            lifetime_seconds: now - self.birth,
            idle_seconds: now - last,
            reuse_gaps_seconds: self.accesses.windows(2).map(|w| w[1] - w[0]).collect(),
        }
    }
}

/// The sampled blocks of one engine and the evictions not yet reported.
#[derive(Debug)]
pub(crate) struct BlockResidency {
    sample_rate: f64,
    kv_blocks: u32,
    rng: Rng,
    /// Entries ever added to the free queue (the cache starts all free).
    pushed: u64,
    /// Entries ever taken from it.
    popped: u64,
    blocks: Vec<SampledBlock>,
    events: Vec<KvCacheEvictionEvent>,
}

impl BlockResidency {
    /// `sample_rate` 0 follows nothing.
    pub(crate) fn new(kv_blocks: u32, sample_rate: f64, seed: u64) -> Self {
        BlockResidency {
            sample_rate,
            kv_blocks,
            rng: Rng::new(seed),
            pushed: u64::from(kv_blocks),
            popped: 0,
            blocks: Vec::new(),
            events: Vec::new(),
        }
    }

    fn enabled(&self) -> bool {
        self.sample_rate > 0.0
    }

    /// `count` blocks taken from the free queue for sequence `owner`: the
    /// sampled blocks in those entries are evicted, and each new block is
    /// sampled with the sampling rate.
    pub(crate) fn allocate(&mut self, owner: u64, count: u32, now: f64) {
        if !self.enabled() || count == 0 {
            self.popped += u64::from(count);
            return;
        }
        let end = self.popped + u64::from(count);
        let events = &mut self.events;
        self.blocks.retain(|block| match block.place {
            Place::Free(entry) if entry < end => {
                events.push(block.eviction(now));
                false
            }
            _ => true,
        });
        self.popped = end;
        for _ in 0..count {
            if self.rng.chance(self.sample_rate) {
                self.blocks.push(SampledBlock {
                    birth: now,
                    accesses: vec![now],
                    place: Place::Held(owner),
                });
            }
        }
    }

    /// `count` blocks of sequence `owner` freed (to the queue's tail).
    pub(crate) fn free(&mut self, owner: u64, count: u32) {
        let last = self.pushed + u64::from(count).saturating_sub(1);
        self.pushed += u64::from(count);
        for block in &mut self.blocks {
            if block.place == Place::Held(owner) {
                block.place = Place::Free(last);
            }
        }
    }

    /// A prefix-cache hit of `hit_blocks` blocks by sequence `owner`.
    pub(crate) fn hit(&mut self, owner: u64, hit_blocks: u32, now: f64) {
        if !self.enabled() || hit_blocks == 0 {
            return;
        }
        let p = f64::from(hit_blocks) / f64::from(self.kv_blocks);
        for block in &mut self.blocks {
            if self.rng.chance(p) {
                block.access(now);
                block.place = Place::Held(owner);
            }
        }
    }

    /// The evictions since the last call.
    pub(crate) fn drain_events(&mut self) -> Vec<KvCacheEvictionEvent> {
        std::mem::take(&mut self.events)
    }

    /// Free-queue entries: equals the engine's free blocks.
    pub(crate) fn free_entries(&self) -> u64 {
        self.pushed - self.popped
    }
}
