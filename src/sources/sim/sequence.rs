//! A request inside the engine, as vLLM's `Request` is inside its
//! scheduler: how far its prefill and decode have come, the KV blocks it
//! holds, and what it reports (its events, its prefill stats, its outputs).
//!
//! The scheduler decides what it runs; this is what being scheduled,
//! preempted and run does to it.

use super::offload::OffloadedKv;
use super::workload::SimRequest;
use crate::protocol::{
    EngineCoreEvent, EngineCoreOutput, EventType, PreemptionReason, PrefillStats, SpecDecodingStats,
};

/// A request inside the engine.
#[derive(Debug)]
pub(crate) struct Sequence {
    pub(crate) request: SimRequest,
    /// Unique within the engine (its blocks' owner in the residency model).
    pub(super) key: u64,
    /// Tokens loaded through the KV connector for this admission.
    pub(super) external: u32,
    /// The connector is asked once, at the first admission.
    pub(super) connector_asked: bool,
    /// Tokens whose KV is in the cache (cached prefix included).
    pub(super) computed: u32,
    generated: u32,
    pub(super) blocks: u32,
    /// The prompt accounting of the first admission, until the first output
    /// takes it. As in vLLM's scheduler, it is set only when the request is
    /// scheduled before any preemption and sent with the request's first
    /// output (`take_prefill_stats()`), never again after a re-admission.
    prefill_stats: Option<PrefillStats>,
    events: Vec<EngineCoreEvent>,
    pub(crate) preemptions: u32,
    /// Its side of the CPU offload pool (untouched without one).
    pub(super) offload: OffloadedKv,
}

impl Sequence {
    pub(crate) fn new(request: SimRequest, queued_at: f64) -> Self {
        Sequence {
            request,
            key: 0,
            external: 0,
            connector_asked: false,
            computed: 0,
            generated: 0,
            blocks: 0,
            prefill_stats: None,
            events: vec![EngineCoreEvent {
                kind: EventType::Queued,
                timestamp: queued_at,
                reason: None,
            }],
            preemptions: 0,
            offload: OffloadedKv::default(),
        }
    }

    /// Prompt plus what was generated before this admission: all of it is recomputed.
    pub(super) fn prefill_target(&self) -> u32 {
        self.request.prompt_len + self.generated
    }

    fn in_prefill(&self) -> bool {
        self.computed < self.prefill_target()
    }

    /// Past its prefill: each step computes the KV of its last token and
    /// generates the next.
    pub(super) fn decoding(&self) -> bool {
        self.generated > 0 && self.computed + 1 == self.prefill_target()
    }

    /// It generated all it will.
    pub(super) fn finished(&self) -> bool {
        self.generated >= self.request.output_len
    }

    /// Admitted at `now` with the KV of its first `ready` tokens in place,
    /// `cached` of them from the local prefix cache.
    pub(super) fn scheduled(&mut self, ready: u32, cached: u32, now: f64) {
        self.computed = ready;
        if self.preemptions == 0 {
            let prompt = self.request.prompt_len;
            self.prefill_stats = Some(PrefillStats {
                num_prompt_tokens: prompt,
                num_computed_tokens: prompt - ready,
                num_cached_tokens: ready,
                num_local_cached_tokens: cached,
                num_external_cached_tokens: self.external,
            });
        }
        self.events.push(EngineCoreEvent {
            kind: EventType::Scheduled,
            timestamp: now,
            reason: None,
        });
    }

    /// Preempted at `now` (its blocks already freed): it starts over.
    pub(super) fn preempted(&mut self, now: f64, reason: PreemptionReason) {
        self.blocks = 0;
        self.external = 0;
        self.computed = 0;
        self.preemptions += 1;
        self.events.push(EngineCoreEvent {
            kind: EventType::Preempted,
            timestamp: now,
            // vLLM's engine names no reason for its usual preemption.
            reason: (reason != PreemptionReason::KvFull).then_some(reason),
        });
    }

    /// Runs the `tokens` a step scheduled for it: a prefill chunk, or a
    /// decode token and its drafts' slots. `spec` counts the drafts (when
    /// configured) and `accept` draws whether each is accepted; `token`
    /// draws token ids. Returns its output, when it produced tokens.
    pub(super) fn run(
        &mut self,
        tokens: u32,
        spec: Option<&mut SpecDecodingStats>,
        mut accept: impl FnMut() -> bool,
        token: &mut impl FnMut() -> u32,
    ) -> Option<EngineCoreOutput> {
        let mut new_tokens = 1;
        if self.decoding() {
            // A decode step drafts a token in each of its draft slots and
            // keeps the accepted prefix of them plus one of its own.
            if let Some(spec) = spec {
                let drafted = tokens - 1;
                let mut accepted = 0;
                while accepted < drafted && accept() {
                    spec.num_accepted_tokens_per_pos[accepted as usize] += 1;
                    accepted += 1;
                }
                spec.num_drafts += 1;
                spec.num_draft_tokens += u64::from(drafted);
                spec.num_accepted_tokens += u64::from(accepted);
                new_tokens += accepted;
            }
            new_tokens = new_tokens.min(self.request.output_len - self.generated);
            self.computed += new_tokens;
        } else {
            self.computed += tokens;
            if self.in_prefill() {
                return None; // more chunks to go: no token yet
            }
        }
        self.generated += new_tokens;
        let finished = self.finished();
        Some(EngineCoreOutput {
            request_id: self.request.id.clone(),
            new_token_ids: (0..new_tokens).map(|_| token()).collect(),
            events: std::mem::take(&mut self.events),
            // Only the request's first output carries prefill stats.
            prefill_stats: self.prefill_stats.take(),
            finish_reason: finished.then_some(self.request.finish),
        })
    }
}
