//! Engine-level records: the scheduler's per-step stats, an engine's
//! start-up configuration, its sleep state, and the API server's sleep-mode
//! and weight-update operations.
//!
//! They mirror what vLLM's `PrometheusStatLogger` reads: `SchedulerStats`
//! (`vllm/v1/metrics/stats.py`) with its KV-cache eviction events, connector
//! prefix-cache stats, speculative-decoding stats and `PerfStats`; the
//! `CacheConfig.metrics_info()` dictionary logged at engine start-up; the
//! sleep level of `/sleep?level=N`; the timings of the dev-mode sleep and
//! RL weight-transfer routes.
//!
//! ```
//! use vllm_otel_metrics::protocol::{InputLimits, Record};
//!
//! let line = r#"{"type":"scheduler_stats","model_name":"m","engine":0,
//!   "num_running_reqs":3,"num_waiting_reqs":5,"kv_cache_usage":0.5,
//!   "prefix_cache_queries":100,"prefix_cache_hits":40,"num_skipped_waiting_reqs":2}"#;
//! let Record::SchedulerStats(stats) = serde_json::from_str(line).unwrap() else { unreachable!() };
//! assert_eq!(stats.waiting_for_capacity(), 3);
//! assert!(Record::SchedulerStats(stats).validate(&InputLimits::default()).is_ok());
//! ```

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use super::defaults::null_as_default;
use super::kv_connector::KvConnectorStats;
use super::validate::{bounded, finite, shown, time, InputLimits, InvalidRecord};

/// Most accepted-token positions a speculative-decoding record may carry
/// (vLLM's `num_speculative_tokens` is a handful in practice).
pub const MAX_SPEC_POSITIONS: usize = crate::catalog::engine::SPEC_POSITIONS.len();
/// Most reuse gaps of one evicted block: vLLM keeps a block's last four
/// accesses (`deque(maxlen=4)`), so three gaps.
pub const MAX_REUSE_GAPS: usize = 3;
/// Most keys of an engine's cache configuration.
pub const MAX_CACHE_CONFIG_KEYS: usize = 64;

/// Scheduler state after one engine step (vLLM's `SchedulerStats`). Every
/// field after `prefix_cache_hits` is optional: absent, it is 0 or empty.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SchedulerStats {
    /// The served model name.
    pub model_name: String,
    /// Engine index.
    pub engine: u32,
    /// Requests in the running batch.
    pub num_running_reqs: u64,
    /// Requests in the waiting queue, deferred ones included.
    pub num_waiting_reqs: u64,
    /// KV-cache usage, 0 to 1.
    pub kv_cache_usage: f64,
    /// Tokens queried in the prefix cache during the step.
    pub prefix_cache_queries: u64,
    /// Tokens found in the prefix cache during the step.
    pub prefix_cache_hits: u64,
    /// Frontend wall clock when the stats arrived, seconds; the value of
    /// `vllm:lora_requests_info` (absent: the current time).
    #[serde(default)]
    pub received_at: Option<f64>,
    /// Of `num_waiting_reqs`, those deferred by transient constraints (LoRA
    /// budget, KV transfer, blocked status).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub num_skipped_waiting_reqs: u64,
    /// Waiting requests by async KV load stage; present only on an engine
    /// that consumes KV from a connector.
    #[serde(default)]
    pub num_kv_fetch_reqs_by_stage: Option<KvFetchStages>,
    /// Tokens queried in the KV connector's cross-instance cache.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub external_prefix_cache_queries: u64,
    /// Tokens found there.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub external_prefix_cache_hits: u64,
    /// `external_prefix_cache_hits` split by the tier that supplied them.
    #[serde(default)]
    pub external_prefix_cache_hits_by_source: Option<ExternalHitsBySource>,
    /// Multi-modal items looked up in the multi-modal cache.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub mm_cache_queries: u64,
    /// Multi-modal items found there.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "is_zero"
    )]
    pub mm_cache_hits: u64,
    /// Sampled KV blocks evicted during the step.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub kv_cache_eviction_events: Vec<KvCacheEvictionEvent>,
    /// The step's estimated work per GPU.
    #[serde(default)]
    pub perf_stats: Option<PerfStats>,
    /// The step's KV-connector stats (NIXL, CPU offloading), per connector
    /// kind (docs/SEMANTICS.md §4b).
    #[serde(default)]
    pub kv_connector_stats: Option<KvConnectorStats>,
    /// The step's speculative decoding; present only when it is configured.
    #[serde(default)]
    pub spec_decoding: Option<SpecDecodingStats>,
    /// LoRA adapters of the running requests.
    #[serde(default)]
    pub running_lora_adapters: Option<Vec<String>>,
    /// LoRA adapters of the waiting requests.
    #[serde(default)]
    pub waiting_lora_adapters: Option<Vec<String>>,
}

