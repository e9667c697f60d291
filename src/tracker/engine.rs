//! Applies the engine-level records: scheduler stats, an engine's start-up
//! configuration, its sleep state and the API server's operation timings.
//!
//! Mirrors `PrometheusStatLogger.record()` (per-step `SchedulerStats`),
//! `log_engine_initialized()` (`vllm:cache_config_info`),
//! `record_sleep_state()` and the dev-mode routes' operation timers. The
//! per-engine state vLLM keeps in the logger (the configuration series to
//! supersede, `max_loras`, the current LoRA series) lives here, for at most
//! as many engines as there are label sets.

use std::collections::HashMap;

use opentelemetry::metrics::BoundGauge;
use opentelemetry::KeyValue;

use crate::catalog;
use crate::instruments::Instruments;
use crate::protocol::{EngineConfig, Operation, SchedulerStats, SleepState};

/// What one engine's later records depend on.
#[derive(Default)]
struct EngineState {
    /// The attributes of its current `vllm:cache_config_info` series.
    cache_config: Option<Vec<KeyValue>>,
    /// `max_lora` of its `vllm:lora_requests_info` series (empty when not declared).
    max_loras: String,
    lora: Option<LoraSeries>,
    /// Whether a `max_model_len` other than the sidecar's was warned about.
    warned_max_model_len: bool,
}

/// The `vllm:lora_requests_info` series of the adapters in use, bound while
/// they stay the same so that a step with the same adapters allocates nothing.
struct LoraSeries {
    running: Vec<String>,
    waiting: Vec<String>,
    handle: BoundGauge<f64>,
}

/// The engine-level records' state, by `(model_name, engine)`.
#[derive(Default)]
pub(super) struct EngineRecords {
    engines: HashMap<String, HashMap<u32, EngineState>>,
    tracked: usize,
}

impl EngineRecords {
    /// The state of an engine; `None` beyond `limit` engines (their records
    /// still apply, without superseding earlier series).
    fn state(&mut self, model_name: &str, engine: u32, limit: usize) -> Option<&mut EngineState> {
        let known = self
            .engines
            .get(model_name)
            .is_some_and(|by_engine| by_engine.contains_key(&engine));
        if !known {
            if self.tracked >= limit {
                return None;
            }
            self.tracked += 1;
            self.engines
                .entry(model_name.to_owned())
                .or_default()
                .insert(engine, EngineState::default());
        }
        // Looked up again rather than through `entry`, whose owned key would
        // allocate on every record of a known engine.
        self.engines.get_mut(model_name)?.get_mut(&engine)
    }

    /// One engine step's stats, as `PrometheusStatLogger.record()` applies a
    /// `SchedulerStats`.
    pub(super) fn scheduler_stats(&mut self, instruments: &Instruments, stats: &SchedulerStats) {
        let handles = instruments.engine_handles(&stats.model_name, stats.engine);
        handles.plain.record_scheduler_numbers(stats);
        let [capacity, deferred] = &handles.waiting_by_reason;
        capacity.record(stats.waiting_for_capacity());
        deferred.record(stats.num_skipped_waiting_reqs);
        let engine = instruments.engine();
        if let Some(stages) = &stats.num_kv_fetch_reqs_by_stage {
            let [waiting_to_start, in_progress, completed_waiting] =
                handles.kv_fetch_by_stage(engine);
            waiting_to_start.record(stages.waiting_to_start);
            in_progress.record(stages.in_progress);
            completed_waiting.record(stages.completed_waiting);
        }
        let [device, external @ ..] = &handles.cached_by_source;
        device.add(stats.prefix_cache_hits);
        for (counter, hits) in external.iter().zip(stats.external_hits_by_source()) {
            counter.add(hits);
        }
        if !stats.kv_cache_eviction_events.is_empty() {
            let residency = handles.block_residency(engine);
            for event in &stats.kv_cache_eviction_events {
                residency.lifetime.record(event.lifetime_seconds);
                residency.idle_before_evict.record(event.idle_seconds);
                for gap in &event.reuse_gaps_seconds {
                    residency.reuse_gap.record(*gap);
                }
            }
        }
        let perf = stats.perf_stats.unwrap_or_default();
        handles.plain.estimated_flops.add(perf.num_flops_per_gpu);
        handles
            .plain
            .estimated_read_bytes
            .add(perf.num_read_bytes_per_gpu);
        handles
            .plain
            .estimated_write_bytes
            .add(perf.num_write_bytes_per_gpu);
        if let Some(kv) = &stats.kv_connector_stats {
            handles.kv_connector.record(&engine.kv_connector, kv);
        }
        if let Some(spec) = &stats.spec_decoding {
            let counters = handles.spec_decoding(engine);
            counters.drafts.add(spec.num_drafts);
            counters.draft_tokens.add(spec.num_draft_tokens);
            counters.accepted_tokens.add(spec.num_accepted_tokens);
            counters.add_accepted_per_pos(
                &engine.spec_accepted_per_pos,
                &spec.num_accepted_tokens_per_pos,
            );
        }
        if stats.running_lora_adapters.is_some() || stats.waiting_lora_adapters.is_some() {
            let at = stats
                .received_at
                .unwrap_or_else(crate::support::clock::unix_now);
            self.lora_info(instruments, stats, at);
        }
    }

