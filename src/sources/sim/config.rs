//! [`SimConfig`]: what a simulation run is made of (engines, scheduler,
//! KV cache, workload, offload and NIXL), its defaults and its checks.

use std::collections::BTreeMap;

use crate::catalog::DEFAULT_MAX_MODEL_LEN;
use crate::error::{setting, Setting, Settings};
use crate::protocol::PerfStats;

/// Everything a simulation run is made of.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SimConfig {
    /// Simulated seconds during which requests arrive (the run then drains).
    pub duration: f64,
    /// Poisson arrival rate, requests per second.
    pub rate: f64,
    /// Closed loop instead of Poisson arrivals: keep N requests outstanding.
    pub concurrency: Option<u32>,
    /// Seed of every random draw (same seed, same run).
    pub seed: u64,
    /// Pace the simulation to the wall clock (to watch it live).
    pub realtime: bool,
    /// KV-cache blocks per engine.
    pub kv_blocks: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Most requests in a running batch.
    pub max_num_seqs: u32,
    /// Token budget per step (chunked prefill within it).
    pub max_num_batched_tokens: u32,
    /// Share of prompt tokens found in the prefix cache (0 to 1).
    pub prefix_hit_rate: f64,
    /// Fixed time of a step, milliseconds.
    pub step_base_ms: f64,
    /// Time per token in a step, microseconds.
    pub step_per_token_us: f64,
    /// Mean prompt length in tokens (lognormal).
    pub prompt_len: f64,
    /// Mean output length in tokens (lognormal).
    pub output_len: f64,
    /// Share of requests aborted by their client (0 to 1).
    pub abort_rate: f64,
    /// Served models (engine e serves model e % models).
    pub models: u32,
    /// Engines.
    pub engines: u32,
    /// Share of KV blocks whose residency (lifetime, idle time, reuse gaps)
    /// is sampled, as vLLM's --kv-cache-metrics-sample; 0 samples none.
    pub kv_cache_metrics_sample: f64,
    /// Share of the prompt beyond the local prefix-cache hit that a KV
    /// connector finds in another instance's cache and loads asynchronously
    /// (0 to 1; 0: no connector).
    pub external_prefix_hit_rate: f64,
    /// The KV connector's load bandwidth, GB/s.
    pub kv_load_gbps: f64,
    /// KV-cache bytes per token (all layers, K and V), for load times and
    /// the MFU estimates.
    pub kv_bytes_per_token: u64,
    /// Draft tokens per decode step (speculative decoding; 0: off).
    pub num_speculative_tokens: u32,
    /// Chance that a draft token is accepted, given the previous one was.
    pub spec_acceptance_rate: f64,
    /// Model parameters in billions (the MFU estimates' cost model and the
    /// weight transfer times).
    pub model_params_b: f64,
    /// GPUs one engine's model is split over.
    pub tensor_parallel_size: u32,
    /// Serve the [`models`](Self::models) as LoRA adapters of one base model
    /// (each request picks one; vllm:lora_requests_info lists them, max_lora =
    /// `models`).
    pub lora_adapters: bool,
    /// Put an engine to sleep after this many idle seconds; the next
    /// request wakes it (the weights come back first).
    pub sleep_when_idle: Option<f64>,
    /// Sleep level: 1 offloads the weights to host memory, 2 discards them.
    pub sleep_level: u8,
    /// Host-device bandwidth for offloading and restoring weights, GB/s.
    pub host_transfer_gbps: f64,
    /// Push new weights to every engine every this many seconds (an RL
    /// trainer); engines pause while they take them.
    pub weight_update_interval: Option<f64>,
    /// Bandwidth of a weight update, GB/s.
    pub weight_sync_gbps: f64,
    /// Share of arrivals that are high-priority, under vLLM's priority
    /// scheduling (`--scheduling-policy priority`): they are admitted ahead
    /// of waiting low-priority requests, and when one of them needs KV
    /// blocks a low-priority running request is preempted for it (reason
    /// `priority`). 0 (the default): first come, first served.
    pub priority_fraction: f64,
    /// CPU KV offload pool of each engine, blocks (vLLM's OffloadingConnector
    /// with its CPU spec; 0, the default: none). A preempted request's KV is
    /// stored there when it has room and loaded back at re-admission instead
    /// of recomputed; transfers run at [`host_transfer_gbps`](Self::host_transfer_gbps).
    pub kv_offload_blocks: u32,
    /// Which of vLLM's CPU offloading connectors owns the pool, and so which
    /// stats each step reports: `offloading` (the OffloadingConnector, the
    /// `vllm:kv_offload_*` families) or `simple` (the
    /// SimpleCPUOffloadConnector, `vllm:simple_kv_offload_*`).
    pub kv_offload_connector: KvOffloadConnector,
    /// The OffloadingConnector's `store_threshold`: a request's KV is stored
    /// only once it has been looked up this many times; 2 or more also makes
    /// each step report its skipped stores (0, the default, and 1 store
    /// every time).
    pub kv_offload_store_threshold: u32,
    /// The KV connector ([`external_prefix_hit_rate`](Self::external_prefix_hit_rate)) is NIXL: each engine is
    /// the decode side of a prefill/decode pair and pulls the prompt KV a
    /// prefill instance computed; every completed transfer and failure is
    /// reported as vLLM's NIXL connector stats.
    pub nixl: bool,
    /// Share of NIXL transfers that fail (the request then computes its
    /// prompt locally).
    pub nixl_failure_rate: f64,
    /// Longest request (prompt plus output), tokens.
    pub max_model_len: u32,
}