/// Whether a count or amount is at its default, which the JSON form leaves
/// out (every optional number of a record, whatever its type).
fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Waiting requests by async KV load stage (vLLM's `KV_FETCH_STAGES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvFetchStages {
    /// Need an async KV load that has not started.
    pub waiting_to_start: u64,
    /// Load started, not yet reported finished.
    pub in_progress: u64,
    /// Load finished, request not running yet.
    pub completed_waiting: u64,
}

/// Connector prefix-cache hits by the tier that supplied them (vLLM's
/// `CacheHitSource` without `device`, which is the local prefix cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExternalHitsBySource {
    /// Offloaded to host memory.
    pub host: u64,
    /// Transferred from another instance.
    pub p2p: u64,
    /// Read from disk.
    pub disk: u64,
    /// Tier not reported.
    pub external_unspecified: u64,
}

impl ExternalHitsBySource {
    fn total(&self) -> u64 {
        self.host
            .saturating_add(self.p2p)
            .saturating_add(self.disk)
            .saturating_add(self.external_unspecified)
    }
}

/// One sampled KV block's residency at its eviction (vLLM's
/// `KVCacheEvictionEvent`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KvCacheEvictionEvent {
    /// From allocation to eviction, seconds.
    pub lifetime_seconds: f64,
    /// From the last access to eviction, seconds.
    pub idle_seconds: f64,
    /// Between consecutive accesses (at most [`MAX_REUSE_GAPS`]), seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub reuse_gaps_seconds: Vec<f64>,
}

/// A step's estimated work per GPU (vLLM's `PerfStats`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PerfStats {
    /// Floating-point operations.
    pub num_flops_per_gpu: f64,
    /// Bytes read from device memory.
    pub num_read_bytes_per_gpu: f64,
    /// Bytes written to device memory.
    pub num_write_bytes_per_gpu: f64,
}

/// A step's speculative decoding (vLLM's `SpecDecodingStats`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SpecDecodingStats {
    /// Drafts proposed (one per decoding request).
    pub num_drafts: u64,
    /// Tokens drafted.
    pub num_draft_tokens: u64,
    /// Drafted tokens accepted.
    pub num_accepted_tokens: u64,
    /// Accepted tokens by draft position (position 0 first).
    pub num_accepted_tokens_per_pos: Vec<u64>,
}

/// An engine's start-up: its cache configuration as vLLM logs it in
/// `vllm:cache_config_info`, and its LoRA slots.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EngineConfig {
    /// The served model name.
    pub model_name: String,
    /// Engine index.
    pub engine: u32,
    /// `CacheConfig.metrics_info()`: field name to its `str()` value.
    #[serde(default, deserialize_with = "null_as_default")]
    pub cache_config: std::collections::BTreeMap<String, String>,
    /// `--max-loras`, when LoRA is enabled.
    #[serde(default)]
    pub max_loras: Option<u32>,
    /// The engine's `max_model_len`, when the sender knows it. Only
    /// compared with the sidecar's `--max-model-len` (which builds the token
    /// buckets): a difference is warned about once per engine.
    #[serde(default)]
    pub max_model_len: Option<u32>,
}

/// An engine went to sleep or woke up (`/sleep?level=N`, `/wake_up`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SleepState {
    /// The served model name.
    pub model_name: String,
    /// Engine index.
    pub engine: u32,
    /// 0 awake; 1 asleep with weights offloaded; 2 asleep with weights and
    /// KV cache discarded.
    pub level: u8,
}

/// One API-server operation and how long it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Which operation.
    pub operation: OperationKind,
    /// Seconds from its request to its completion.
    pub duration: f64,
}

