//! One engine's CPU KV offload pool: what vLLM's offloading connectors (the
//! OffloadingConnector with its CPU spec, and the SimpleCPUOffloadConnector)
//! do with a preempted request's KV.
//!
//! A preempted request's computed KV is stored to the pool on its way out,
//! and loaded back at re-admission instead of recomputed. Stores are
//! asynchronous: until one completes, a lookup of its blocks is pending and
//! the scheduler skips the request. Each step's stores, loads, lookups and
//! failures are recorded for the connector's stats.

use super::config::KvOffloadConnector;
use super::limits::EngineLimits;

/// What the CPU offload pool did in one step, and its state at the step's
/// end: what either offloading connector reports of that step.
#[derive(Debug, Default)]
pub(crate) struct OffloadStep {
    pub(crate) store_bytes: u64,
    pub(crate) store_time: f64,
    pub(crate) store_sizes: Vec<f64>,
    pub(crate) load_bytes: u64,
    pub(crate) load_time: f64,
    pub(crate) load_sizes: Vec<f64>,
    /// Seconds of each lookup call, and of each deferred lookup from its
    /// first call to the one that resolved it.
    pub(crate) lookups: Vec<f64>,
    pub(crate) lookup_async_delays: Vec<f64>,
    /// Stores that found no room (the OffloadingConnector's allocation
    /// failures), and blocks dropped for want of room (the simple one's).
    pub(crate) allocation_failures: u64,
    pub(crate) dropped_blocks: u64,
    /// Blocks below the store threshold, not stored.
    pub(crate) stores_skipped: u64,
    pub(crate) stored_blocks: u64,
    pub(crate) loaded_blocks: u64,
    /// Pool blocks held, and those of stores not yet complete.
    pub(crate) used_blocks: u32,
    pub(crate) pending_store_blocks: u32,
}

/// Seconds of one offload lookup call: a fixed cost plus one per block
/// looked up (the connector hashes each block's key).
const LOOKUP_SECONDS: f64 = 2e-5;
const LOOKUP_SECONDS_PER_BLOCK: f64 = 5e-8;

/// A store to the offload pool not yet reported complete. vLLM's
/// OffloadingConnector submits the stores a step schedules at the start of
/// the next step (after that step's sampling transfers), and a worker
/// reports a store done at the end of the step it completes in; until then
/// a lookup of its blocks is pending (`HIT_PENDING`).
#[derive(Debug)]
struct PendingStore {
    key: u64,
    blocks: u32,
    /// The step that scheduled it.
    step: u64,
    seconds: f64,
    /// When it completes, once submitted.
    done_at: Option<f64>,
}

/// One request's side of the pool.
#[derive(Debug, Default)]
pub(crate) struct OffloadedKv {
    /// Tokens whose KV waits in the pool since a preemption, and the pool
    /// blocks they hold: loaded back at re-admission instead of recomputed.
    tokens: u32,
    blocks: u32,
    /// Offload lookups that found it (the store threshold counts them),
    /// and when its current lookup was first deferred.
    lookups: u32,
    deferred_at: Option<f64>,
}

/// The pool of one engine.
#[derive(Debug)]
pub(crate) struct OffloadPool {
    capacity: u32,
    connector: KvOffloadConnector,
    store_threshold: u32,
    block_size: u32,
    kv_bytes_per_token: u64,
    seconds_per_byte: f64,
    /// Blocks in use.
    used: u32,
    /// The step in the making, and the stores in flight.
    step: OffloadStep,
    pending_stores: Vec<PendingStore>,
    /// Steps run.
    steps: u64,
}

impl OffloadPool {
    /// The pool `limits` describe, if they give the engine one.
    pub(crate) fn configured(limits: &EngineLimits) -> Option<Self> {
        (limits.offload_blocks > 0).then(|| OffloadPool {
            capacity: limits.offload_blocks,
            connector: limits.offload_connector,
            store_threshold: limits.offload_store_threshold,
            block_size: limits.block_size,
            kv_bytes_per_token: limits.kv_bytes_per_token,
            seconds_per_byte: limits.offload_seconds_per_byte,
            used: 0,
            step: OffloadStep::default(),
            pending_stores: Vec::new(),
            steps: 0,
        })
    }

    fn lookup_seconds(&self, tokens: u32) -> f64 {
        LOOKUP_SECONDS + LOOKUP_SECONDS_PER_BLOCK * f64::from(tokens.div_ceil(self.block_size))
    }

    /// At the start of a step, `now`: the stores the previous step
    /// scheduled are submitted, and those complete by now are done.
    pub(crate) fn start_step(&mut self, now: f64) {
        self.steps += 1;
        let step = self.steps;
        self.pending_stores.retain_mut(|store| match store.done_at {
            None if store.step < step => {
                store.done_at = Some(now + store.seconds);
                true
            }
            None => true,
            Some(done) => done > now,
        });
    }

