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

use std::collections::VecDeque;

use super::workload::SimRequest;
use crate::protocol::{EngineCoreEvent, EngineCoreOutput, EventType, PrefillStats};

/// Scheduler limits of one engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EngineLimits {
    pub(crate) kv_blocks: u32,
    pub(crate) block_size: u32,
    pub(crate) max_num_seqs: u32,
    pub(crate) max_num_batched_tokens: u32,
    pub(crate) prefix_hit_rate: f64,
}

/// A request inside the engine.
#[derive(Debug)]
pub(crate) struct Sequence {
    pub(crate) request: SimRequest,
    /// Tokens whose KV is in the cache (cached prefix included).
    computed: u32,
    generated: u32,
    blocks: u32,
    /// Of this admission: prefix-cache hits and tokens computed in prefill.
    cached: u32,
    prefill_computed: u32,
    /// The first output after each (re)admission carries prefill stats.
    needs_prefill_stats: bool,
    events: Vec<EngineCoreEvent>,
    pub(crate) preemptions: u32,
}

impl Sequence {
    pub(crate) fn new(request: SimRequest, queued_at: f64) -> Self {
        Sequence {
            request,
            computed: 0,
            generated: 0,
            blocks: 0,
            cached: 0,
            prefill_computed: 0,
            needs_prefill_stats: false,
            events: vec![EngineCoreEvent {
                kind: EventType::Queued,
                timestamp: queued_at,
                reason: None,
            }],
            preemptions: 0,
        }
    }

    /// Prompt plus what was generated before this admission: all of it is recomputed.
    fn prefill_target(&self) -> u32 {
        self.request.prompt_len + self.generated
    }

    fn in_prefill(&self) -> bool {
        self.computed < self.prefill_target()
    }
}

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
}

/// One engine: KV blocks, waiting queue, running batch.
#[derive(Debug)]
pub(crate) struct Engine {
    limits: EngineLimits,
    free_blocks: u32,
    waiting: VecDeque<Sequence>,
    /// In admission order; the last is the first to be preempted.
    running: Vec<Sequence>,
}

fn blocks_for(tokens: u32, block_size: u32) -> u32 {
    tokens.div_ceil(block_size)
}

impl Engine {
    pub(crate) fn new(limits: EngineLimits) -> Self {
        Engine {
            limits,
            free_blocks: limits.kv_blocks,
            waiting: VecDeque::new(),
            running: Vec::new(),
        }
    }

    pub(crate) fn enqueue(&mut self, sequence: Sequence) {
        self.waiting.push_back(sequence);
    }

    pub(crate) fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    pub(crate) fn running(&self) -> usize {
        self.running.len()
    }

    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub(crate) fn used_blocks(&self) -> u32 {
        self.limits.kv_blocks - self.free_blocks
    }

    pub(crate) fn kv_usage(&self) -> f64 {
        f64::from(self.used_blocks()) / f64::from(self.limits.kv_blocks)
    }