/// The sleep-mode and RL weight-transfer operations vLLM times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// `POST /sleep`.
    Sleep,
    /// `POST /release_kv_cache_memory`.
    ReleaseKvCacheMemory,
    /// `POST /wake_up`.
    Wake,
    /// `POST /init_weight_transfer_engine`.
    Init,
    /// `POST /start_weight_update`.
    Start,
    /// `POST /start_draft_weight_update`.
    StartDraft,
    /// `POST /update_weights`.
    Update,
    /// `POST /finish_weight_update`.
    Finish,
}

impl OperationKind {
    /// Every operation, in label-value order: the sleep-mode ones, then the
    /// weight-update ones.
    pub const ALL: [OperationKind; 8] = [
        OperationKind::Sleep,
        OperationKind::ReleaseKvCacheMemory,
        OperationKind::Wake,
        OperationKind::Init,
        OperationKind::Start,
        OperationKind::StartDraft,
        OperationKind::Update,
        OperationKind::Finish,
    ];

    /// The `operation` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Sleep => "sleep",
            OperationKind::ReleaseKvCacheMemory => "release_kv_cache_memory",
            OperationKind::Wake => "wake",
            OperationKind::Init => "init",
            OperationKind::Start => "start",
            OperationKind::StartDraft => "start_draft",
            OperationKind::Update => "update",
            OperationKind::Finish => "finish",
        }
    }

    /// Whether vLLM times it as a sleep-mode operation (else a weight update).
    pub fn is_sleep_mode(self) -> bool {
        matches!(
            self,
            OperationKind::Sleep | OperationKind::ReleaseKvCacheMemory | OperationKind::Wake
        )
    }

    /// Position in [`OperationKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl SchedulerStats {
    /// Waiting requests that are not deferred (vLLM's `reason="capacity"`).
    pub fn waiting_for_capacity(&self) -> u64 {
        self.num_waiting_reqs
            .saturating_sub(self.num_skipped_waiting_reqs)
    }

    /// Connector hits by tier, in `catalog::engine::CACHE_HIT_SOURCES` order
    /// after `device`: `host`, `p2p`, `disk`, `external_unspecified`. When
    /// the split is absent or does not add up to the hits, all of them are
    /// `external_unspecified` (vLLM's `PrefixCacheStats.record` fallback).
    pub fn external_hits_by_source(
        &self,
    ) -> [u64; crate::catalog::engine::CACHE_HIT_SOURCES.len() - 1] {
        match self.external_prefix_cache_hits_by_source {
            Some(split) if split.total() == self.external_prefix_cache_hits => [
                split.host,
                split.p2p,
                split.disk,
                split.external_unspecified,
            ],
            _ => [0, 0, 0, self.external_prefix_cache_hits],
        }
    }

    pub(crate) fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        let max_label_bytes = limits.max_label_bytes;
        bounded("model_name", &self.model_name, max_label_bytes)?;
        finite("kv_cache_usage", self.kv_cache_usage)?;
        if !(0.0..=1.0).contains(&self.kv_cache_usage) {
            return Err(InvalidRecord(format!(
                "kv_cache_usage is not between 0 and 1 ({})",
                self.kv_cache_usage
            )));
        }
        if let Some(at) = self.received_at {
            time("received_at", at)?;
        }
        at_most(
            "num_skipped_waiting_reqs",
            self.num_skipped_waiting_reqs,
            "num_waiting_reqs",
            self.num_waiting_reqs,
        )?;
        at_most(
            "external_prefix_cache_hits",
            self.external_prefix_cache_hits,
            "external_prefix_cache_queries",
            self.external_prefix_cache_queries,
        )?;
        at_most(
            "mm_cache_hits",
            self.mm_cache_hits,
            "mm_cache_queries",
            self.mm_cache_queries,
        )?;
        for event in &self.kv_cache_eviction_events {
            event.validate()?;
        }
        if let Some(kv) = &self.kv_connector_stats {
            kv.validate()?;
        }
        if let Some(perf) = &self.perf_stats {
            time("perf_stats.num_flops_per_gpu", perf.num_flops_per_gpu)?;
            time(
                "perf_stats.num_read_bytes_per_gpu",
                perf.num_read_bytes_per_gpu,
            )?;
            time(
                "perf_stats.num_write_bytes_per_gpu",
                perf.num_write_bytes_per_gpu,
            )?;
        }
        if let Some(spec) = &self.spec_decoding {
            spec.validate()?;
        }
        for (what, adapters) in [
            ("running_lora_adapters", &self.running_lora_adapters),
            ("waiting_lora_adapters", &self.waiting_lora_adapters),
        ] {
            if let Some(adapters) = adapters {
                if adapters.iter().any(|a| a.is_empty() || a.contains(',')) {
                    return Err(InvalidRecord(format!(
                        "{what}: an adapter name is empty or contains ','"
                    )));
                }
                // The label value is the names joined by ','; its length is
                // summed rather than joined, so a valid record allocates nothing.
                let joined = adapters.iter().map(String::len).sum::<usize>()
                    + adapters.len().saturating_sub(1);
                if joined > max_label_bytes {
                    bounded(what, &adapters.join(","), max_label_bytes)?;
                }
            }
        }
        Ok(())
    }
}