    /// Stores a preempted request's computed KV (whole blocks of its
    /// `computed` tokens), as vLLM's offloading connectors store blocks on
    /// their way out. Below the store threshold nothing is stored (the
    /// OffloadingConnector's skipped stores). Without room for all of it
    /// the OffloadingConnector's allocation fails and stores nothing; the
    /// SimpleCPUOffloadConnector stores the blocks that fit and drops the
    /// rest.
    pub(crate) fn store(&mut self, key: u64, computed: u32, kv: &mut OffloadedKv) {
        let bs = self.block_size;
        let blocks = computed / bs;
        if blocks == 0 {
            return;
        }
        let threshold = self.store_threshold;
        if threshold >= 2 && kv.lookups < threshold {
            self.step.stores_skipped += u64::from(blocks);
            return;
        }
        let free = self.capacity - self.used;
        let stored = match self.connector {
            KvOffloadConnector::Offloading if blocks > free => {
                self.step.allocation_failures += 1;
                return;
            }
            KvOffloadConnector::Offloading => blocks,
            KvOffloadConnector::Simple => {
                let stored = blocks.min(free);
                self.step.dropped_blocks += u64::from(blocks - stored);
                if stored == 0 {
                    return;
                }
                stored
            }
        };
        self.used += stored;
        kv.tokens = stored * bs;
        kv.blocks = stored;
        let bytes = u64::from(kv.tokens) * self.kv_bytes_per_token;
        let seconds = bytes as f64 * self.seconds_per_byte;
        let step = &mut self.step;
        step.store_bytes += bytes;
        step.store_time += seconds;
        step.store_sizes.push(bytes as f64);
        step.stored_blocks += u64::from(stored);
        self.pending_stores.push(PendingStore {
            key,
            blocks: stored,
            step: self.steps,
            seconds,
            done_at: None,
        });
    }

    /// Whether the lookup of a waiting request (`key`, `target` tokens to
    /// prefill) is pending: its KV's store is not complete, so vLLM's
    /// lookup gives no answer and the scheduler skips the request this
    /// step. A deferred lookup that resolves observes its delay (the
    /// OffloadingConnector's `lookup_async_delay`).
    pub(crate) fn lookup_pending(
        &mut self,
        key: u64,
        target: u32,
        kv: &mut OffloadedKv,
        now: f64,
    ) -> bool {
        if kv.blocks == 0 {
            return false;
        }
        if self.pending_stores.iter().any(|store| store.key == key) {
            kv.deferred_at.get_or_insert(now);
            let seconds = self.lookup_seconds(target);
            self.step.lookups.push(seconds);
            return true;
        }
        if let Some(since) = kv.deferred_at.take() {
            self.step.lookup_async_delays.push(now - since);
        }
        false
    }

    /// Looks a request up as the scheduler considers admitting it (`target`
    /// tokens to prefill): the tokens the pool gives back. At least one
    /// token is still computed, to produce the next.
    pub(crate) fn lookup(&mut self, target: u32, kv: &OffloadedKv) -> u32 {
        let seconds = self.lookup_seconds(target);
        self.step.lookups.push(seconds);
        kv.tokens.min(target.saturating_sub(1))
    }

    /// A request is admitted: its `restored` tokens come back from the
    /// pool, unless the prefix cache and the KV connector give it as many
    /// (`found`), and its pool blocks are freed.
    pub(crate) fn admitted(&mut self, kv: &mut OffloadedKv, restored: u32, found: u32) {
        kv.lookups += 1;
        if kv.blocks == 0 {
            return;
        }
        let tokens = if restored > found { restored } else { 0 };
        if tokens > 0 {
            let bytes = u64::from(tokens) * self.kv_bytes_per_token;
            let step = &mut self.step;
            step.load_bytes += bytes;
            step.load_time += bytes as f64 * self.seconds_per_byte;
            step.load_sizes.push(bytes as f64);
            step.loaded_blocks += u64::from(tokens.div_ceil(self.block_size));
        }
        self.used -= kv.blocks;
        kv.tokens = 0;
        kv.blocks = 0;
    }

    /// A request leaves at `now` (client abort): its pool blocks are freed.
    /// A store of its KV still in flight drains on.
    pub(crate) fn removed(&mut self, kv: &OffloadedKv, now: f64) {
        self.used -= kv.blocks;
        // vLLM observes a deferred lookup's delay when its request finishes.
        if let Some(since) = kv.deferred_at {
            self.step.lookup_async_delays.push(now - since);
        }
    }

    /// The step's record, with the pool's state at its end.
    pub(crate) fn take_step(&mut self) -> OffloadStep {
        let mut step = std::mem::take(&mut self.step);
        step.used_blocks = self.used;
        step.pending_store_blocks = self.pending_stores.iter().map(|s| s.blocks).sum();
        step
    }
}
