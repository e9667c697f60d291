//! The scheduler- and engine-tier instruments, and the handles of one
//! `(model_name, engine)` label set, bound once (as vLLM's
//! `PrometheusStatLogger` keeps one labelled child per engine index).

use crate::catalog::engine::{
    CACHE_CONFIG_INFO, CACHE_HIT_SOURCES, CACHE_HIT_SOURCE_LABELS, ENGINE_SLEEP_STATE,
    KV_BLOCK_IDLE_BEFORE_EVICT, KV_BLOCK_LIFETIME, KV_BLOCK_REUSE_GAP, LORA_REQUESTS_INFO,
    NUM_REQUESTS_KV_FETCH_BY_STAGE, NUM_REQUESTS_WAITING_BY_REASON, PROMPT_TOKENS_CACHED_BY_SOURCE,
    RL_WEIGHT_UPDATE_OPERATION_DURATION, SLEEP_MODE_OPERATION_DURATION, SLEEP_STATES,
    SLEEP_STATE_LABELS, SPEC_DECODE_NUM_ACCEPTED_TOKENS, SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS,
    SPEC_DECODE_NUM_DRAFTS, SPEC_DECODE_NUM_DRAFT_TOKENS, WAITING_REASONS, WAITING_REASON_LABELS,
};
use std::sync::OnceLock;

use opentelemetry::metrics::{BoundCounter, BoundGauge, BoundHistogram, Counter, Gauge, Histogram};
use opentelemetry::KeyValue;

use super::attributes::with_label;
use super::kv_connector::{KvConnectorHandles, KvConnectorInstruments};
use super::meters::{f64_counter, f64_gauge, f64_histogram, u64_counter, u64_gauge, Meters};
use crate::catalog;
use crate::protocol::{OperationKind, SchedulerStats, MAX_SPEC_POSITIONS};

/// The families with one series per label set, bound with it and at zero
/// from its start (vLLM's `create_metric_per_engine`), each written once:
/// field, kind, value type and catalog entry (its tier module and name),
/// and, after `<-`, the
/// `SchedulerStats` field it takes as it is (a gauge its value, a counter
/// the step's amount). A new family fed by a new `SchedulerStats` number is
/// one line here; one fed otherwise is recorded by the tracker.
macro_rules! plain_families {
    ($($field:ident: $kind:ident<$value:ident> = $tier:ident::$def:ident $(<- $stat:ident)?,)*) => {
        /// The instruments of the plain families.
        pub(crate) struct PlainInstruments {
            $($field: plain_families!(@instrument $kind $value),)*
        }

        impl PlainInstruments {
            fn new(meter: &Meters) -> Self {
                PlainInstruments {
                    $($field: plain_families!(@new $kind $value)(meter, &catalog::$tier::$def),)*
                }
            }
        }

        /// The plain families' handles of one label set.
        pub(crate) struct PlainHandles {
            $(pub(crate) $field: plain_families!(@handle $kind $value),)*
        }

        impl PlainHandles {
            fn bind(i: &PlainInstruments, labels: &[KeyValue]) -> Self {
                PlainHandles {
                    $($field: i.$field.bind(labels),)*
                }
            }

            fn start_up(&self) {
                $(plain_families!(@zero $kind self.$field);)*
            }

            /// Records the numbers of `stats` each family takes as they are.
            pub(crate) fn record_scheduler_numbers(&self, stats: &SchedulerStats) {
                $($(plain_families!(@record $kind self.$field, stats.$stat);)?)*
            }
        }
    };
    (@instrument counter $value:ident) => { Counter<$value> };
    (@instrument gauge $value:ident) => { Gauge<$value> };
    (@handle counter $value:ident) => { BoundCounter<$value> };
    (@handle gauge $value:ident) => { BoundGauge<$value> };
    (@new counter u64) => { u64_counter };
    (@new counter f64) => { f64_counter };
    (@new gauge u64) => { u64_gauge };
    (@new gauge f64) => { f64_gauge };
    (@zero counter $handle:expr) => { $handle.add(Default::default()) };
    (@zero gauge $handle:expr) => { $handle.record(Default::default()) };
    (@record counter $handle:expr, $amount:expr) => { $handle.add($amount) };
    (@record gauge $handle:expr, $value:expr) => { $handle.record($value) };
}