    /// `vllm:lora_requests_info` set to the time of the stats, on the
    /// series of the adapters in use (vLLM's `set_to_current_time()`).
    fn lora_info(&mut self, instruments: &Instruments, stats: &SchedulerStats, at: f64) {
        let running = stats.running_lora_adapters.as_deref().unwrap_or_default();
        let waiting = stats.waiting_lora_adapters.as_deref().unwrap_or_default();
        let limit = instruments.config().max_label_sets;
        let gauge = &instruments.engine().lora_requests_info;
        let Some(state) = self.state(&stats.model_name, stats.engine, limit) else {
            gauge.record(at, &lora_attributes("", running, waiting));
            return;
        };
        let current = state
            .lora
            .as_ref()
            .filter(|series| series.running == running && series.waiting == waiting);
        match current {
            Some(series) => series.handle.record(at),
            None => {
                let attributes = lora_attributes(&state.max_loras, running, waiting);
                let series = LoraSeries {
                    running: running.to_vec(),
                    waiting: waiting.to_vec(),
                    handle: gauge.bind(&attributes),
                };
                series.handle.record(at);
                state.lora = Some(series);
            }
        }
    }

    /// An engine's start-up, as `log_engine_initialized()` logs its
    /// `CacheConfig`; a new configuration for the same engine sets the
    /// previous series to 0. A `max_model_len` other than the one the token
    /// buckets were built for is warned about, once per engine.
    pub(super) fn engine_config(&mut self, instruments: &Instruments, config: &EngineConfig) {
        instruments.engine_handles(&config.model_name, config.engine);
        let limit = instruments.config().max_label_sets;
        let ours = instruments.max_model_len();
        if let Some(theirs) = config.max_model_len.filter(|len| *len != ours) {
            // Beyond the tracked engines, every such record warns.
            let first = self
                .state(&config.model_name, config.engine, limit)
                .is_none_or(|state| !std::mem::replace(&mut state.warned_max_model_len, true));
            if first {
                tracing::warn!(
                    "engine {} of model '{}' has max_model_len {theirs}, but the token histograms' buckets are built for max_model_len {ours}; configure max_model_len {theirs} (the command line's --max-model-len) for vLLM's buckets",
                    config.engine,
                    crate::protocol::shown(&config.model_name),
                );
            }
        }
        let mut attributes = vec![KeyValue::new(
            catalog::engine::CACHE_CONFIG_LABELS[0],
            config.engine.to_string(),
        )];
        attributes.extend(
            config
                .cache_config
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        );
        let gauge = &instruments.engine().cache_config_info;
        if let Some(state) = self.state(&config.model_name, config.engine, limit) {
            if let Some(previous) = state.cache_config.take() {
                if previous != attributes {
                    gauge.record(0, &previous);
                }
            }
            state.cache_config = Some(attributes.clone());
            let max_loras = config.max_loras.map(|n| n.to_string()).unwrap_or_default();
            if state.max_loras != max_loras {
                state.max_loras = max_loras;
                state.lora = None;
            }
        }
        gauge.record(1, &attributes);
    }

    /// An engine's sleep level (vLLM's `record_sleep_state`).
    pub(super) fn sleep_state(&mut self, instruments: &Instruments, sleep: &SleepState) {
        instruments
            .engine_handles(&sleep.model_name, sleep.engine)
            .set_sleep_level(sleep.level);
    }

    /// One API-server operation's duration.
    pub(super) fn operation(&mut self, instruments: &Instruments, operation: &Operation) {
        instruments
            .engine()
            .record_operation(operation.operation, operation.duration);
    }
}

/// The series' labels; `max_lora` only when the engine declared its
/// `max_loras` (vLLM always knows it; a trace may not say).
fn lora_attributes(max_loras: &str, running: &[String], waiting: &[String]) -> Vec<KeyValue> {
    let [max_lora, waiting_label, running_label] = catalog::engine::LORA_INFO_LABELS;
    let mut attributes = Vec::with_capacity(3);
    if !max_loras.is_empty() {
        attributes.push(KeyValue::new(max_lora, max_loras.to_owned()));
    }
    attributes.push(KeyValue::new(waiting_label, waiting.join(",")));
    attributes.push(KeyValue::new(running_label, running.join(",")));
    attributes
}
