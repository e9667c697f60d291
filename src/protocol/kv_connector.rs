//! `scheduler_stats.kv_connector_stats`: one engine step's delta of its KV
//! connectors (vLLM's `SchedulerStats.kv_connector_stats`), one optional
//! object per connector kind (docs/SEMANTICS.md §4b).
//!
//! vLLM's NIXL stats send failure events as lists of 1s and the offloading
//! connectors a self-describing dict of metric names; here each is a typed
//! object with the same content (event counts, lists of observations,
//! optional counters and gauges), validated whole like every record.

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use super::validate::InvalidRecord;

/// Longest list of observations in one connector object.
pub const MAX_KV_CONNECTOR_ENTRIES: usize = 65_536;

/// One step's stats of the engine's KV connectors.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvConnectorStats {
    /// The NIXL connector's (`NixlKVConnectorStats.data`).
    pub nixl: Option<NixlStats>,
    /// The OffloadingConnector's, CPU spec (`OffloadingConnectorStats`).
    pub offloading: Option<OffloadingStats>,
    /// The SimpleCPUOffloadConnector's (`SimpleCPUOffloadStats`).
    pub simple_cpu_offload: Option<SimpleCpuOffloadStats>,
}

/// NIXL transfers completed in the step, and its failure events.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NixlStats {
    /// Seconds per completed transfer.
    pub transfer_duration: Option<Vec<f64>>,
    /// Seconds to post each transfer.
    pub post_duration: Option<Vec<f64>>,
    /// Bytes per transfer.
    pub bytes_transferred: Option<Vec<f64>>,
    /// Descriptors per transfer.
    pub num_descriptors: Option<Vec<f64>>,
    /// Failed transfers.
    pub num_failed_transfers: Option<u64>,
    /// Failed handshakes.
    pub num_failed_handshakes: Option<u64>,
    /// Failed notifications.
    pub num_failed_notifications: Option<u64>,
    /// Requests whose KV lease expired.
    pub num_kv_expired_reqs: Option<u64>,
    /// Completion notifications after the lease expired.
    pub num_notifications_after_expiry: Option<u64>,
}

/// The OffloadingConnector's step: transfers, lookups, allocation
/// failures, skipped stores and the CPU cache's usage.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OffloadingStats {
    /// Bytes loaded to the GPU.
    pub load_bytes: Option<u64>,
    /// Seconds spent loading.
    pub load_time: Option<f64>,
    /// Bytes per load job.
    pub load_sizes: Option<Vec<f64>>,
    /// Bytes stored from the GPU.
    pub store_bytes: Option<u64>,
    /// Seconds spent storing.
    pub store_time: Option<f64>,
    /// Bytes per store job.
    pub store_sizes: Option<Vec<f64>>,
    /// Seconds per lookup call.
    pub lookup_sync_delays: Option<Vec<f64>>,
    /// Seconds from a deferred lookup to its resolution.
    pub lookup_async_delays: Option<Vec<f64>>,
    /// Store allocations that failed.
    pub allocation_failures: Option<u64>,
    /// Stores skipped below the reuse threshold.
    pub stores_skipped: Option<u64>,
    /// CPU cache pinned by active transfers, 0 to 1.
    pub cpu_cache_usage: Option<f64>,
    /// CPU cache pinned by in-flight stores, 0 to 1.
    pub cpu_cache_write_usage: Option<f64>,
    /// CPU cache pinned by in-flight loads, 0 to 1.
    pub cpu_cache_read_usage: Option<f64>,
}

/// The SimpleCPUOffloadConnector's step.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimpleCpuOffloadStats {
    /// Store admission decisions, by outcome.
    pub save_outcomes: Option<SaveOutcomes>,
    /// Blocks restored to the GPU.
    pub load_blocks: Option<u64>,
    /// Offload-pool blocks pinned now.
    pub used_blocks: Option<u64>,
    /// Offload blocks in pending stores now.
    pub pending_store_blocks: Option<u64>,
}

/// Store admission decisions by outcome, in
/// `SAVE_OUTCOMES` order.
#[skip_serializing_none]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct SaveOutcomes {
    pub stored: Option<u64>,
    pub dropped_cpu_full: Option<u64>,
    pub dropped_request_gone: Option<u64>,
    pub dropped_null_block: Option<u64>,
    pub dropped_not_hashed: Option<u64>,
    pub skipped_already_cached: Option<u64>,
    pub skipped_in_flight: Option<u64>,
}

impl SaveOutcomes {
    /// The counts in `SAVE_OUTCOMES` order.
    pub fn in_order(&self) -> [Option<u64>; crate::catalog::kv_connector::SAVE_OUTCOMES.len()] {
        [
            self.stored,
            self.dropped_cpu_full,
            self.dropped_request_gone,
            self.dropped_null_block,
            self.dropped_not_hashed,
            self.skipped_already_cached,
            self.skipped_in_flight,
        ]
    }
}

/// A duration, size or count: finite and not negative.
fn measure(what: &str, value: f64) -> Result<(), InvalidRecord> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(InvalidRecord(format!(
            "kv_connector_stats.{what} is not a finite non-negative number ({value})"
        )))
    }
}

fn measures(what: &str, values: &Option<Vec<f64>>) -> Result<(), InvalidRecord> {
    let Some(values) = values else {
        return Ok(());
    };
    if values.len() > MAX_KV_CONNECTOR_ENTRIES {
        return Err(InvalidRecord(format!(
            "kv_connector_stats.{what} has {} entries, more than {MAX_KV_CONNECTOR_ENTRIES} (MAX_KV_CONNECTOR_ENTRIES)",
            values.len()
        )));
    }
    values.iter().try_for_each(|v| measure(what, *v))
}

fn fraction(what: &str, value: Option<f64>) -> Result<(), InvalidRecord> {
    match value {
        Some(v) if !(0.0..=1.0).contains(&v) => Err(InvalidRecord(format!(
            "kv_connector_stats.{what} is not between 0 and 1 ({v})"
        ))),
        _ => Ok(()),
    }
}

impl KvConnectorStats {
    /// Refuses a list too long, a negative or non-finite number, or a
    /// fraction outside [0, 1].
    pub(super) fn validate(&self) -> Result<(), InvalidRecord> {
        if let Some(n) = &self.nixl {
            measures("nixl.transfer_duration", &n.transfer_duration)?;
            measures("nixl.post_duration", &n.post_duration)?;
            measures("nixl.bytes_transferred", &n.bytes_transferred)?;
            measures("nixl.num_descriptors", &n.num_descriptors)?;
        }
        if let Some(o) = &self.offloading {
            for (what, value) in [
                ("offloading.load_time", o.load_time),
                ("offloading.store_time", o.store_time),
            ] {
                if let Some(v) = value {
                    measure(what, v)?;
                }
            }
            measures("offloading.load_sizes", &o.load_sizes)?;
            measures("offloading.store_sizes", &o.store_sizes)?;
            measures("offloading.lookup_sync_delays", &o.lookup_sync_delays)?;
            measures("offloading.lookup_async_delays", &o.lookup_async_delays)?;
            fraction("offloading.cpu_cache_usage", o.cpu_cache_usage)?;
            fraction("offloading.cpu_cache_write_usage", o.cpu_cache_write_usage)?;
            fraction("offloading.cpu_cache_read_usage", o.cpu_cache_read_usage)?;
        }
        Ok(())
    }
}
