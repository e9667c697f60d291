//! The KV-connector tier's instruments, and the handles of one label set,
//! each bound on its first value (docs/SEMANTICS.md §4b): vLLM registers
//! these families only with a connector configured, and the offloading
//! connectors create a series with its first data. NIXL's eight series are
//! bound together, at 0, with the label set's first NIXL stats, as vLLM
//! creates them when the connector starts.

use std::sync::OnceLock;

use opentelemetry::metrics::{BoundCounter, BoundGauge, BoundHistogram, Counter, Gauge, Histogram};
use opentelemetry::KeyValue;

use super::attributes::with_label;
use super::meters::{f64_counter, f64_gauge, f64_histogram, u64_counter, u64_gauge, Meters};
use crate::catalog::{self, MetricDef};
use crate::protocol::{KvConnectorStats, NixlStats, OffloadingStats, SimpleCpuOffloadStats};

/// NIXL's histograms, in payload order.
const NIXL_HISTOGRAMS: [&MetricDef; 4] = [
    &catalog::kv_connector::NIXL_XFER_TIME,
    &catalog::kv_connector::NIXL_POST_TIME,
    &catalog::kv_connector::NIXL_BYTES_TRANSFERRED,
    &catalog::kv_connector::NIXL_NUM_DESCRIPTORS,
];
/// NIXL's counters.
const NIXL_COUNTERS: [&MetricDef; 4] = [
    &catalog::kv_connector::NIXL_NUM_FAILED_TRANSFERS,
    &catalog::kv_connector::NIXL_NUM_FAILED_NOTIFICATIONS,
    &catalog::kv_connector::NIXL_NUM_KV_EXPIRED_REQS,
    &catalog::kv_connector::NIXL_NUM_NOTIFICATIONS_AFTER_EXPIRY,
];
/// The offloading connectors' integer counters.
const COUNTS: [&MetricDef; 5] = [
    &catalog::kv_connector::KV_OFFLOAD_LOAD_BYTES,
    &catalog::kv_connector::KV_OFFLOAD_STORE_BYTES,
    &catalog::kv_connector::KV_OFFLOAD_ALLOCATION_FAILURE,
    &catalog::kv_connector::KV_OFFLOAD_STORES_SKIPPED,
    &catalog::kv_connector::SIMPLE_KV_OFFLOAD_LOAD_BLOCKS,
];
/// Their seconds counters.
const SECONDS: [&MetricDef; 2] = [
    &catalog::kv_connector::KV_OFFLOAD_LOAD_TIME,
    &catalog::kv_connector::KV_OFFLOAD_STORE_TIME,
];
/// Their histograms.
const OBSERVED: [&MetricDef; 4] = [
    &catalog::kv_connector::KV_OFFLOAD_LOAD_SIZE,
    &catalog::kv_connector::KV_OFFLOAD_STORE_SIZE,
    &catalog::kv_connector::KV_OFFLOAD_LOOKUP_SYNC_DELAY,
    &catalog::kv_connector::KV_OFFLOAD_LOOKUP_ASYNC_DELAY,
];
/// Their fraction gauges.
const FRACTIONS: [&MetricDef; 3] = [
    &catalog::kv_connector::KV_OFFLOAD_CPU_CACHE_USAGE,
    &catalog::kv_connector::KV_OFFLOAD_CPU_CACHE_WRITE_USAGE,
    &catalog::kv_connector::KV_OFFLOAD_CPU_CACHE_READ_USAGE,
];
/// Their block gauges.
const BLOCKS: [&MetricDef; 2] = [
    &catalog::kv_connector::SIMPLE_KV_OFFLOAD_USED_BLOCKS,
    &catalog::kv_connector::SIMPLE_KV_OFFLOAD_PENDING_STORE_BLOCKS,
];

/// The tier's instruments.
pub(crate) struct KvConnectorInstruments {
    nixl_histograms: [Histogram<f64>; 4],
    nixl_counters: [Counter<u64>; 4],
    counts: [Counter<u64>; 5],
    seconds: [Counter<f64>; 2],
    observed: [Histogram<f64>; 4],
    fractions: [Gauge<f64>; 3],
    blocks: [Gauge<u64>; 2],
    save_outcomes: Counter<u64>,
}

impl KvConnectorInstruments {
    pub(crate) fn new(meter: &Meters) -> Self {
        KvConnectorInstruments {
            nixl_histograms: NIXL_HISTOGRAMS.map(|d| f64_histogram(meter, d)),
            nixl_counters: NIXL_COUNTERS.map(|d| u64_counter(meter, d)),
            counts: COUNTS.map(|d| u64_counter(meter, d)),
            seconds: SECONDS.map(|d| f64_counter(meter, d)),
            observed: OBSERVED.map(|d| f64_histogram(meter, d)),
            fractions: FRACTIONS.map(|d| f64_gauge(meter, d)),
            blocks: BLOCKS.map(|d| u64_gauge(meter, d)),
            save_outcomes: u64_counter(
                meter,
                &catalog::kv_connector::SIMPLE_KV_OFFLOAD_SAVE_OUTCOMES,
            ),
        }
    }
}

/// NIXL's series of one label set.
struct NixlHandles {
    histograms: [BoundHistogram<f64>; 4],
    counters: [BoundCounter<u64>; 4],
}

