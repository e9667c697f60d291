//! The KV connector's asynchronous loads, as vLLM's scheduler runs them: a
//! waiting request whose prompt the connector finds in another instance's
//! cache gets its blocks, leaves the waiting queue while its KV loads
//! (`WAITING_FOR_REMOTE_KVS`), and once loaded is admitted ahead of the
//! queue. The requests held back meanwhile are the scheduler's skipped
//! waiting ones, counted by load stage.

use std::collections::VecDeque;

use super::limits::EngineLimits;
use super::nixl::Nixl;
use super::sequence::Sequence;
use crate::protocol::KvFetchStages;

/// The loads of one engine.
#[derive(Debug)]
pub(crate) struct KvLoads {
    hit_rate: f64,
    block_size: u32,
    load_seconds_per_token: f64,
    /// In progress, with the time each completes.
    loading: Vec<(Sequence, f64)>,
    /// Loaded, waiting to be admitted (ahead of the waiting queue).
    loaded: VecDeque<Sequence>,
    /// The waiting queue's head needs a load that could not start (no blocks).
    pub(super) blocked: bool,
}

impl KvLoads {
    pub(crate) fn new(limits: &EngineLimits) -> Self {
        KvLoads {
            hit_rate: limits.external_hit_rate,
            block_size: limits.block_size,
            load_seconds_per_token: limits.load_seconds_per_token,
            loading: Vec::new(),
            loaded: VecDeque::new(),
            blocked: false,
        }
    }

    /// Tokens of a `prompt` the connector finds beyond its `local`
    /// prefix-cache hit: full blocks only, and at least one token left to
    /// compute.
    pub(crate) fn found(&self, prompt: u32, local: u32) -> u32 {
        let bs = self.block_size;
        ((f64::from(prompt - local) * self.hit_rate) as u32 / bs * bs)
            .min(prompt.saturating_sub(1).saturating_sub(local) / bs * bs)
    }

    /// Starts loading the KV of `sequence`'s `external` tokens at `now`.
    pub(crate) fn start(&mut self, sequence: Sequence, now: f64) {
        let done = now + f64::from(sequence.external) * self.load_seconds_per_token;
        self.loading.push((sequence, done));
    }

    /// Loads that completed by `now` join the loaded queue (each a NIXL
    /// transfer done, when the connector is NIXL).
    pub(crate) fn finish(&mut self, now: f64, mut nixl: Option<&mut Nixl>) {
        let mut i = 0;
        while i < self.loading.len() {
            if self.loading[i].1 <= now {
                let (sequence, _) = self.loading.remove(i);
                if let Some(nixl) = nixl.as_deref_mut() {
                    nixl.transfer_done(sequence.external);
                }
                self.loaded.push_back(sequence);
            } else {
                i += 1;
            }
        }
    }

    /// The next loaded request to admit, and taking it.
    pub(crate) fn next_loaded(&self) -> Option<&Sequence> {
        self.loaded.front()
    }

    pub(crate) fn take_loaded(&mut self) -> Option<Sequence> {
        self.loaded.pop_front()
    }

    /// Requests held back by their load, loading or loaded.
    pub(crate) fn len(&self) -> usize {
        self.loading.len() + self.loaded.len()
    }

    pub(crate) fn sequences(&self) -> impl Iterator<Item = &Sequence> {
        self.loaded
            .iter()
            .chain(self.loading.iter().map(|(s, _)| s))
    }

    pub(crate) fn stages(&self) -> KvFetchStages {
        KvFetchStages {
            waiting_to_start: u64::from(self.blocked),
            in_progress: self.loading.len() as u64,
            completed_waiting: self.loaded.len() as u64,
        }
    }

    /// Removes the request `id` if it is held back here.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Sequence> {
        if let Some(i) = self.loading.iter().position(|(s, _)| s.request.id == id) {
            Some(self.loading.remove(i).0)
        } else {
            let i = self.loaded.iter().position(|s| s.request.id == id)?;
            self.loaded.remove(i)
        }
    }
}