pub(super) fn at_most(
    what: &str,
    value: u64,
    bound_name: &str,
    bound: u64,
) -> Result<(), InvalidRecord> {
    if value <= bound {
        Ok(())
    } else {
        Err(InvalidRecord(format!(
            "{what} ({value}) is more than {bound_name} ({bound})"
        )))
    }
}

impl KvCacheEvictionEvent {
    fn validate(&self) -> Result<(), InvalidRecord> {
        time("lifetime_seconds", self.lifetime_seconds)?;
        time("idle_seconds", self.idle_seconds)?;
        if self.idle_seconds > self.lifetime_seconds {
            return Err(InvalidRecord(format!(
                "idle_seconds ({}) is more than lifetime_seconds ({})",
                self.idle_seconds, self.lifetime_seconds
            )));
        }
        if self.reuse_gaps_seconds.len() > MAX_REUSE_GAPS {
            return Err(InvalidRecord(format!(
                "{} reuse gaps in one eviction event, more than {MAX_REUSE_GAPS}",
                self.reuse_gaps_seconds.len()
            )));
        }
        for gap in &self.reuse_gaps_seconds {
            time("reuse gap", *gap)?;
        }
        Ok(())
    }
}

impl SpecDecodingStats {
    fn validate(&self) -> Result<(), InvalidRecord> {
        at_most(
            "spec_decoding.num_accepted_tokens",
            self.num_accepted_tokens,
            "num_draft_tokens",
            self.num_draft_tokens,
        )?;
        let positions = self.num_accepted_tokens_per_pos.len();
        if positions > MAX_SPEC_POSITIONS {
            return Err(InvalidRecord(format!(
                "{positions} draft positions, more than {MAX_SPEC_POSITIONS}"
            )));
        }
        let sum = self
            .num_accepted_tokens_per_pos
            .iter()
            .fold(0u64, |sum, n| sum.saturating_add(*n));
        if positions > 0 && sum != self.num_accepted_tokens {
            return Err(InvalidRecord(format!(
                "num_accepted_tokens_per_pos adds up to {sum}, not num_accepted_tokens ({})",
                self.num_accepted_tokens
            )));
        }
        Ok(())
    }
}

/// Whether `key` can be a Prometheus label name of `vllm:cache_config_info`
/// besides its `engine`.
fn is_config_label(key: &str) -> bool {
    let mut chars = key.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with("__")
        && key != "engine"
}

impl EngineConfig {
    pub(crate) fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        let max_label_bytes = limits.max_label_bytes;
        bounded("model_name", &self.model_name, max_label_bytes)?;
        if self.cache_config.len() > MAX_CACHE_CONFIG_KEYS {
            return Err(InvalidRecord(format!(
                "cache_config has {} keys, more than {MAX_CACHE_CONFIG_KEYS}",
                self.cache_config.len()
            )));
        }
        for (key, value) in &self.cache_config {
            bounded("cache_config key", key, max_label_bytes)?;
            if !is_config_label(key) {
                return Err(InvalidRecord(format!(
                    "cache_config key '{}' is not a label name other than engine",
                    shown(key)
                )));
            }
            bounded(&format!("cache_config.{key}"), value, max_label_bytes)?;
        }
        Ok(())
    }
}

impl SleepState {
    pub(crate) fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("model_name", &self.model_name, limits.max_label_bytes)?;
        if self.level > 2 {
            return Err(InvalidRecord(format!(
                "sleep level {} is not 0, 1 or 2",
                self.level
            )));
        }
        Ok(())
    }
}

impl Operation {
    pub(super) fn validate(&self, _limits: &InputLimits) -> Result<(), InvalidRecord> {
        time("duration", self.duration)
    }
}
