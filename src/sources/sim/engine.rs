//! One engine's continuous-batching scheduler over a paged KV cache, modelled
//! on vLLM's v1 scheduler with the recompute preemption policy.
//!
//! Each step: running requests (in admission order) get their decode token or
//! next prefill chunk; a request that needs a KV block when none is free
//! preempts the most recently admitted running request (freeing all its
//! blocks, back to the front of the waiting queue) until the allocation fits.
//! Then, if nothing was preempted, waiting requests are admitted first come
//! first served while seats, blocks and the token budget allow. A re-admitted
//! request recomputes its prompt plus the tokens it had generated.
//!
//! The KV connector's loads (`loads.rs`), the CPU offload pool (`offload.rs`)
//! and the NIXL transfers (`nixl.rs`) keep their own state and rules; the
//! scheduler calls them at the points of a step where vLLM's scheduler hands
//! over to its connectors, so that each can be read without the others.

use std::collections::VecDeque;

use super::limits::EngineLimits;
use super::loads::KvLoads;
use super::nixl::{Nixl, NixlStep};
use super::offload::{OffloadPool, OffloadStep};
use super::residency::BlockResidency;
use super::rng::Rng;
use super::sequence::Sequence;
use crate::protocol::{
    EngineCoreOutput, KvCacheEvictionEvent, KvFetchStages, PreemptionReason, SpecDecodingStats,
};

/// What one step produced.
#[derive(Debug, Default)]
pub(crate) struct StepResult {
    pub(crate) outputs: Vec<EngineCoreOutput>,
    /// Requests that finished in this step (their blocks are already free).
    pub(crate) finished: Vec<Sequence>,
    /// Tokens computed in the step (prefill chunks plus decode tokens).
    pub(crate) tokens: u32,
    pub(crate) preemptions: u32,
    pub(crate) prefix_queries: u64,
    pub(crate) prefix_hits: u64,
    /// Tokens the KV connector was asked for, and found.
    pub(crate) external_queries: u64,
    pub(crate) external_hits: u64,
    /// Of the tokens computed, those of requests in decode, and the tokens
    /// of context their attention read.
    pub(crate) context_tokens_read: u64,
    /// Speculative decoding of the step (when configured).
    pub(crate) spec: Option<SpecDecodingStats>,
    /// The CPU offload pool's step (when configured).
    pub(crate) offload: Option<OffloadStep>,
    /// The NIXL connector's step (when configured).
    pub(crate) nixl: Option<NixlStep>,
}

/// One engine: KV blocks, waiting queue, running batch.
#[derive(Debug)]
pub(crate) struct Engine {
    limits: EngineLimits,
    free_blocks: u32,
    waiting: VecDeque<Sequence>,
    /// In admission order; the last is the first to be preempted.
    running: Vec<Sequence>,
    /// The KV connector's loads, their requests out of the waiting queue.
    loads: KvLoads,
    residency: BlockResidency,
    /// Speculative acceptance draws.
    rng: Rng,
    next_key: u64,
    /// The CPU offload pool, and the NIXL connector (when configured).
    offload: Option<OffloadPool>,
    nixl: Option<Nixl>,
}

fn blocks_for(tokens: u32, block_size: u32) -> u32 {
    tokens.div_ceil(block_size)
}

impl Engine {
    /// `residency`: the sampled block model; `seed`: of the speculative
    /// draws and the NIXL failures.
    pub(crate) fn new(limits: EngineLimits, residency: BlockResidency, seed: u64) -> Self {
        Engine {
            limits,
            free_blocks: limits.kv_blocks,
            waiting: VecDeque::new(),
            running: Vec::new(),
            loads: KvLoads::new(&limits),
            residency,
            rng: Rng::new(seed),
            next_key: 0,
            offload: OffloadPool::configured(&limits),
            nixl: Nixl::configured(&limits, seed),
        }
    }

    pub(crate) fn enqueue(&mut self, mut sequence: Sequence) {
        self.next_key += 1;
        sequence.key = self.next_key;
        if sequence.request.high_priority {
            // Priority scheduling: behind the waiting high-priority
            // requests, ahead of every low-priority one.
            let at = self.first_low_priority_waiting();
            self.waiting.insert(at, sequence);
        } else {
            self.waiting.push_back(sequence);
        }
    }

    /// Where the waiting queue's low-priority requests begin.
    fn first_low_priority_waiting(&self) -> usize {
        self.waiting
            .iter()
            .position(|s| !s.request.high_priority)
            .unwrap_or(self.waiting.len())
    }