/// The connector that owns the simulated CPU KV offload pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOffloadConnector {
    /// vLLM's OffloadingConnector with its CPU spec.
    Offloading,
    /// vLLM's SimpleCPUOffloadConnector.
    Simple,
}

impl Default for SimConfig {
    /// Defaults that preempt under the default load and finish in seconds.
    fn default() -> Self {
        SimConfig {
            seed: 0,
            duration: 120.0,
            rate: 6.0,
            concurrency: None,
            kv_blocks: 1024,
            block_size: 16,
            max_num_seqs: 64,
            max_num_batched_tokens: 2048,
            prefix_hit_rate: 0.25,
            step_base_ms: 12.0,
            step_per_token_us: 40.0,
            prompt_len: 512.0,
            output_len: 256.0,
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            abort_rate: 0.02,
            models: 1,
            engines: 1,
            realtime: false,
            kv_cache_metrics_sample: 0.01,
            external_prefix_hit_rate: 0.0,
            kv_load_gbps: 5.0,
            kv_bytes_per_token: 131_072,
            num_speculative_tokens: 0,
            spec_acceptance_rate: 0.7,
            model_params_b: 8.0,
            tensor_parallel_size: 1,
            lora_adapters: false,
            priority_fraction: 0.0,
            kv_offload_blocks: 0,
            kv_offload_connector: KvOffloadConnector::Offloading,
            kv_offload_store_threshold: 0,
            nixl: false,
            nixl_failure_rate: 0.0,
            sleep_when_idle: None,
            sleep_level: 1,
            host_transfer_gbps: 20.0,
            weight_update_interval: None,
            weight_sync_gbps: 25.0,
        }
    }
}

impl SimConfig {
    /// The model an engine serves (with LoRA adapters, the one base model).
    pub fn model_name(&self, engine: u32) -> String {
        if self.lora_adapters {
            return "sim-model-0".to_owned();
        }
        format!("sim-model-{}", engine % self.models.max(1))
    }

    /// The name of LoRA adapter `index`.
    pub fn adapter_name(index: u32) -> String {
        format!("sim-lora-{index}")
    }

    /// Bytes of one GPU's share of the weights (16-bit).
    pub(super) fn weight_bytes_per_gpu(&self) -> f64 {
        self.model_params_b * 1e9 * 2.0 / f64::from(self.tensor_parallel_size.max(1))
    }

