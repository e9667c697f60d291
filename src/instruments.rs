//! OpenTelemetry instruments built from the catalog, and per-label-set handles.
//!
//! [`Instruments`] owns the `SdkMeterProvider`: one explicit-bucket View per
//! catalog histogram, one instrument per catalog family, and a cache of bound
//! handles per `(model_name, engine)` label set. Handles are resolved once, when
//! the first request (or scheduler record) of a label set arrives, and shared
//! by every later request of that set, as vLLM's Rust frontend does; recording
//! through them allocates nothing and looks up no attributes.
//!
//! ```
//! use opentelemetry_sdk::metrics::ManualReader;
//! use vllm_otel_metrics::instruments::Instruments;
//!
//! let instruments = Instruments::builder()
//!     .with_max_model_len(4096)
//!     .with_reader(ManualReader::builder().build())
//!     .build();
//! # instruments.shutdown().unwrap();
//! ```

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, Counter, Gauge, Histogram, Meter, MeterProvider as _,
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, MeterProviderBuilder, SdkMeterProvider, Stream,
};
use opentelemetry_sdk::Resource;

use crate::catalog::{self, Kind, MetricDef, DEFAULT_MAX_MODEL_LEN, PROMPT_TOKEN_SOURCES};
use crate::protocol::FinishReason;
use crate::tracker::{EvictReason, RejectReason};

/// The instrumentation scope name of every instrument.
pub const SCOPE_NAME: &str = env!("CARGO_PKG_NAME");

/// Default number of `(model_name, engine)` label sets kept apart per family
/// before the SDK folds further ones into its overflow series.
pub const DEFAULT_MAX_LABEL_SETS: usize = 2048;

/// Which names the instruments carry on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameStyle {
    /// OpenTelemetry names (`vllm.request_num_preemptions`).
    #[default]
    Otel,
    /// vLLM's Prometheus names (`vllm:request_num_preemptions`), renamed in the Views.
    Prometheus,
}

/// Configures and builds [`Instruments`].
#[derive(Debug)]
pub struct InstrumentsBuilder {
    provider: MeterProviderBuilder,
    max_model_len: u32,
    max_label_sets: usize,
    name_style: NameStyle,
}

impl InstrumentsBuilder {
    /// The model context length that bounds the token histograms' buckets.
    pub fn with_max_model_len(mut self, max_model_len: u32) -> Self {
        self.max_model_len = max_model_len;
        self
    }

    /// How many `(model_name, engine)` label sets each family keeps apart.
    pub fn with_max_label_sets(mut self, max_label_sets: usize) -> Self {
        self.max_label_sets = max_label_sets.max(1);
        self
    }

    /// Which names the streams carry (the Prometheus bridge maps either back).
    pub fn with_name_style(mut self, name_style: NameStyle) -> Self {
        self.name_style = name_style;
        self
    }

    /// Adds a reader (the Prometheus bridge, an OTLP periodic reader, …).
    pub fn with_reader<R: MetricReader>(mut self, reader: R) -> Self {
        self.provider = self.provider.with_reader(reader);
        self
    }

    /// Sets the OpenTelemetry resource.
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.provider = self.provider.with_resource(resource);
        self
    }

    /// Builds the provider, its Views and every instrument.
    pub fn build(self) -> Instruments {
        let max_model_len = self.max_model_len;
        let max_label_sets = self.max_label_sets;
        let name_style = self.name_style;
        let provider = self
            .provider
            .with_view(move |inst: &Instrument| {
                stream_for(inst, max_model_len, max_label_sets, name_style)
            })
            .build();
        let meter = provider.meter(SCOPE_NAME);
        let rejected = u64_counter(&meter, &catalog::REJECTED_INPUTS);
        let rejected_handles = RejectReason::ALL.map(|reason| {
            rejected.bind(&[KeyValue::new(catalog::REASON_LABELS[0], reason.as_str())])
        });
        let evicted = u64_counter(&meter, &catalog::EVICTED_REQUESTS);
        let evicted_handles = EvictReason::ALL.map(|reason| {
            evicted.bind(&[KeyValue::new(catalog::REASON_LABELS[0], reason.as_str())])
        });
        let families = Families::new(&meter);
        Instruments {
            inner: Arc::new(Inner {
                provider,
                families,
                rejected: rejected_handles,
                evicted: evicted_handles,
                request_handles: RwLock::default(),
                scheduler_handles: RwLock::default(),
                max_model_len,
            }),
        }
    }
}