    pub(crate) fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || self.loads.len() > 0
    }

    pub(crate) fn running(&self) -> usize {
        self.running.len()
    }

    /// Every waiting request, deferred ones included.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len() + self.deferred()
    }

    /// Waiting requests held back by their KV load (vLLM's skipped waiting).
    pub(crate) fn deferred(&self) -> usize {
        self.loads.len()
    }

    /// Waiting requests by KV load stage; `None` without a connector.
    pub(crate) fn kv_fetch_stages(&self) -> Option<KvFetchStages> {
        (self.limits.external_hit_rate > 0.0).then(|| self.loads.stages())
    }

    /// Sampled block evictions since the last call.
    pub(crate) fn drain_evictions(&mut self) -> Vec<KvCacheEvictionEvent> {
        self.residency.drain_events()
    }

    /// LoRA adapters of the running and of the waiting requests, each once,
    /// in adapter order (vLLM lists them in its dictionary's order; a fixed
    /// order keeps one series per set of adapters).
    pub(crate) fn adapters(&self, name: impl Fn(u32) -> String) -> (Vec<String>, Vec<String>) {
        fn distinct<'a>(
            sequences: impl Iterator<Item = &'a Sequence>,
            name: &impl Fn(u32) -> String,
        ) -> Vec<String> {
            let mut adapters: Vec<u32> = sequences.filter_map(|s| s.request.adapter).collect();
            adapters.sort_unstable();
            adapters.dedup();
            adapters.into_iter().map(name).collect()
        }
        let waiting = self.loads.sequences().chain(self.waiting.iter());
        (
            distinct(self.running.iter(), &name),
            distinct(waiting, &name),
        )
    }

    fn allocate(&mut self, key: u64, blocks: u32, now: f64) {
        self.free_blocks -= blocks;
        self.residency.allocate(key, blocks, now);
    }

    fn release(&mut self, key: u64, blocks: u32) {
        self.free_blocks += blocks;
        self.residency.free(key, blocks);
    }

    pub(crate) fn used_blocks(&self) -> u32 {
        self.limits.kv_blocks - self.free_blocks
    }

    pub(crate) fn kv_usage(&self) -> f64 {
        f64::from(self.used_blocks()) / f64::from(self.limits.kv_blocks)
    }

    /// Removes a request (client abort) at `now`; frees its blocks. Returns
    /// it if it was here. A store of its KV still in flight drains on.
    pub(crate) fn remove(&mut self, id: &str, now: f64) -> Option<Sequence> {
        let sequence = if let Some(i) = self.running.iter().position(|s| s.request.id == id) {
            self.running.remove(i)
        } else if let Some(sequence) = self.loads.remove(id) {
            sequence
        } else {
            let i = self.waiting.iter().position(|s| s.request.id == id)?;
            self.waiting.remove(i)?
        };
        self.release(sequence.key, sequence.blocks);
        if let Some(pool) = &mut self.offload {
            pool.removed(&sequence.offload, now);
        }
        Some(sequence)
    }

    /// Whether the waiting queue's head waits for its offload lookup (see
    /// [`OffloadPool::lookup_pending`]): the scheduler skips it this step.
    fn head_lookup_pending(&mut self, now: f64) -> bool {
        let (Some(pool), Some(head)) = (&mut self.offload, self.waiting.front_mut()) else {
            return false;
        };
        let target = head.prefill_target();
        pool.lookup_pending(head.key, target, &mut head.offload, now)
    }

    /// Frees blocks for the running request at `index`; returns whether it
    /// preempted that request itself. First come, first served: the last
    /// running request (vLLM's FCFS victim). Under priority scheduling, as
    /// vLLM 0.33's scheduler: the lowest-priority running request, the
    /// latest to arrive of those (`max(running, key=(priority,
    /// arrival_time))`), the request itself included. The reason is
    /// `priority` when a high-priority request preempts a low-priority one,
    /// else `kv_full`. Victims come from `index` on, so the requests
    /// scheduled before it in this step stay (vLLM can take one of those
    /// back too; this simulator does not).
    fn preempt_for(&mut self, index: usize, now: f64) -> bool {
        let victim = if self.limits.priority_scheduling {
            let rank = |s: &Sequence| (!s.request.high_priority, s.key);
            (index..self.running.len())
                .max_by_key(|&j| rank(&self.running[j]))
                .expect("the request itself runs")
        } else {
            self.running.len() - 1
        };
        let for_high = self.running[index].request.high_priority;
        let reason = if for_high && !self.running[victim].request.high_priority {
            PreemptionReason::Priority
        } else {
            PreemptionReason::KvFull
        };
        self.preempt(victim, now, reason);
        victim == index
    }

    fn preempt(&mut self, index: usize, now: f64, reason: PreemptionReason) {
        let mut victim = self.running.remove(index);
        if let Some(pool) = &mut self.offload {
            pool.store(victim.key, victim.computed, &mut victim.offload);
        }
        self.release(victim.key, victim.blocks);
        victim.preempted(now, reason);
        // Back to the front of its priority class.
        let at = if victim.request.high_priority {
            0
        } else {
            self.first_low_priority_waiting()
        };
        self.waiting.insert(at, victim);
    }

    /// Asks the KV connector about the waiting queue's head: with external
    /// hits, its blocks are allocated and its async load starts (it leaves
    /// the queue until loaded).
    fn start_load(&mut self, now: f64, result: &mut StepResult) -> Load {
        let bs = self.limits.block_size;
        let Some(front) = self.waiting.front_mut() else {
            return Load::NotNeeded;
        };
        if self.limits.external_hit_rate <= 0.0 || front.connector_asked {
            return Load::NotNeeded;
        }
        let prompt = front.request.prompt_len;
        let local = local_hit(prompt, self.limits.prefix_hit_rate, bs);
        let external = self.loads.found(prompt, local);
        let needed = blocks_for(local + external, bs);
        if external > 0 && needed > self.free_blocks {
            return Load::Blocked;
        }
        front.connector_asked = true;
        result.external_queries += u64::from(prompt - local);
        // A failed NIXL transfer leaves the request to compute its prompt here.
        if external == 0 || self.nixl.as_mut().is_some_and(Nixl::transfer_failed) {
            return Load::NotNeeded;
        }
        let mut sequence = self.waiting.pop_front().expect("front exists");
        result.external_hits += u64::from(external);
        self.allocate(sequence.key, needed, now);
        sequence.blocks = needed;
        sequence.external = external;
        self.loads.start(sequence, now);
        Load::Started
    }

    /// Schedules and runs one step starting at `now`; `token` draws token ids.
    pub(crate) fn step(&mut self, now: f64, mut token: impl FnMut() -> u32) -> StepResult {
        let mut result = StepResult::default();
        let mut budget = self.limits.max_num_batched_tokens;
        // (index into running, tokens computed this step)
        let mut scheduled: Vec<(usize, u32)> = Vec::new();
        if let Some(pool) = &mut self.offload {
            pool.start_step(now);
        }
        self.loads.finish(now, self.nixl.as_mut());
        self.schedule_running(now, &mut budget, &mut scheduled, &mut result);
        self.loads.blocked = false;
        // As vLLM's scheduler, no admission in a step that preempted.
        if result.preemptions == 0 {
            self.admit_waiting(now, &mut budget, &mut scheduled, &mut result);
        }
        self.compute(&scheduled, &mut token, &mut result);
        self.take_connector_steps(&mut result);
        self.retire_finished(&mut result);
        debug_assert!(self.free_blocks <= self.limits.kv_blocks);
        debug_assert!(self.running.len() <= self.limits.max_num_seqs as usize);
        debug_assert_eq!(self.residency.free_entries(), u64::from(self.free_blocks));
        result
    }

    /// The running requests, in admission order, get their decode token or
    /// next prefill chunk; one that needs a block when none is free preempts
    /// (see [`Engine::preempt_for`]).
    fn schedule_running(
        &mut self,
        now: f64,
        budget: &mut u32,
        scheduled: &mut Vec<(usize, u32)>,
        result: &mut StepResult,
    ) {
        let bs = self.limits.block_size;
        let k = self.limits.num_speculative_tokens;
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let sequence = &self.running[i];
            let want = if sequence.decoding() {
                // The decode token plus its draft tokens' slots.
                (1 + k).min(*budget)
            } else {
                (sequence.prefill_target() - sequence.computed).min(*budget)
            };
            let needed = blocks_for(sequence.computed + want, bs).saturating_sub(sequence.blocks);
            let mut preempted_itself = false;
            while needed > self.free_blocks && !preempted_itself {
                preempted_itself = self.preempt_for(i, now);
                result.preemptions += 1;
            }
            if preempted_itself {
                // The requests after it (now from `i`) may still fit.
                continue;
            }
            let key = self.running[i].key;
            self.allocate(key, needed, now);
            self.running[i].blocks += needed;
            *budget -= want;
            scheduled.push((i, want));
            i += 1;
        }
    }

    /// Waiting requests are admitted while seats, blocks and the token
    /// budget allow: KV-connector loads first, a request whose offload
    /// lookup is pending skipped for the step.
    fn admit_waiting(
        &mut self,
        now: f64,
        budget: &mut u32,
        scheduled: &mut Vec<(usize, u32)>,
        result: &mut StepResult,
    ) {
        let bs = self.limits.block_size;
        // Requests whose offload lookup is pending, back at the
        // queue's head after the step's admissions.
        let mut skipped = Vec::new();
        loop {
            if self.running.len() >= self.limits.max_num_seqs as usize || *budget == 0 {
                break;
            }
            let from_loaded = self.loads.next_loaded().is_some();
            if !from_loaded {
                match self.start_load(now, result) {
                    Load::Started => continue,
                    Load::Blocked => {
                        self.loads.blocked = true;
                        break;
                    }
                    Load::NotNeeded => {}
                }
            }
            if !from_loaded && self.head_lookup_pending(now) {
                skipped.push(self.waiting.pop_front().expect("pending head"));
                continue;
            }
            let front = if from_loaded {
                self.loads.next_loaded()
            } else {
                self.waiting.front()
            };
            let Some(front) = front else {
                break;
            };
            let target = front.prefill_target();
            let prompt = front.request.prompt_len;
            let cached = local_hit(prompt, self.limits.prefix_hit_rate, bs);
            // Offloaded KV comes back instead of being recomputed.
            let restored = self
                .offload
                .as_mut()
                .map_or(0, |pool| pool.lookup(target, &front.offload));
            let ready = (cached + front.external).max(restored);
            let chunk = (target - ready).min(*budget);
            let needed = blocks_for(ready + chunk, bs).saturating_sub(front.blocks);
            if needed > self.free_blocks {
                break;
            }
            let mut sequence = if from_loaded {
                self.loads.take_loaded()
            } else {
                self.waiting.pop_front()
            }
            .expect("front exists");
            if let Some(pool) = &mut self.offload {
                pool.admitted(&mut sequence.offload, restored, cached + sequence.external);
            }
            self.residency.hit(sequence.key, cached / bs, now);
            self.allocate(sequence.key, needed, now);
            sequence.blocks += needed;
            sequence.scheduled(ready, cached, now);
            result.prefix_queries += u64::from(prompt);
            result.prefix_hits += u64::from(cached);
            *budget -= chunk;
            self.running.push(sequence);
            scheduled.push((self.running.len() - 1, chunk));
        }
        for sequence in skipped.into_iter().rev() {
            self.waiting.push_front(sequence);
        }
    }

    /// The scheduled requests compute: prefill chunks, decode tokens (with
    /// speculative drafts), and an output for each request with a token.
    fn compute(
        &mut self,
        scheduled: &[(usize, u32)],
        token: &mut impl FnMut() -> u32,
        result: &mut StepResult,
    ) {
        let k = self.limits.num_speculative_tokens;
        let mut spec = (k > 0).then(|| SpecDecodingStats {
            num_accepted_tokens_per_pos: vec![0; k as usize],
            ..SpecDecodingStats::default()
        });
        for &(index, tokens) in scheduled {
            let sequence = &mut self.running[index];
            result.tokens += tokens;
            result.context_tokens_read += u64::from(sequence.computed);
            let accept = || self.rng.chance(self.limits.spec_acceptance_rate);
            if let Some(output) = sequence.run(tokens, spec.as_mut(), accept, token) {
                result.outputs.push(output);
            }
        }
        result.spec = spec;
    }

    /// The step's KV-connector stats, with the offload pool's state at its end.
    fn take_connector_steps(&mut self, result: &mut StepResult) {
        result.offload = self.offload.as_mut().map(OffloadPool::take_step);
        result.nixl = self.nixl.as_mut().map(Nixl::take_step);
    }

    /// Finished requests leave the batch and free their blocks.
    fn retire_finished(&mut self, result: &mut StepResult) {
        let mut kept = Vec::with_capacity(self.running.len());
        for sequence in std::mem::take(&mut self.running) {
            if sequence.finished() {
                self.release(sequence.key, sequence.blocks);
                result.finished.push(sequence);
            } else {
                kept.push(sequence);
            }
        }
        self.running = kept;
    }
}

/// What asking the KV connector about the next waiting request did.
enum Load {
    /// Nothing to load: admit the request as it is.
    NotNeeded,
    /// Its load started; it waits for it outside the queue.
    Started,
    /// Its load needs more free blocks than there are.
    Blocked,
}

/// Full blocks of the prompt found in the local prefix cache; at least one
/// token is left to compute.
fn local_hit(prompt: u32, hit_rate: f64, block_size: u32) -> u32 {
    let hit = (f64::from(prompt) * hit_rate) as u32 / block_size * block_size;
    hit.min(prompt.saturating_sub(1) / block_size * block_size)
}
