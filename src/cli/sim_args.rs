//! The simulator's flags (`simulate`'s own): [`SimArgs`], one flag per
//! [`SimConfig`] field and named after it, which [`SimArgs::config`] turns
//! into the library's configuration. The library's `SimConfig` knows no
//! command line; its defaults are the flags' defaults.

use clap::{Args, ValueEnum};
use vllm_otel_metrics::sources::sim::{KvOffloadConnector, SimConfig};

/// The simulator's flags: one a [`SimConfig`] field, with its id, its
/// default and its help.
#[derive(Debug, Clone, Copy, Args)]
pub(super) struct SimArgs {
    /// Simulated seconds during which requests arrive (the run then drains).
    #[arg(long, default_value_t = SimConfig::default().duration, value_name = "SECS")]
    pub(super) duration: f64,
    /// Poisson arrival rate, requests per second.
    #[arg(long, default_value_t = SimConfig::default().rate, value_name = "RPS")]
    pub(super) rate: f64,
    /// Closed loop instead of Poisson arrivals: keep N requests outstanding.
    #[arg(long, value_name = "N")]
    pub(super) concurrency: Option<u32>,
    /// Seed of every random draw (same seed, same run).
    #[arg(long, default_value_t = 0)]
    pub(super) seed: u64,
    /// Pace the simulation to the wall clock (to watch it live).
    #[arg(long)]
    pub(super) realtime: bool,
    /// KV-cache blocks per engine.
    #[arg(long, default_value_t = SimConfig::default().kv_blocks)]
    pub(super) kv_blocks: u32,
    /// Tokens per KV block.
    #[arg(long, default_value_t = SimConfig::default().block_size)]
    pub(super) block_size: u32,
    /// Most requests in a running batch.
    #[arg(long, default_value_t = SimConfig::default().max_num_seqs)]
    pub(super) max_num_seqs: u32,
    /// Token budget per step (chunked prefill within it).
    #[arg(long, default_value_t = SimConfig::default().max_num_batched_tokens)]
    pub(super) max_num_batched_tokens: u32,
    /// Share of prompt tokens found in the prefix cache (0 to 1).
    #[arg(long, default_value_t = SimConfig::default().prefix_hit_rate)]
    pub(super) prefix_hit_rate: f64,
    /// Fixed time of a step, milliseconds.
    #[arg(long, default_value_t = SimConfig::default().step_base_ms)]
    pub(super) step_base_ms: f64,
    /// Time per token in a step, microseconds.
    #[arg(long, default_value_t = SimConfig::default().step_per_token_us)]
    pub(super) step_per_token_us: f64,
    /// Mean prompt length in tokens (lognormal).
    #[arg(long, default_value_t = SimConfig::default().prompt_len)]
    pub(super) prompt_len: f64,
    /// Mean output length in tokens (lognormal).
    #[arg(long, default_value_t = SimConfig::default().output_len)]
    pub(super) output_len: f64,
    /// Share of requests aborted by their client (0 to 1).
    #[arg(long, default_value_t = SimConfig::default().abort_rate)]
    pub(super) abort_rate: f64,
    /// Served models (engine e serves model e % models).
    #[arg(long, default_value_t = SimConfig::default().models)]
    pub(super) models: u32,
    /// Engines.
    #[arg(long, default_value_t = SimConfig::default().engines)]
    pub(super) engines: u32,
    /// Share of KV blocks whose residency (lifetime, idle time, reuse gaps)
    /// is sampled, as vLLM's --kv-cache-metrics-sample; 0 samples none.
    #[arg(long, default_value_t = SimConfig::default().kv_cache_metrics_sample, value_name = "RATE")]
    pub(super) kv_cache_metrics_sample: f64,
    /// Share of the prompt beyond the local prefix-cache hit that a KV
    /// connector finds in another instance's cache and loads asynchronously
    /// (0 to 1; 0: no connector).
    #[arg(long, default_value_t = SimConfig::default().external_prefix_hit_rate, value_name = "RATE")]
    pub(super) external_prefix_hit_rate: f64,
    /// The KV connector's load bandwidth, GB/s.
    #[arg(long, default_value_t = SimConfig::default().kv_load_gbps, value_name = "GBPS")]
    pub(super) kv_load_gbps: f64,
    /// KV-cache bytes per token (all layers, K and V), for load times and
    /// the MFU estimates.
    #[arg(long, default_value_t = SimConfig::default().kv_bytes_per_token, value_name = "BYTES")]
    pub(super) kv_bytes_per_token: u64,
    /// Draft tokens per decode step (speculative decoding; 0: off).
    #[arg(long, default_value_t = SimConfig::default().num_speculative_tokens, value_name = "K")]
    pub(super) num_speculative_tokens: u32,
    /// Chance that a draft token is accepted, given the previous one was.
    #[arg(long, default_value_t = SimConfig::default().spec_acceptance_rate, value_name = "RATE")]
    pub(super) spec_acceptance_rate: f64,
    /// Model parameters in billions (the MFU estimates' cost model and the
    /// weight transfer times).
    #[arg(long, default_value_t = SimConfig::default().model_params_b, value_name = "B")]
    pub(super) model_params_b: f64,
    /// GPUs one engine's model is split over.
    #[arg(long, default_value_t = SimConfig::default().tensor_parallel_size, value_name = "N")]
    pub(super) tensor_parallel_size: u32,
    /// Serve the --models as LoRA adapters of one base model (each request
    /// picks one; vllm:lora_requests_info lists them, max_lora = --models).
    #[arg(long)]
    pub(super) lora_adapters: bool,
    /// Put an engine to sleep after this many idle seconds; the next
    /// request wakes it (the weights come back first).
    #[arg(long, value_name = "SECS")]
    pub(super) sleep_when_idle: Option<f64>,
    /// Sleep level: 1 offloads the weights to host memory, 2 discards them.
    #[arg(long, default_value_t = SimConfig::default().sleep_level, value_name = "LEVEL")]
    pub(super) sleep_level: u8,
    /// Host-device bandwidth for offloading and restoring weights, GB/s.
    #[arg(long, default_value_t = SimConfig::default().host_transfer_gbps, value_name = "GBPS")]
    pub(super) host_transfer_gbps: f64,
    /// Push new weights to every engine every this many seconds (an RL
    /// trainer); engines pause while they take them.
    #[arg(long, value_name = "SECS")]
    pub(super) weight_update_interval: Option<f64>,
    /// Bandwidth of a weight update, GB/s.
    #[arg(long, default_value_t = SimConfig::default().weight_sync_gbps, value_name = "GBPS")]
    pub(super) weight_sync_gbps: f64,
    /// Share of arrivals that are high-priority, under vLLM's priority
    /// scheduling (`--scheduling-policy priority`): they are admitted ahead
    /// of waiting low-priority requests, and when one of them needs KV
    /// blocks a low-priority running request is preempted for it (reason
    /// `priority`). 0 (the default): first come, first served.
    #[arg(long, default_value_t = SimConfig::default().priority_fraction, value_name = "FRACTION")]
    pub(super) priority_fraction: f64,
    /// CPU KV offload pool of each engine, blocks (vLLM's OffloadingConnector
    /// with its CPU spec; 0, the default: none). A preempted request's KV is
    /// stored there when it has room and loaded back at re-admission instead
    /// of recomputed; transfers run at --host-transfer-gbps.
    #[arg(long, default_value_t = SimConfig::default().kv_offload_blocks, value_name = "BLOCKS")]
    pub(super) kv_offload_blocks: u32,
    /// Which of vLLM's CPU offloading connectors owns the pool, and so which
    /// stats each step reports: `offloading` (the OffloadingConnector, the
    /// `vllm:kv_offload_*` families) or `simple` (the
    /// SimpleCPUOffloadConnector, `vllm:simple_kv_offload_*`).
    #[arg(long, value_enum, default_value_t = KvOffloadConnectorArg::Offloading, value_name = "CONNECTOR")]
    pub(super) kv_offload_connector: KvOffloadConnectorArg,
    /// The OffloadingConnector's `store_threshold`: a request's KV is stored
    /// only once it has been looked up this many times; 2 or more also makes
    /// each step report its skipped stores (0, the default, and 1 store
    /// every time).
    #[arg(long, default_value_t = SimConfig::default().kv_offload_store_threshold, value_name = "LOOKUPS")]
    pub(super) kv_offload_store_threshold: u32,
    /// The KV connector (--external-prefix-hit-rate) is NIXL: each engine is
    /// the decode side of a prefill/decode pair and pulls the prompt KV a
    /// prefill instance computed; every completed transfer and failure is
    /// reported as vLLM's NIXL connector stats.
    #[arg(long)]
    pub(super) nixl: bool,
    /// Share of NIXL transfers that fail (the request then computes its
    /// prompt locally).
    #[arg(long, default_value_t = SimConfig::default().nixl_failure_rate, value_name = "FRACTION")]
    pub(super) nixl_failure_rate: f64,
}