plain_families! {
    num_requests_running: gauge<u64> = scheduler::NUM_REQUESTS_RUNNING <- num_running_reqs,
    num_requests_waiting: gauge<u64> = scheduler::NUM_REQUESTS_WAITING <- num_waiting_reqs,
    kv_cache_usage: gauge<f64> = scheduler::KV_CACHE_USAGE <- kv_cache_usage,
    prefix_cache_queries: counter<u64> = scheduler::PREFIX_CACHE_QUERIES <- prefix_cache_queries,
    prefix_cache_hits: counter<u64> = scheduler::PREFIX_CACHE_HITS <- prefix_cache_hits,
    external_prefix_cache_queries: counter<u64> = engine::EXTERNAL_PREFIX_CACHE_QUERIES
        <- external_prefix_cache_queries,
    external_prefix_cache_hits: counter<u64> = engine::EXTERNAL_PREFIX_CACHE_HITS
        <- external_prefix_cache_hits,
    mm_cache_queries: counter<u64> = engine::MM_CACHE_QUERIES <- mm_cache_queries,
    mm_cache_hits: counter<u64> = engine::MM_CACHE_HITS <- mm_cache_hits,
    estimated_flops: counter<f64> = engine::ESTIMATED_FLOPS_PER_GPU,
    estimated_read_bytes: counter<f64> = engine::ESTIMATED_READ_BYTES_PER_GPU,
    estimated_write_bytes: counter<f64> = engine::ESTIMATED_WRITE_BYTES_PER_GPU,
}

/// The instruments of the families a scheduler-stats, engine-config or
/// sleep-state record feeds, plus the operation timings.
pub(crate) struct EngineInstruments {
    plain: PlainInstruments,
    waiting_by_reason: Gauge<u64>,
    kv_fetch_by_stage: Gauge<u64>,
    sleep_state: Gauge<u64>,
    cached_by_source: Counter<u64>,
    kv_block_lifetime: Histogram<f64>,
    kv_block_idle_before_evict: Histogram<f64>,
    kv_block_reuse_gap: Histogram<f64>,
    spec_drafts: Counter<u64>,
    spec_draft_tokens: Counter<u64>,
    spec_accepted_tokens: Counter<u64>,
    pub(crate) spec_accepted_per_pos: Counter<u64>,
    pub(crate) cache_config_info: Gauge<u64>,
    pub(crate) lora_requests_info: Gauge<f64>,
    sleep_mode_operations: Histogram<f64>,
    weight_update_operations: Histogram<f64>,
    /// In [`OperationKind::ALL`] order, each bound to its family when first
    /// timed (a bound series exists from then on, at zero if need be, and
    /// vLLM has none before an operation).
    operations: [OnceLock<BoundHistogram<f64>>; OperationKind::ALL.len()],
    /// The KV-connector tier (`scheduler_stats.kv_connector_stats`).
    pub(crate) kv_connector: KvConnectorInstruments,
}

impl EngineInstruments {
    pub(crate) fn new(meter: &Meters) -> Self {
        EngineInstruments {
            plain: PlainInstruments::new(meter),
            waiting_by_reason: u64_gauge(meter, &NUM_REQUESTS_WAITING_BY_REASON),
            kv_fetch_by_stage: u64_gauge(meter, &NUM_REQUESTS_KV_FETCH_BY_STAGE),
            sleep_state: u64_gauge(meter, &ENGINE_SLEEP_STATE),
            cached_by_source: u64_counter(meter, &PROMPT_TOKENS_CACHED_BY_SOURCE),
            kv_block_lifetime: f64_histogram(meter, &KV_BLOCK_LIFETIME),
            kv_block_idle_before_evict: f64_histogram(meter, &KV_BLOCK_IDLE_BEFORE_EVICT),
            kv_block_reuse_gap: f64_histogram(meter, &KV_BLOCK_REUSE_GAP),
            spec_drafts: u64_counter(meter, &SPEC_DECODE_NUM_DRAFTS),
            spec_draft_tokens: u64_counter(meter, &SPEC_DECODE_NUM_DRAFT_TOKENS),
            spec_accepted_tokens: u64_counter(meter, &SPEC_DECODE_NUM_ACCEPTED_TOKENS),
            spec_accepted_per_pos: u64_counter(meter, &SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS),
            cache_config_info: u64_gauge(meter, &CACHE_CONFIG_INFO),
            lora_requests_info: f64_gauge(meter, &LORA_REQUESTS_INFO),
            sleep_mode_operations: f64_histogram(meter, &SLEEP_MODE_OPERATION_DURATION),
            weight_update_operations: f64_histogram(meter, &RL_WEIGHT_UPDATE_OPERATION_DURATION),
            operations: Default::default(),
            kv_connector: KvConnectorInstruments::new(meter),
        }
    }