    /// Removes a request (client abort); frees its blocks. Returns it if it was here.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Sequence> {
        if let Some(i) = self.running.iter().position(|s| s.request.id == id) {
            let sequence = self.running.remove(i);
            self.free_blocks += sequence.blocks;
            return Some(sequence);
        }
        let i = self.waiting.iter().position(|s| s.request.id == id)?;
        self.waiting.remove(i)
    }

    fn preempt_last(&mut self, now: f64) {
        let mut victim = self.running.pop().expect("a running request to preempt");
        self.free_blocks += victim.blocks;
        victim.blocks = 0;
        victim.computed = 0;
        victim.preemptions += 1;
        victim.events.push(EngineCoreEvent {
            kind: EventType::Preempted,
            timestamp: now,
            reason: None,
        });
        self.waiting.push_front(victim);
    }

    /// Schedules and runs one step starting at `now`; `token` draws token ids.
    pub(crate) fn step(&mut self, now: f64, mut token: impl FnMut() -> u32) -> StepResult {
        let bs = self.limits.block_size;
        let mut result = StepResult::default();
        let mut budget = self.limits.max_num_batched_tokens;
        // (index into running, tokens computed this step)
        let mut scheduled: Vec<(usize, u32)> = Vec::new();

        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let sequence = &self.running[i];
            let want = if sequence.in_prefill() {
                (sequence.prefill_target() - sequence.computed).min(budget)
            } else {
                1
            };
            let needed = blocks_for(sequence.computed + want, bs).saturating_sub(sequence.blocks);
            while needed > self.free_blocks && i < self.running.len() {
                self.preempt_last(now);
                result.preemptions += 1;
            }
            if i >= self.running.len() {
                break; // the request preempted itself
            }
            self.free_blocks -= needed;
            self.running[i].blocks += needed;
            budget -= want;
            scheduled.push((i, want));
            i += 1;
        }

        if result.preemptions == 0 {
            while let Some(front) = self.waiting.front() {
                if self.running.len() >= self.limits.max_num_seqs as usize || budget == 0 {
                    break;
                }
                let target = front.prefill_target();
                let prompt = front.request.prompt_len;
                // Full blocks of the prompt found cached; at least one token is computed.
                let hit = (f64::from(prompt) * self.limits.prefix_hit_rate) as u32 / bs * bs;
                let cached = hit.min(prompt.saturating_sub(1) / bs * bs);
                let chunk = (target - cached).min(budget);
                let needed = blocks_for(cached + chunk, bs);
                if needed > self.free_blocks {
                    break;
                }
                let mut sequence = self.waiting.pop_front().expect("front exists");
                self.free_blocks -= needed;
                sequence.blocks = needed;
                sequence.computed = cached;
                sequence.cached = cached;
                sequence.prefill_computed = 0;
                sequence.needs_prefill_stats = true;
                sequence.events.push(EngineCoreEvent {
                    kind: EventType::Scheduled,
                    timestamp: now,
                    reason: None,
                });
                result.prefix_queries += u64::from(prompt);
                result.prefix_hits += u64::from(cached);
                budget -= chunk;
                self.running.push(sequence);
                scheduled.push((self.running.len() - 1, chunk));
            }
        }

        for &(index, tokens) in &scheduled {
            result.tokens += tokens;
            let sequence = &mut self.running[index];
            let was_prefill = sequence.in_prefill();
            sequence.computed += tokens;
            if was_prefill {
                sequence.prefill_computed += tokens;
                if sequence.in_prefill() {
                    continue; // more chunks to go: no token yet
                }
            }
            sequence.generated += 1;
            let finished = sequence.generated >= sequence.request.output_len;
            let prefill_stats =
                std::mem::take(&mut sequence.needs_prefill_stats).then(|| PrefillStats {
                    num_prompt_tokens: sequence.prefill_target() - 1,
                    num_computed_tokens: sequence.prefill_computed,
                    num_cached_tokens: sequence.cached,
                    num_local_cached_tokens: sequence.cached,
                    num_external_cached_tokens: 0,
                });
            result.outputs.push(EngineCoreOutput {
                request_id: sequence.request.id.clone(),
                new_token_ids: vec![token()],
                events: std::mem::take(&mut sequence.events),
                prefill_stats,
                finish_reason: finished.then_some(sequence.request.finish),
            });
        }

        // Finished requests leave the batch and free their blocks.
        let mut kept = Vec::with_capacity(self.running.len());
        for sequence in self.running.drain(..) {
            if sequence.generated >= sequence.request.output_len {
                self.free_blocks += sequence.blocks;
                result.finished.push(sequence);
            } else {
                kept.push(sequence);
            }
        }
        self.running = kept;
        debug_assert!(self.free_blocks <= self.limits.kv_blocks);
        debug_assert!(self.running.len() <= self.limits.max_num_seqs as usize);
        result
    }
}
