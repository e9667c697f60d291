//! The NIXL transfers of one engine: what vLLM's NixlConnector does when the
//! engine is the decode side of a prefill/decode pair and pulls the prompt
//! KV a prefill instance computed.
//!
//! The KV connector's loads are the transfers; this records each one as it
//! completes, and fails a share of them, as the connector's
//! `NixlKVConnectorStats` report them.

use super::limits::EngineLimits;
use super::rng::Rng;

/// Seconds to post one NIXL transfer: a fixed cost plus one per descriptor.
const NIXL_POST_SECONDS: f64 = 5e-4;
const NIXL_POST_SECONDS_PER_DESCRIPTOR: f64 = 2e-7;

/// What the NIXL connector did in one step (vLLM's `NixlKVConnectorStats`).
#[derive(Debug, Default)]
pub(crate) struct NixlStep {
    pub(crate) transfer_duration: Vec<f64>,
    pub(crate) post_duration: Vec<f64>,
    pub(crate) bytes_transferred: Vec<f64>,
    pub(crate) num_descriptors: Vec<f64>,
    pub(crate) failed_transfers: u64,
}

/// The NIXL side of one engine.
#[derive(Debug)]
pub(crate) struct Nixl {
    failure_rate: f64,
    block_size: u32,
    load_seconds_per_token: f64,
    kv_bytes_per_token: u64,
    /// Transfer failures (a stream of its own: the other draws stay those
    /// of the same seed without NIXL).
    rng: Rng,
    step: NixlStep,
}

impl Nixl {
    /// The NIXL connector `limits` describe, if they name one; `seed`: the
    /// engine's.
    pub(crate) fn configured(limits: &EngineLimits, seed: u64) -> Option<Self> {
        limits.nixl.then(|| Nixl {
            failure_rate: limits.nixl_failure_rate,
            block_size: limits.block_size,
            load_seconds_per_token: limits.load_seconds_per_token,
            kv_bytes_per_token: limits.kv_bytes_per_token,
            rng: Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15),
            step: NixlStep::default(),
        })
    }

    /// Draws whether the transfer about to start fails (the request then
    /// computes its prompt here), and counts it if it does.
    pub(crate) fn transfer_failed(&mut self) -> bool {
        let failed = self.rng.chance(self.failure_rate);
        if failed {
            self.step.failed_transfers += 1;
        }
        failed
    }

    /// A transfer of `tokens` tokens' KV completed: vLLM records a transfer
    /// when its handle reports done.
    pub(crate) fn transfer_done(&mut self, tokens: u32) {
        let descriptors = tokens.div_ceil(self.block_size);
        let step = &mut self.step;
        step.transfer_duration
            .push(f64::from(tokens) * self.load_seconds_per_token);
        step.post_duration
            .push(NIXL_POST_SECONDS + NIXL_POST_SECONDS_PER_DESCRIPTOR * f64::from(descriptors));
        step.bytes_transferred
            .push((u64::from(tokens) * self.kv_bytes_per_token) as f64);
        step.num_descriptors.push(f64::from(descriptors));
    }

    /// The step's record.
    pub(crate) fn take_step(&mut self) -> NixlStep {
        std::mem::take(&mut self.step)
    }
}