    /// Records one operation's duration into its family.
    pub(crate) fn record_operation(&self, kind: OperationKind, duration: f64) {
        self.operations[kind.index()]
            .get_or_init(|| {
                let family = if kind.is_sleep_mode() {
                    &self.sleep_mode_operations
                } else {
                    &self.weight_update_operations
                };
                family.bind(&[KeyValue::new(
                    catalog::engine::OPERATION_LABELS[0],
                    kind.as_str(),
                )])
            })
            .record(duration);
    }
}

/// The scheduler- and engine-tier handles of one label set.
pub(crate) struct EngineHandles {
    pub(crate) plain: PlainHandles,
    /// In [`catalog::engine::WAITING_REASONS`] order.
    pub(crate) waiting_by_reason: [BoundGauge<u64>; catalog::engine::WAITING_REASONS.len()],
    /// In [`catalog::engine::SLEEP_STATES`] order.
    pub(crate) sleep_state: [BoundGauge<u64>; catalog::engine::SLEEP_STATES.len()],
    /// In [`catalog::engine::CACHE_HIT_SOURCES`] order.
    pub(crate) cached_by_source: [BoundCounter<u64>; catalog::engine::CACHE_HIT_SOURCES.len()],
    /// The label set's attributes, for the families bound on first use.
    labels: Vec<KeyValue>,
    kv_fetch_by_stage: OnceLock<[BoundGauge<u64>; catalog::engine::KV_FETCH_STAGES.len()]>,
    block_residency: OnceLock<BlockResidencyHandles>,
    spec_decoding: OnceLock<SpecDecodingHandles>,
    /// The KV-connector tier's series, each bound on its first value.
    pub(crate) kv_connector: KvConnectorHandles,
}

/// The KV block residency histograms of a label set.
pub(crate) struct BlockResidencyHandles {
    pub(crate) lifetime: BoundHistogram<f64>,
    pub(crate) idle_before_evict: BoundHistogram<f64>,
    pub(crate) reuse_gap: BoundHistogram<f64>,
}

/// The speculative-decoding counters of a label set.
pub(crate) struct SpecDecodingHandles {
    pub(crate) drafts: BoundCounter<u64>,
    pub(crate) draft_tokens: BoundCounter<u64>,
    pub(crate) accepted_tokens: BoundCounter<u64>,
    labels: Vec<KeyValue>,
    /// By draft position, bound up to the most positions seen (vLLM creates
    /// `num_speculative_tokens` of them).
    accepted_per_pos: [OnceLock<BoundCounter<u64>>; MAX_SPEC_POSITIONS],
}

impl SpecDecodingHandles {
    /// Adds accepted tokens per draft position, position 0 first.
    pub(crate) fn add_accepted_per_pos(&self, counter: &Counter<u64>, per_pos: &[u64]) {
        for ((handle, position), accepted) in self
            .accepted_per_pos
            .iter()
            .zip(catalog::engine::SPEC_POSITIONS)
            .zip(per_pos)
        {
            handle
                .get_or_init(|| {
                    counter.bind(&with_label(
                        &self.labels,
                        catalog::engine::POSITION_LABELS[2],
                        position,
                    ))
                })
                .add(*accepted);
        }
    }
}