/// The View of one catalog family: bucket boundaries, cardinality limit, name.
fn stream_for(
    inst: &Instrument,
    max_model_len: u32,
    max_label_sets: usize,
    name_style: NameStyle,
) -> Option<Stream> {
    let def = catalog::by_otel_name(inst.name())?;
    let values_per_label_set = match def.labels.get(2) {
        Some(&"finished_reason") => FinishReason::ALL.len(),
        Some(&"source") => PROMPT_TOKEN_SOURCES.len(),
        _ => 1,
    };
    let mut stream =
        Stream::builder().with_cardinality_limit(max_label_sets * values_per_label_set + 1);
    if def.kind == Kind::Histogram {
        stream = stream.with_aggregation(Aggregation::ExplicitBucketHistogram {
            boundaries: def.buckets.boundaries(max_model_len),
            record_min_max: false,
        });
    }
    if name_style == NameStyle::Prometheus {
        stream = stream.with_name(def.vllm_name);
    }
    stream.build().ok()
}

fn u64_counter(meter: &Meter, def: &'static MetricDef) -> Counter<u64> {
    meter
        .u64_counter(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

fn f64_histogram(meter: &Meter, def: &'static MetricDef) -> Histogram<f64> {
    meter
        .f64_histogram(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

/// One instrument per catalog family.
struct Families {
    num_preemptions: Counter<u64>,
    prompt_tokens: Counter<u64>,
    prompt_tokens_by_source: Counter<u64>,
    prompt_tokens_cached: Counter<u64>,
    generation_tokens: Counter<u64>,
    request_success: Counter<u64>,
    iteration_tokens: Histogram<f64>,
    request_prompt_tokens: Histogram<f64>,
    request_generation_tokens: Histogram<f64>,
    request_max_num_generation_tokens: Histogram<f64>,
    request_params_max_tokens: Histogram<f64>,
    request_params_n: Histogram<f64>,
    request_num_preemptions: Histogram<f64>,
    request_prefill_kv_computed_tokens: Histogram<f64>,
    time_to_first_token: Histogram<f64>,
    inter_token_latency: Histogram<f64>,
    e2e_request_latency: Histogram<f64>,
    request_queue_time: Histogram<f64>,
    request_prefill_time: Histogram<f64>,
    request_decode_time: Histogram<f64>,
    request_inference_time: Histogram<f64>,
    request_time_per_output_token: Histogram<f64>,
    num_requests_running: Gauge<i64>,
    num_requests_waiting: Gauge<i64>,
    kv_cache_usage: Gauge<f64>,
    prefix_cache_queries: Counter<u64>,
    prefix_cache_hits: Counter<u64>,
}

impl Families {
    fn new(meter: &Meter) -> Self {
        use catalog::*;
        let i64_gauge = |def: &'static MetricDef| {
            meter
                .i64_gauge(def.otel_name)
                .with_unit(def.unit)
                .with_description(def.help)
                .build()
        };
        Families {
            num_preemptions: u64_counter(meter, &NUM_PREEMPTIONS),
            prompt_tokens: u64_counter(meter, &PROMPT_TOKENS),
            prompt_tokens_by_source: u64_counter(meter, &PROMPT_TOKENS_BY_SOURCE),
            prompt_tokens_cached: u64_counter(meter, &PROMPT_TOKENS_CACHED),
            generation_tokens: u64_counter(meter, &GENERATION_TOKENS),
            request_success: u64_counter(meter, &REQUEST_SUCCESS),
            iteration_tokens: f64_histogram(meter, &ITERATION_TOKENS),
            request_prompt_tokens: f64_histogram(meter, &REQUEST_PROMPT_TOKENS),
            request_generation_tokens: f64_histogram(meter, &REQUEST_GENERATION_TOKENS),
            request_max_num_generation_tokens: f64_histogram(
                meter,
                &REQUEST_MAX_NUM_GENERATION_TOKENS,
            ),
            request_params_max_tokens: f64_histogram(meter, &REQUEST_PARAMS_MAX_TOKENS),
            request_params_n: f64_histogram(meter, &REQUEST_PARAMS_N),
            request_num_preemptions: f64_histogram(meter, &REQUEST_NUM_PREEMPTIONS),
            request_prefill_kv_computed_tokens: f64_histogram(
                meter,
                &REQUEST_PREFILL_KV_COMPUTED_TOKENS,
            ),
            time_to_first_token: f64_histogram(meter, &TIME_TO_FIRST_TOKEN),
            inter_token_latency: f64_histogram(meter, &INTER_TOKEN_LATENCY),
            e2e_request_latency: f64_histogram(meter, &E2E_REQUEST_LATENCY),
            request_queue_time: f64_histogram(meter, &REQUEST_QUEUE_TIME),
            request_prefill_time: f64_histogram(meter, &REQUEST_PREFILL_TIME),
            request_decode_time: f64_histogram(meter, &REQUEST_DECODE_TIME),
            request_inference_time: f64_histogram(meter, &REQUEST_INFERENCE_TIME),
            request_time_per_output_token: f64_histogram(meter, &REQUEST_TIME_PER_OUTPUT_TOKEN),
            num_requests_running: i64_gauge(&NUM_REQUESTS_RUNNING),
            num_requests_waiting: i64_gauge(&NUM_REQUESTS_WAITING),
            kv_cache_usage: meter
                .f64_gauge(KV_CACHE_USAGE.otel_name)
                .with_unit(KV_CACHE_USAGE.unit)
                .with_description(KV_CACHE_USAGE.help)
                .build(),
            prefix_cache_queries: u64_counter(meter, &PREFIX_CACHE_QUERIES),
            prefix_cache_hits: u64_counter(meter, &PREFIX_CACHE_HITS),
        }
    }
}

fn engine_labels(model_name: &str, engine: u32) -> [KeyValue; 2] {
    [
        KeyValue::new(catalog::ENGINE_LABELS[0], model_name.to_owned()),
        KeyValue::new(catalog::ENGINE_LABELS[1], engine.to_string()),
    ]
}

fn with_label(base: &[KeyValue; 2], name: &'static str, value: &'static str) -> [KeyValue; 3] {
    [base[0].clone(), base[1].clone(), KeyValue::new(name, value)]
}

/// Bound per-request handles of one `(model_name, engine)` label set
/// (the counterpart of vLLM's `RequestMetricHandles`).
pub(crate) struct RequestHandles {
    pub(crate) num_preemptions: BoundCounter<u64>,
    pub(crate) prompt_tokens: BoundCounter<u64>,
    /// Indexed like [`PROMPT_TOKEN_SOURCES`].
    pub(crate) prompt_tokens_by_source: [BoundCounter<u64>; 3],
    pub(crate) prompt_tokens_cached: BoundCounter<u64>,
    pub(crate) generation_tokens: BoundCounter<u64>,
    /// Bound on first use: vLLM creates a finish reason's series when a request
    /// first finishes with it, not at request start.
    request_success: [OnceLock<BoundCounter<u64>>; 5],
    request_success_instrument: Counter<u64>,
    labels: [KeyValue; 2],
    pub(crate) iteration_tokens: BoundHistogram<f64>,
    pub(crate) request_prompt_tokens: BoundHistogram<f64>,
    pub(crate) request_generation_tokens: BoundHistogram<f64>,
    pub(crate) request_max_num_generation_tokens: BoundHistogram<f64>,
    pub(crate) request_params_max_tokens: BoundHistogram<f64>,
    pub(crate) request_params_n: BoundHistogram<f64>,
    pub(crate) request_num_preemptions: BoundHistogram<f64>,
    pub(crate) request_prefill_kv_computed_tokens: BoundHistogram<f64>,
    pub(crate) time_to_first_token: BoundHistogram<f64>,
    pub(crate) inter_token_latency: BoundHistogram<f64>,
    pub(crate) e2e_request_latency: BoundHistogram<f64>,
    pub(crate) request_queue_time: BoundHistogram<f64>,
    pub(crate) request_prefill_time: BoundHistogram<f64>,
    pub(crate) request_decode_time: BoundHistogram<f64>,
    pub(crate) request_inference_time: BoundHistogram<f64>,
    pub(crate) request_time_per_output_token: BoundHistogram<f64>,
}

impl RequestHandles {
    fn bind(f: &Families, model_name: &str, engine: u32) -> Self {
        let labels = engine_labels(model_name, engine);
        let source = |i: usize| {
            f.prompt_tokens_by_source.bind(&with_label(
                &labels,
                catalog::SOURCE_LABELS[2],
                PROMPT_TOKEN_SOURCES[i],
            ))
        };
        RequestHandles {
            num_preemptions: f.num_preemptions.bind(&labels),
            prompt_tokens: f.prompt_tokens.bind(&labels),
            prompt_tokens_by_source: [source(0), source(1), source(2)],
            prompt_tokens_cached: f.prompt_tokens_cached.bind(&labels),
            generation_tokens: f.generation_tokens.bind(&labels),
            request_success: Default::default(),
            request_success_instrument: f.request_success.clone(),
            iteration_tokens: f.iteration_tokens.bind(&labels),
            request_prompt_tokens: f.request_prompt_tokens.bind(&labels),
            request_generation_tokens: f.request_generation_tokens.bind(&labels),
            request_max_num_generation_tokens: f.request_max_num_generation_tokens.bind(&labels),
            request_params_max_tokens: f.request_params_max_tokens.bind(&labels),
            request_params_n: f.request_params_n.bind(&labels),
            request_num_preemptions: f.request_num_preemptions.bind(&labels),
            request_prefill_kv_computed_tokens: f.request_prefill_kv_computed_tokens.bind(&labels),
            time_to_first_token: f.time_to_first_token.bind(&labels),
            inter_token_latency: f.inter_token_latency.bind(&labels),
            e2e_request_latency: f.e2e_request_latency.bind(&labels),
            request_queue_time: f.request_queue_time.bind(&labels),
            request_prefill_time: f.request_prefill_time.bind(&labels),
            request_decode_time: f.request_decode_time.bind(&labels),
            request_inference_time: f.request_inference_time.bind(&labels),
            request_time_per_output_token: f.request_time_per_output_token.bind(&labels),
            labels,
        }
    }

    /// The `request_success` handle of `reason`, bound the first time it is needed.
    pub(crate) fn request_success(&self, reason: FinishReason) -> &BoundCounter<u64> {
        self.request_success[reason.index()].get_or_init(|| {
            self.request_success_instrument.bind(&with_label(
                &self.labels,
                catalog::FINISHED_REASON_LABELS[2],
                reason.as_str(),
            ))
        })
    }
}

/// Scheduler-tier handles of one `(model_name, engine)` label set.
pub(crate) struct SchedulerHandles {
    labels: [KeyValue; 2],
    pub(crate) prefix_cache_queries: BoundCounter<u64>,
    pub(crate) prefix_cache_hits: BoundCounter<u64>,
}

type HandleCache<H> = RwLock<HashMap<String, HashMap<u32, Arc<H>>>>;

struct Inner {
    provider: SdkMeterProvider,
    families: Families,
    rejected: [BoundCounter<u64>; 3],
    evicted: [BoundCounter<u64>; 2],
    request_handles: HandleCache<RequestHandles>,
    scheduler_handles: HandleCache<SchedulerHandles>,
    max_model_len: u32,
}

/// The meter provider, every catalog instrument and the handle caches.
/// Cloning is cheap and shares all of it.
#[derive(Clone)]
pub struct Instruments {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instruments")
            .field("max_model_len", &self.inner.max_model_len)
            .finish_non_exhaustive()
    }
}

/// Returns the cached handle of a label set, creating it under the write lock
/// the first time the set is seen.
fn cached<H>(
    cache: &HandleCache<H>,
    model_name: &str,
    engine: u32,
    create: impl FnOnce() -> H,
) -> Arc<H> {
    if let Some(handles) = cache
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(model_name)
        .and_then(|by_engine| by_engine.get(&engine))
    {
        return Arc::clone(handles);
    }
    let mut cache = cache.write().unwrap_or_else(|e| e.into_inner());
    Arc::clone(
        cache
            .entry(model_name.to_owned())
            .or_default()
            .entry(engine)
            .or_insert_with(|| Arc::new(create())),
    )
}

impl Instruments {
    /// A builder with the catalog defaults and no reader.
    pub fn builder() -> InstrumentsBuilder {
        InstrumentsBuilder {
            provider: SdkMeterProvider::builder(),
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            max_label_sets: DEFAULT_MAX_LABEL_SETS,
            name_style: NameStyle::Otel,
        }
    }

    /// The `max_model_len` the token buckets were built for.
    pub fn max_model_len(&self) -> u32 {
        self.inner.max_model_len
    }

    /// The request handles of a label set (resolved once per set).
    pub(crate) fn request_handles(&self, model_name: &str, engine: u32) -> Arc<RequestHandles> {
        cached(&self.inner.request_handles, model_name, engine, || {
            RequestHandles::bind(&self.inner.families, model_name, engine)
        })
    }

    /// The scheduler handles of a label set (resolved once per set).
    pub(crate) fn scheduler_handles(&self, model_name: &str, engine: u32) -> Arc<SchedulerHandles> {
        let f = &self.inner.families;
        cached(&self.inner.scheduler_handles, model_name, engine, || {
            let labels = engine_labels(model_name, engine);
            SchedulerHandles {
                prefix_cache_queries: f.prefix_cache_queries.bind(&labels),
                prefix_cache_hits: f.prefix_cache_hits.bind(&labels),
                labels,
            }
        })
    }

    /// Sets the scheduler gauges of a label set.
    pub(crate) fn set_scheduler_gauges(
        &self,
        handles: &SchedulerHandles,
        running: i64,
        waiting: i64,
        kv_cache_usage: f64,
    ) {
        let f = &self.inner.families;
        f.num_requests_running.record(running, &handles.labels);
        f.num_requests_waiting.record(waiting, &handles.labels);
        f.kv_cache_usage.record(kv_cache_usage, &handles.labels);
    }

    /// Counts one input that changed no vLLM metric.
    pub(crate) fn count_rejected(&self, reason: RejectReason) {
        self.inner.rejected[reason as usize].add(1);
    }

    /// Counts one request the tracker terminated itself.
    pub(crate) fn count_evicted(&self, reason: EvictReason) {
        self.inner.evicted[reason as usize].add(1);
    }

    /// Exports everything recorded so far through every push reader.
    pub fn force_flush(&self) -> OTelSdkResult {
        self.inner.provider.force_flush()
    }

    /// Flushes and stops every reader.
    pub fn shutdown(&self) -> OTelSdkResult {
        self.inner.provider.shutdown()
    }
}