/// The connector that owns the simulated CPU KV offload pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum KvOffloadConnectorArg {
    /// vLLM's OffloadingConnector with its CPU spec.
    Offloading,
    /// vLLM's SimpleCPUOffloadConnector.
    Simple,
}

impl From<KvOffloadConnectorArg> for KvOffloadConnector {
    fn from(arg: KvOffloadConnectorArg) -> Self {
        match arg {
            KvOffloadConnectorArg::Offloading => KvOffloadConnector::Offloading,
            KvOffloadConnectorArg::Simple => KvOffloadConnector::Simple,
        }
    }
}

impl SimArgs {
    /// The configuration these flags give, with `max_model_len` (a flag the
    /// subcommands share).
    pub(super) fn config(&self, max_model_len: u32) -> SimConfig {
        // Every flag is read: a new one left out here does not compile.
        let SimArgs {
            duration,
            rate,
            concurrency,
            seed,
            realtime,
            kv_blocks,
            block_size,
            max_num_seqs,
            max_num_batched_tokens,
            prefix_hit_rate,
            step_base_ms,
            step_per_token_us,
            prompt_len,
            output_len,
            abort_rate,
            models,
            engines,
            kv_cache_metrics_sample,
            external_prefix_hit_rate,
            kv_load_gbps,
            kv_bytes_per_token,
            num_speculative_tokens,
            spec_acceptance_rate,
            model_params_b,
            tensor_parallel_size,
            lora_adapters,
            sleep_when_idle,
            sleep_level,
            host_transfer_gbps,
            weight_update_interval,
            weight_sync_gbps,
            priority_fraction,
            kv_offload_blocks,
            kv_offload_connector,
            kv_offload_store_threshold,
            nixl,
            nixl_failure_rate,
        } = *self;
        let mut config = SimConfig::default();
        config.duration = duration;
        config.rate = rate;
        config.concurrency = concurrency;
        config.seed = seed;
        config.realtime = realtime;
        config.kv_blocks = kv_blocks;
        config.block_size = block_size;
        config.max_num_seqs = max_num_seqs;
        config.max_num_batched_tokens = max_num_batched_tokens;
        config.prefix_hit_rate = prefix_hit_rate;
        config.step_base_ms = step_base_ms;
        config.step_per_token_us = step_per_token_us;
        config.prompt_len = prompt_len;
        config.output_len = output_len;
        config.abort_rate = abort_rate;
        config.models = models;
        config.engines = engines;
        config.kv_cache_metrics_sample = kv_cache_metrics_sample;
        config.external_prefix_hit_rate = external_prefix_hit_rate;
        config.kv_load_gbps = kv_load_gbps;
        config.kv_bytes_per_token = kv_bytes_per_token;
        config.num_speculative_tokens = num_speculative_tokens;
        config.spec_acceptance_rate = spec_acceptance_rate;
        config.model_params_b = model_params_b;
        config.tensor_parallel_size = tensor_parallel_size;
        config.lora_adapters = lora_adapters;
        config.sleep_when_idle = sleep_when_idle;
        config.sleep_level = sleep_level;
        config.host_transfer_gbps = host_transfer_gbps;
        config.weight_update_interval = weight_update_interval;
        config.weight_sync_gbps = weight_sync_gbps;
        config.priority_fraction = priority_fraction;
        config.kv_offload_blocks = kv_offload_blocks;
        config.kv_offload_connector = kv_offload_connector.into();
        config.kv_offload_store_threshold = kv_offload_store_threshold;
        config.nixl = nixl;
        config.nixl_failure_rate = nixl_failure_rate;
        config.max_model_len = max_model_len;
        config
    }
}