impl EngineHandles {
    /// Binds every handle and records the label set's start-up state.
    pub(super) fn bind(i: &EngineInstruments, labels: Vec<KeyValue>) -> Self {
        let with = |name: &'static str, value: &'static str| with_label(&labels, name, value);
        let handles = EngineHandles {
            plain: PlainHandles::bind(&i.plain, &labels),
            waiting_by_reason: WAITING_REASONS
                .map(|r| i.waiting_by_reason.bind(&with(WAITING_REASON_LABELS[2], r))),
            sleep_state: SLEEP_STATES.map(|s| i.sleep_state.bind(&with(SLEEP_STATE_LABELS[2], s))),
            cached_by_source: CACHE_HIT_SOURCES.map(|s| {
                i.cached_by_source
                    .bind(&with(CACHE_HIT_SOURCE_LABELS[2], s))
            }),
            kv_fetch_by_stage: OnceLock::new(),
            block_residency: OnceLock::new(),
            spec_decoding: OnceLock::new(),
            kv_connector: KvConnectorHandles::new(labels.clone()),
            labels: labels.clone(),
        };
        handles.start_up();
        handles
    }

    /// The series vLLM's frontend creates when an engine starts
    /// (`create_metric_per_engine`, `record_sleep_state()` in
    /// `PrometheusStatLogger.__init__`): gauges at 0 and awake, the
    /// unconditional counters at 0. The conditional families (KV fetch
    /// stages, speculative decoding, block residency) appear with their
    /// first data, as theirs appear only when so configured.
    fn start_up(&self) {
        self.plain.start_up();
        for gauge in &self.waiting_by_reason {
            gauge.record(0);
        }
        self.set_sleep_level(0);
        for counter in &self.cached_by_source {
            counter.add(0);
        }
    }

    /// The KV fetch stage gauges, in [`catalog::engine::KV_FETCH_STAGES`] order
    /// (bound on first use: vLLM has them on KV consumers only).
    pub(crate) fn kv_fetch_by_stage(
        &self,
        i: &EngineInstruments,
    ) -> &[BoundGauge<u64>; catalog::engine::KV_FETCH_STAGES.len()] {
        self.kv_fetch_by_stage.get_or_init(|| {
            catalog::engine::KV_FETCH_STAGES.map(|stage| {
                i.kv_fetch_by_stage.bind(&with_label(
                    &self.labels,
                    catalog::engine::KV_FETCH_STAGE_LABELS[2],
                    stage,
                ))
            })
        })
    }

    /// The block residency histograms (bound on first use: vLLM has them
    /// with `--kv-cache-metrics` only).
    pub(crate) fn block_residency(&self, i: &EngineInstruments) -> &BlockResidencyHandles {
        self.block_residency.get_or_init(|| BlockResidencyHandles {
            lifetime: i.kv_block_lifetime.bind(&self.labels),
            idle_before_evict: i.kv_block_idle_before_evict.bind(&self.labels),
            reuse_gap: i.kv_block_reuse_gap.bind(&self.labels),
        })
    }

    /// The speculative-decoding counters (bound on first use: vLLM has them
    /// with a speculative config only).
    pub(crate) fn spec_decoding(&self, i: &EngineInstruments) -> &SpecDecodingHandles {
        self.spec_decoding.get_or_init(|| SpecDecodingHandles {
            drafts: i.spec_drafts.bind(&self.labels),
            draft_tokens: i.spec_draft_tokens.bind(&self.labels),
            accepted_tokens: i.spec_accepted_tokens.bind(&self.labels),
            labels: self.labels.clone(),
            accepted_per_pos: Default::default(),
        })
    }

    /// `vllm:engine_sleep_state` for a sleep level (vLLM's
    /// `record_sleep_state`): 0 awake, 1 weights offloaded, 2 all discarded.
    pub(crate) fn set_sleep_level(&self, level: u8) {
        let [awake, weights_offloaded, discard_all] = &self.sleep_state;
        awake.record(u64::from(level == 0));
        weights_offloaded.record(u64::from(level == 1));
        discard_all.record(u64::from(level == 2));
    }
}