    /// The engine's cache configuration as vLLM logs it
    /// (`CacheConfig.metrics_info()`, the fields the simulator has).
    pub(super) fn cache_config(&self) -> BTreeMap<String, String> {
        let python_bool = |b: bool| if b { "True" } else { "False" };
        [
            ("block_size", self.block_size.to_string()),
            ("cache_dtype", "auto".to_owned()),
            (
                "enable_prefix_caching",
                python_bool(self.prefix_hit_rate > 0.0).to_owned(),
            ),
            ("num_gpu_blocks", self.kv_blocks.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The step's estimated work per GPU: 2 FLOPs per parameter per token
    /// computed (attention's own FLOPs left out); the weights read once
    /// per step plus the KV of the context read by attention; the KV of
    /// the tokens computed written.
    pub(super) fn perf_stats(&self, tokens: u32, context_tokens_read: u64) -> PerfStats {
        if tokens == 0 {
            // Nothing scheduled (every request waits for its KV): no forward pass.
            return PerfStats::default();
        }
        let tp = f64::from(self.tensor_parallel_size.max(1));
        let params = self.model_params_b * 1e9;
        let kv = self.kv_bytes_per_token as f64;
        PerfStats {
            num_flops_per_gpu: 2.0 * params * f64::from(tokens) / tp,
            num_read_bytes_per_gpu: self.weight_bytes_per_gpu()
                + context_tokens_read as f64 * kv / tp,
            num_write_bytes_per_gpu: f64::from(tokens) * kv / tp,
        }
    }

    /// Checks values a run cannot work with.
    pub fn validate(&self) -> Result<(), SimConfigError> {
        let positive = [
            (setting!(SimConfig.duration), self.duration),
            (setting!(SimConfig.rate), self.rate),
            (setting!(SimConfig.prompt_len), self.prompt_len),
            (setting!(SimConfig.output_len), self.output_len),
            (setting!(SimConfig.kv_load_gbps), self.kv_load_gbps),
            (setting!(SimConfig.model_params_b), self.model_params_b),
            (
                setting!(SimConfig.host_transfer_gbps),
                self.host_transfer_gbps,
            ),
            (setting!(SimConfig.weight_sync_gbps), self.weight_sync_gbps),
        ];
        for (name, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(invalid(name, format!("a positive number, not {value}")));
            }
        }
        let without_pool = [
            (
                setting!(SimConfig.kv_offload_connector),
                self.kv_offload_connector != KvOffloadConnector::Offloading,
            ),
            (
                setting!(SimConfig.kv_offload_store_threshold),
                self.kv_offload_store_threshold > 0,
            ),
        ];
        for (name, set) in without_pool {
            if set && self.kv_offload_blocks == 0 {
                return Err(SimConfigError::Needs {
                    setting: name,
                    what: "used with a CPU offload pool",
                    other: setting!(SimConfig.kv_offload_blocks),
                    value: "above 0",
                });
            }
        }
        if self.kv_offload_store_threshold > 0
            && self.kv_offload_connector != KvOffloadConnector::Offloading
        {
            return Err(SimConfigError::Needs {
                setting: setting!(SimConfig.kv_offload_store_threshold),
                what: "an OffloadingConnector setting",
                other: setting!(SimConfig.kv_offload_connector),
                value: "offloading",
            });
        }
        if self.nixl && self.external_prefix_hit_rate <= 0.0 {
            return Err(SimConfigError::Needs {
                setting: setting!(SimConfig.nixl),
                what: "used with a KV connector",
                other: setting!(SimConfig.external_prefix_hit_rate),
                value: "above 0",
            });
        }
        for (name, value) in [
            (setting!(SimConfig.prefix_hit_rate), self.prefix_hit_rate),
            (setting!(SimConfig.abort_rate), self.abort_rate),
            (
                setting!(SimConfig.priority_fraction),
                self.priority_fraction,
            ),
            (
                setting!(SimConfig.nixl_failure_rate),
                self.nixl_failure_rate,
            ),
            (
                setting!(SimConfig.kv_cache_metrics_sample),
                self.kv_cache_metrics_sample,
            ),
            (
                setting!(SimConfig.external_prefix_hit_rate),
                self.external_prefix_hit_rate,
            ),
            (
                setting!(SimConfig.spec_acceptance_rate),
                self.spec_acceptance_rate,
            ),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(invalid(name, format!("between 0 and 1, not {value}")));
            }
        }
        for (name, value) in [
            (setting!(SimConfig.step_base_ms), self.step_base_ms),
            (
                setting!(SimConfig.step_per_token_us),
                self.step_per_token_us,
            ),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(invalid(name, format!("zero or positive, not {value}")));
            }
        }
        if self.step_base_ms == 0.0 && self.step_per_token_us == 0.0 {
            return Err(SimConfigError::StepTakesNoTime {
                base: setting!(SimConfig.step_base_ms),
                per_token: setting!(SimConfig.step_per_token_us),
            });
        }
        let counts = [
            (setting!(SimConfig.kv_blocks), self.kv_blocks),
            (setting!(SimConfig.block_size), self.block_size),
            (setting!(SimConfig.max_num_seqs), self.max_num_seqs),
            (
                setting!(SimConfig.max_num_batched_tokens),
                self.max_num_batched_tokens,
            ),
            (setting!(SimConfig.models), self.models),
            (setting!(SimConfig.engines), self.engines),
            (setting!(SimConfig.max_model_len), self.max_model_len),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(invalid(name, "at least 1".to_owned()));
            }
        }
        if self.kv_blocks.saturating_mul(self.block_size) < 2 {
            return Err(SimConfigError::KvCacheTooSmall);
        }
        if self.concurrency == Some(0) {
            return Err(invalid(
                setting!(SimConfig.concurrency),
                "at least 1".to_owned(),
            ));
        }
        if self.num_speculative_tokens as usize > crate::protocol::MAX_SPEC_POSITIONS {
            return Err(invalid(
                setting!(SimConfig.num_speculative_tokens),
                format!("at most {}", crate::protocol::MAX_SPEC_POSITIONS),
            ));
        }
        if !(1..=2).contains(&self.sleep_level) {
            return Err(invalid(
                setting!(SimConfig.sleep_level),
                "1 or 2".to_owned(),
            ));
        }
        for (name, value) in [
            (setting!(SimConfig.sleep_when_idle), self.sleep_when_idle),
            (
                setting!(SimConfig.weight_update_interval),
                self.weight_update_interval,
            ),
        ] {
            if value.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(invalid(name, "a positive number of seconds".to_owned()));
            }
        }
        for (name, value) in [
            (
                setting!(SimConfig.kv_bytes_per_token),
                self.kv_bytes_per_token,
            ),
            (
                setting!(SimConfig.tensor_parallel_size),
                u64::from(self.tensor_parallel_size),
            ),
        ] {
            if value == 0 {
                return Err(invalid(name, "at least 1".to_owned()));
            }
        }
        Ok(())
    }
}