/// The tier's handles of one label set, each bound on first use.
pub(crate) struct KvConnectorHandles {
    labels: Vec<KeyValue>,
    nixl: OnceLock<NixlHandles>,
    counts: [OnceLock<BoundCounter<u64>>; 5],
    seconds: [OnceLock<BoundCounter<f64>>; 2],
    observed: [OnceLock<BoundHistogram<f64>>; 4],
    fractions: [OnceLock<BoundGauge<f64>>; 3],
    blocks: [OnceLock<BoundGauge<u64>>; 2],
    save_outcomes: [OnceLock<BoundCounter<u64>>; catalog::kv_connector::SAVE_OUTCOMES.len()],
}

impl KvConnectorHandles {
    pub(crate) fn new(labels: Vec<KeyValue>) -> Self {
        KvConnectorHandles {
            labels,
            nixl: OnceLock::new(),
            counts: Default::default(),
            seconds: Default::default(),
            observed: Default::default(),
            fractions: Default::default(),
            blocks: Default::default(),
            save_outcomes: Default::default(),
        }
    }

    /// Records one step's stats; mirrors `KVConnectorProm.observe`.
    pub(crate) fn record(&self, i: &KvConnectorInstruments, stats: &KvConnectorStats) {
        if let Some(nixl) = &stats.nixl {
            self.record_nixl(i, nixl);
        }
        if let Some(offloading) = &stats.offloading {
            self.record_offloading(i, offloading);
        }
        if let Some(simple) = &stats.simple_cpu_offload {
            self.record_simple(i, simple);
        }
    }

    /// Mirrors `NixlPromMetrics.observe`: an observation per list element;
    /// failed transfers count the failed handshakes and notifications too.
    fn record_nixl(&self, i: &KvConnectorInstruments, n: &NixlStats) {
        let handles = self.nixl.get_or_init(|| {
            let counters = i.nixl_counters.each_ref().map(|c| c.bind(&self.labels));
            for counter in &counters {
                counter.add(0);
            }
            NixlHandles {
                histograms: i.nixl_histograms.each_ref().map(|h| h.bind(&self.labels)),
                counters,
            }
        });
        let lists = [
            &n.transfer_duration,
            &n.post_duration,
            &n.bytes_transferred,
            &n.num_descriptors,
        ];
        for (histogram, list) in handles.histograms.iter().zip(lists) {
            for value in list.iter().flatten() {
                histogram.record(*value);
            }
        }
        let count = |c: Option<u64>| c.unwrap_or(0);
        let failed = count(n.num_failed_transfers)
            .saturating_add(count(n.num_failed_handshakes))
            .saturating_add(count(n.num_failed_notifications));
        let adds = [
            failed,
            count(n.num_failed_notifications),
            count(n.num_kv_expired_reqs),
            count(n.num_notifications_after_expiry),
        ];
        for (counter, add) in handles.counters.iter().zip(adds) {
            counter.add(add);
        }
    }

    /// Mirrors `OffloadPromMetrics.observe`: counters add, gauges set,
    /// histograms observe each element; a series appears with its first value.
    fn record_offloading(&self, i: &KvConnectorInstruments, o: &OffloadingStats) {
        let counts = [
            o.load_bytes,
            o.store_bytes,
            o.allocation_failures,
            o.stores_skipped,
        ];
        for (index, value) in counts.into_iter().enumerate() {
            if let Some(value) = value {
                self.count(i, index, value);
            }
        }
        for (index, value) in [o.load_time, o.store_time].into_iter().enumerate() {
            if let Some(value) = value {
                self.seconds[index]
                    .get_or_init(|| i.seconds[index].bind(&self.labels))
                    .add(value);
            }
        }
        let lists = [
            &o.load_sizes,
            &o.store_sizes,
            &o.lookup_sync_delays,
            &o.lookup_async_delays,
        ];
        for (index, list) in lists.into_iter().enumerate() {
            if let Some(list) = list {
                let histogram =
                    self.observed[index].get_or_init(|| i.observed[index].bind(&self.labels));
                for value in list {
                    histogram.record(*value);
                }
            }
        }
        let fractions = [
            o.cpu_cache_usage,
            o.cpu_cache_write_usage,
            o.cpu_cache_read_usage,
        ];
        for (index, value) in fractions.into_iter().enumerate() {
            if let Some(value) = value {
                self.fractions[index]
                    .get_or_init(|| i.fractions[index].bind(&self.labels))
                    .record(value);
            }
        }
    }

    /// Mirrors `SimpleCPUOffloadPromMetrics.observe`.
    fn record_simple(&self, i: &KvConnectorInstruments, s: &SimpleCpuOffloadStats) {
        if let Some(outcomes) = &s.save_outcomes {
            for ((cell, outcome), value) in self
                .save_outcomes
                .iter()
                .zip(catalog::kv_connector::SAVE_OUTCOMES)
                .zip(outcomes.in_order())
            {
                if let Some(value) = value {
                    cell.get_or_init(|| {
                        i.save_outcomes.bind(&with_label(
                            &self.labels,
                            catalog::kv_connector::SAVE_OUTCOME_LABELS[2],
                            outcome,
                        ))
                    })
                    .add(value);
                }
            }
        }
        if let Some(value) = s.load_blocks {
            self.count(i, 4, value);
        }
        for (index, value) in [s.used_blocks, s.pending_store_blocks]
            .into_iter()
            .enumerate()
        {
            if let Some(value) = value {
                self.blocks[index]
                    .get_or_init(|| i.blocks[index].bind(&self.labels))
                    .record(value);
            }
        }
    }

    fn count(&self, i: &KvConnectorInstruments, index: usize, value: u64) {
        self.counts[index]
            .get_or_init(|| i.counts[index].bind(&self.labels))
            .add(value);
    }
}
