//! [`EngineLimits`]: the settings of one engine's scheduler, KV cache and
//! connectors, taken from the run's [`SimConfig`]; the scheduler and each of
//! its connectors (loads, offload pool, NIXL) read them.

use super::config::{KvOffloadConnector, SimConfig};

/// Scheduler limits of one engine.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EngineLimits {
    pub(crate) kv_blocks: u32,
    pub(crate) block_size: u32,
    pub(crate) max_num_seqs: u32,
    pub(crate) max_num_batched_tokens: u32,
    pub(crate) prefix_hit_rate: f64,
    /// Share of the prompt beyond the local prefix-cache hit that the KV
    /// connector finds in another instance's cache (0: no connector).
    pub(crate) external_hit_rate: f64,
    /// Seconds to load one token's KV through the connector.
    pub(crate) load_seconds_per_token: f64,
    /// Draft tokens per decoding step (0: no speculative decoding).
    pub(crate) num_speculative_tokens: u32,
    /// Chance that each draft token is accepted, given the previous one was.
    pub(crate) spec_acceptance_rate: f64,
    /// CPU KV offload pool, blocks (0: no offloading connector).
    pub(crate) offload_blocks: u32,
    /// The connector that owns the pool, and its `store_threshold`.
    pub(crate) offload_connector: KvOffloadConnector,
    pub(crate) offload_store_threshold: u32,
    /// Bytes of KV per token, and seconds per byte moved to or from the pool.
    pub(crate) kv_bytes_per_token: u64,
    pub(crate) offload_seconds_per_byte: f64,
    /// The KV connector is NIXL (this engine the decode side of a
    /// prefill/decode pair), and the chance that a transfer fails.
    pub(crate) nixl: bool,
    pub(crate) nixl_failure_rate: f64,
    /// vLLM's `--scheduling-policy priority` (some arrivals high-priority):
    /// a preemption's victim is the lowest-priority, latest-arriving request.
    pub(crate) priority_scheduling: bool,
}

impl EngineLimits {
    /// The limits every engine of a run with `config` has.
    pub(crate) fn new(config: &SimConfig) -> Self {
        EngineLimits {
            kv_blocks: config.kv_blocks,
            block_size: config.block_size,
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            prefix_hit_rate: config.prefix_hit_rate,
            external_hit_rate: config.external_prefix_hit_rate,
            load_seconds_per_token: config.kv_bytes_per_token as f64 / (config.kv_load_gbps * 1e9),
            num_speculative_tokens: config.num_speculative_tokens,
            spec_acceptance_rate: config.spec_acceptance_rate,
            offload_blocks: config.kv_offload_blocks,
            offload_connector: config.kv_offload_connector,
            offload_store_threshold: config.kv_offload_store_threshold,
            kv_bytes_per_token: config.kv_bytes_per_token,
            offload_seconds_per_byte: 1.0 / (config.host_transfer_gbps * 1e9),
            nixl: config.nixl,
            nixl_failure_rate: config.nixl_failure_rate,
            priority_scheduling: config.priority_fraction > 0.0,
        }
    }
}