/// Why a simulator configuration cannot run; names the settings (the
/// [`SimConfig`] fields, which the command line shows as its flags).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimConfigError {
    /// A setting outside what a run can work with.
    #[error("{setting} must be {requirement}")]
    Invalid {
        /// The setting.
        setting: Setting,
        /// What it must be (and what it was).
        requirement: String,
    },
    /// A setting that means something only with another one set.
    #[error("{setting} must be {what} ({other} {value})")]
    Needs {
        /// The setting given.
        setting: Setting,
        /// What it needs.
        what: &'static str,
        /// The other setting.
        other: Setting,
        /// What the other setting must be.
        value: &'static str,
    },
    /// Both step costs are zero.
    #[error("a step must take time: {base} or {per_token} above 0")]
    StepTakesNoTime {
        /// The fixed cost of a step.
        base: Setting,
        /// The cost per token.
        per_token: Setting,
    },
    /// Fewer than two tokens of KV cache.
    #[error("the KV cache must hold at least 2 tokens")]
    KvCacheTooSmall,
}

impl Settings for SimConfigError {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        match self {
            SimConfigError::Invalid { setting, .. } => visit(setting),
            SimConfigError::Needs { setting, other, .. } => {
                visit(setting);
                visit(other);
            }
            SimConfigError::StepTakesNoTime { base, per_token } => {
                visit(base);
                visit(per_token);
            }
            SimConfigError::KvCacheTooSmall => {}
        }
    }
}

fn invalid(setting: Setting, requirement: String) -> SimConfigError {
    SimConfigError::Invalid {
        setting,
        requirement,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host that fills the struct reads its fields' names; the command
    /// line renames them to its flags (tests/settings.rs).
    #[test]
    fn errors_name_the_fields() {
        let cases = [
            (
                SimConfig {
                    rate: 0.0,
                    ..SimConfig::default()
                },
                "rate must be a positive number, not 0",
            ),
            (
                SimConfig {
                    kv_offload_store_threshold: 2,
                    ..SimConfig::default()
                },
                "kv_offload_store_threshold must be used with a CPU offload pool \
                 (kv_offload_blocks above 0)",
            ),
            (
                SimConfig {
                    step_base_ms: 0.0,
                    step_per_token_us: 0.0,
                    ..SimConfig::default()
                },
                "a step must take time: step_base_ms or step_per_token_us above 0",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(config.validate().unwrap_err().to_string(), expected);
        }
    }
}
