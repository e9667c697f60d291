//! OpenTelemetry instruments built from the catalog, and per-label-set handles.
//!
//! [`Instruments`] creates one `opentelemetry` API instrument per catalog
//! family from a [`Meter`], either its own `SdkMeterProvider` (with the
//! catalog's Views and the readers given to the [builder](InstrumentsBuilder))
//! or one a host program owns ([`Instruments::install`]). It caches the
//! SDK's bound handles of each `(model_name, engine)` label set: they are
//! resolved once, when the first request (or scheduler record) of a label set
//! arrives, and shared by every later request of that set, as vLLM's Rust
//! frontend does; recording through them allocates nothing and looks up no
//! attributes.
//!
//! ```
//! use vllm_otel_metrics::export::prometheus::PrometheusBridge;
//! use vllm_otel_metrics::instruments::Instruments;
//!
//! let (bridge, reader) = PrometheusBridge::builder().build();
//! let instruments = Instruments::builder()
//!     .with_max_model_len(4096)
//!     .with_reader(reader)
//!     .build();
//! assert_eq!(bridge.snapshot().len(), vllm_otel_metrics::catalog::all().count());
//! # instruments.shutdown().unwrap();
//! ```
//!
//! A host program with its own provider hands its builder (its readers,
//! Views and resource already on it) to [`Instruments::install`], which
//! registers the catalog's Views for the same config it builds the
//! instruments from; here the SDK's in-memory exporter reads the headline
//! histogram after one request:
//!
//! ```
//! use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
//! use opentelemetry_sdk::metrics::{InMemoryMetricExporterBuilder, PeriodicReader, SdkMeterProvider};
//! use vllm_otel_metrics::instruments::{Instruments, InstrumentsConfig};
//! use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
//!
//! let exporter = InMemoryMetricExporterBuilder::new().build();
//! let builder = SdkMeterProvider::builder()
//!     .with_reader(PeriodicReader::builder(exporter.clone()).build());
//! let (provider, instruments) = Instruments::install(builder, InstrumentsConfig::default());
//!
//! let params = RequestParams { arrival_time: 100.0, prompt_len: 16, max_tokens: None, n: 1 };
//! let mut request = RequestMetrics::start(&instruments, "llama", 0, params);
//! request.abort(101.0);
//! provider.force_flush().unwrap();
//!
//! let exported = exporter.get_finished_metrics().unwrap();
//! let metric = exported[0].scope_metrics().flat_map(|s| s.metrics())
//!     .find(|m| m.name() == "vllm.request_num_preemptions")
//!     .unwrap();
//! let AggregatedMetrics::F64(MetricData::Histogram(histogram)) = metric.data() else { panic!() };
//! let point = histogram.data_points().next().unwrap();
//! assert_eq!(point.bounds().collect::<Vec<_>>(), [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]);
//! assert_eq!((point.count(), point.sum()), (1, 0.0)); // one request, never preempted
//! # provider.shutdown().unwrap();
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use opentelemetry::metrics::{BoundCounter, Counter, Gauge, Histogram, Meter, MeterProvider};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};
use opentelemetry_sdk::Resource;

mod buckets;
mod engine;
mod kv_connector;
mod request;
mod semconv;
pub mod spans;
mod tee;
mod views;

use crate::catalog::{self, MetricDef, TokenBuckets, DEFAULT_MAX_MODEL_LEN};
use crate::catalog::{EvictReason, RejectReason};
pub use buckets::{BucketOverrideError, BucketOverrides, ExponentialHistograms, OtlpHistograms};
pub(crate) use engine::EngineHandles;
use engine::EngineInstruments;
use request::RequestInstruments;
pub(crate) use request::{Preemptions, RequestHandles, RequestHistogram, NO_PREEMPTIONS};
pub(crate) use semconv::SemconvEnd;
use semconv::SemconvInstruments;
pub use semconv::{Semconv, SemconvServer};
#[doc(hidden)]
pub use views::views;

/// The instrumentation scope name of every instrument the crate's own
/// provider creates.
pub const SCOPE_NAME: &str = env!("CARGO_PKG_NAME");

/// Default number of `(model_name, engine)` label sets kept apart before
/// further ones share the overflow series.
pub const DEFAULT_MAX_LABEL_SETS: usize = 2048;

/// The attribute the SDK marks its overflow series with.
pub const OVERFLOW_ATTRIBUTE: &str = "otel.metric.overflow";

/// Which names the streams carry on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameStyle {
    /// OpenTelemetry names (`vllm.request_num_preemptions`).
    #[default]
    Otel,
    /// vLLM's Prometheus names (`vllm:request_num_preemptions`), set by the
    /// Views (the SDK does not allow `:` in instrument names).
    Prometheus,
}

/// What the Views and the instruments are built for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstrumentsConfig {
    /// The model context length that bounds the token histograms' buckets.
    pub max_model_len: u32,
    /// How many `(model_name, engine)` label sets are kept apart; later ones
    /// share one overflow series per family (`otel.metric.overflow=true`,
    /// plus `finished_reason` or `source` where the family has it).
    pub max_label_sets: usize,
    /// Names on the wire.
    pub name_style: NameStyle,
    /// How the token histograms' buckets end: with `max_model_len`
    /// appended (vLLM's Rust frontend) or not (its Python logger).
    pub token_buckets: TokenBuckets,
    /// Which semantic-convention streams are recorded besides vLLM's
    /// families (`--semconv`).
    pub semconv: Semconv,
    /// Bucket boundaries that replace the catalog's
    /// (`--custom-histogram-buckets`).
    pub bucket_overrides: Arc<BucketOverrides>,
    /// How the latency histograms aggregate (`--otlp-histograms`): with
    /// [`OtlpHistograms::Exponential`], exponentially for every reader of
    /// the provider except the explicit-bucket reader
    /// ([`InstrumentsBuilder::with_explicit_histogram_reader`]).
    pub otlp_histograms: OtlpHistograms,
}

impl Default for InstrumentsConfig {
    fn default() -> Self {
        InstrumentsConfig {
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            max_label_sets: DEFAULT_MAX_LABEL_SETS,
            name_style: NameStyle::Otel,
            token_buckets: TokenBuckets::Rust,
            semconv: Semconv::None,
            bucket_overrides: Arc::default(),
            otlp_histograms: OtlpHistograms::Explicit,
        }
    }
}

/// Configures and builds [`Instruments`] on their own `SdkMeterProvider`.
pub struct InstrumentsBuilder {
    provider: MeterProviderBuilder,
    config: InstrumentsConfig,
    server: SemconvServer,
    resource: Option<Resource>,
    /// Readers that keep explicit latency buckets when the others get
    /// exponential ones, each added to the builder it is given.
    explicit_readers: Vec<AddReader>,
}

/// Adds one reader to a provider builder.
type AddReader = Box<dyn FnOnce(MeterProviderBuilder) -> MeterProviderBuilder + Send>;

impl std::fmt::Debug for InstrumentsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstrumentsBuilder")
            .field("provider", &self.provider)
            .field("config", &self.config)
            .field("explicit_readers", &self.explicit_readers.len())
            .finish_non_exhaustive()
    }
}

impl InstrumentsBuilder {
    /// The model context length that bounds the token histograms' buckets.
    pub fn with_max_model_len(mut self, max_model_len: u32) -> Self {
        self.config.max_model_len = max_model_len;
        self
    }

    /// How the token histograms' buckets are built (`--token-buckets`):
    /// vLLM's Rust frontend's, the default, or its Python logger's.
    pub fn with_token_buckets(mut self, token_buckets: TokenBuckets) -> Self {
        self.config.token_buckets = token_buckets;
        self
    }

    /// How many `(model_name, engine)` label sets are kept apart (at least 1).
    pub fn with_max_label_sets(mut self, max_label_sets: usize) -> Self {
        self.config.max_label_sets = max_label_sets.max(1);
        self
    }

    /// Which names the streams carry (the Prometheus bridge maps either back).
    pub fn with_name_style(mut self, name_style: NameStyle) -> Self {
        self.config.name_style = name_style;
        self
    }

    /// Also records the semantic-convention streams of `semconv`
    /// (docs/SEMANTICS.md §3c).
    pub fn with_semconv(mut self, semconv: Semconv) -> Self {
        self.config.semconv = semconv;
        self
    }

    /// The `server.address` and `server.port` of the semantic-convention
    /// streams (none by default).
    pub fn with_semconv_server(mut self, server: SemconvServer) -> Self {
        self.server = server;
        self
    }

    /// Bucket boundaries that replace the catalog's, per bucket family
    /// (`--custom-histogram-buckets`), for every reader.
    pub fn with_bucket_overrides(mut self, overrides: BucketOverrides) -> Self {
        self.config.bucket_overrides = Arc::new(overrides);
        self
    }

    /// How the latency histograms aggregate for the readers added with
    /// [`with_reader`](Self::with_reader) (`--otlp-histograms`).
    pub fn with_otlp_histograms(mut self, histograms: OtlpHistograms) -> Self {
        self.config.otlp_histograms = histograms;
        self
    }

    /// Adds a reader (the Prometheus bridge's, an OTLP `PeriodicReader`, …).
    /// Each reader aggregates every measurement once more.
    pub fn with_reader<R: MetricReader>(mut self, reader: R) -> Self {
        self.provider = self.provider.with_reader(reader);
        self
    }

    /// Adds a reader that reads the latency histograms with explicit
    /// buckets even when [`with_otlp_histograms`](Self::with_otlp_histograms)
    /// makes them exponential for the other readers: the Prometheus bridge's
    /// [`PrometheusBridge::latency_reader`](crate::export::prometheus::PrometheusBridge::latency_reader),
    /// so that `/metrics` keeps vLLM's buckets. It gets a provider of its
    /// own, with only the latency histograms, which are then recorded into
    /// both providers. With explicit OTLP histograms it is an ordinary
    /// reader.
    ///
    /// ```
    /// use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
    /// use vllm_otel_metrics::instruments::{ExponentialHistograms, Instruments, OtlpHistograms};
    /// use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
    ///
    /// let (bridge, reader) = PrometheusBridge::builder().build();
    /// let instruments = Instruments::builder()
    ///     .with_otlp_histograms(OtlpHistograms::Exponential(ExponentialHistograms::DEFAULT))
    ///     .with_reader(reader) // stands in for OTLP here: its latency histograms are exponential
    ///     .with_explicit_histogram_reader(bridge.latency_reader())
    ///     .build();
    /// let params = RequestParams { arrival_time: 100.0, prompt_len: 16, max_tokens: None, n: 1 };
    /// RequestMetrics::start(&instruments, "llama", 0, params).abort(101.2);
    /// let text = bridge.encode(Format::Text);
    /// assert!(text.contains("vllm:e2e_request_latency_seconds_bucket{model_name=\"llama\",engine=\"0\",le=\"1.0\"} 0\n"));
    /// assert!(text.contains("vllm:e2e_request_latency_seconds_bucket{model_name=\"llama\",engine=\"0\",le=\"1.5\"} 1\n"));
    /// # instruments.shutdown().unwrap();
    /// ```
    pub fn with_explicit_histogram_reader<R: MetricReader>(mut self, reader: R) -> Self {
        self.explicit_readers
            .push(Box::new(move |builder| builder.with_reader(reader)));
        self
    }

    /// Sets the OpenTelemetry resource.
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.resource = Some(resource);
        self
    }

    /// Builds the provider with the catalog's Views, and every instrument.
    pub fn build(self) -> Instruments {
        let with_resource = |builder: MeterProviderBuilder| match &self.resource {
            Some(resource) => builder.with_resource(resource.clone()),
            None => builder,
        };
        let mut main = with_resource(self.provider);
        let mut explicit = None;
        if self.explicit_readers.is_empty()
            || self.config.otlp_histograms == OtlpHistograms::Explicit
        {
            main = self
                .explicit_readers
                .into_iter()
                .fold(main, |b, add| add(b));
        } else {
            let builder = with_resource(SdkMeterProvider::builder());
            let builder = self
                .explicit_readers
                .into_iter()
                .fold(builder, |b, add| add(b));
            let config = InstrumentsConfig {
                otlp_histograms: OtlpHistograms::Explicit,
                ..self.config.clone()
            };
            explicit = Some(with_views(builder, config));
        }
        let (provider, meter) = with_views(main, self.config.clone());
        let (explicit_provider, explicit_latency) = explicit.unzip();
        let meters = Meters {
            main: meter,
            explicit_latency,
        };
        let providers = [Some(provider), explicit_provider].into_iter().flatten();
        Instruments::new(&meters, self.config, &self.server, providers.collect())
    }
}

/// The meters instruments are created on: the main one, and with
/// exponential OTLP histograms and an explicit-bucket reader, the one
/// whose provider keeps the latency histograms' explicit buckets
/// ([`tee`]).
pub(crate) struct Meters {
    main: Meter,
    explicit_latency: Option<Meter>,
}

impl Meters {
    fn one(meter: &Meter) -> Meters {
        Meters {
            main: meter.clone(),
            explicit_latency: None,
        }
    }
}

/// The provider `builder` makes with the catalog's Views for `config`, and
/// the crate's meter on it: where the Views and the instruments' config meet.
fn with_views(
    builder: MeterProviderBuilder,
    config: InstrumentsConfig,
) -> (SdkMeterProvider, Meter) {
    let provider = builder.with_view(views(config)).build();
    let meter = provider.meter_with_scope(scope());
    (provider, meter)
}

/// The crate's instrumentation scope: its name and version.
fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(SCOPE_NAME)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

pub(crate) fn u64_counter(meters: &Meters, def: &'static MetricDef) -> Counter<u64> {
    meters
        .main
        .u64_counter(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

pub(crate) fn f64_histogram(meters: &Meters, def: &'static MetricDef) -> Histogram<f64> {
    let on = |meter: &Meter| {
        meter
            .f64_histogram(def.otel_name)
            .with_unit(def.unit)
            .with_description(def.help)
            .build()
    };
    match &meters.explicit_latency {
        Some(explicit) if catalog::is_latency_histogram(def) => {
            tee::TeeHistogram::histogram(on(&meters.main), on(explicit))
        }
        _ => on(&meters.main),
    }
}

pub(crate) fn u64_gauge(meters: &Meters, def: &'static MetricDef) -> Gauge<u64> {
    meters
        .main
        .u64_gauge(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

pub(crate) fn f64_gauge(meters: &Meters, def: &'static MetricDef) -> Gauge<f64> {
    meters
        .main
        .f64_gauge(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

pub(crate) fn f64_counter(meters: &Meters, def: &'static MetricDef) -> Counter<f64> {
    meters
        .main
        .f64_counter(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

/// An attribute value whose clones share one string.
pub(crate) fn shared_string(value: &str) -> opentelemetry::Value {
    opentelemetry::Value::String(opentelemetry::StringValue::from(Arc::<str>::from(value)))
}

/// `base` plus one more label.
pub(crate) fn with_label(
    base: &[KeyValue],
    name: &'static str,
    value: &'static str,
) -> Vec<KeyValue> {
    let mut labels = base.to_vec();
    labels.push(KeyValue::new(name, value));
    labels
}

/// The attributes every series of a label set starts with: `model_name` and
/// `engine`, or the overflow attribute. Bound to the overflow attribute, a
/// family whose limit is reached writes the SDK's own overflow series; one
/// with a further label (`finished_reason`, `source`) has room for it and
/// keeps that label.
///
/// The values are reference-counted: the SDK clones every series'
/// attributes at every collect, and an owned string would be copied there
/// (two allocations per series and scrape), a shared one is not.
fn base_labels(label_set: Option<(&str, u32)>) -> Vec<KeyValue> {
    match label_set {
        Some((model_name, engine)) => vec![
            KeyValue::new(catalog::ENGINE_LABELS[0], shared_string(model_name)),
            KeyValue::new(
                catalog::ENGINE_LABELS[1],
                shared_string(&engine.to_string()),
            ),
        ],
        None => vec![KeyValue::new(OVERFLOW_ATTRIBUTE, true)],
    }
}

/// The per-request handles of one `(model_name, engine)` label set, resolved
/// once. A frontend that keeps one per label set, as vLLM's Rust frontend
/// keeps its `RequestMetricHandles`, starts each request from it
/// (the tracker's `RequestMetrics::start_in`)
/// without any lookup. Cloning is cheap.
///
/// ```
/// use vllm_otel_metrics::instruments::Instruments;
/// use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
///
/// let instruments = Instruments::builder().build();
/// let llama = instruments.label_set("llama", 0);
/// let params = RequestParams { arrival_time: 100.0, prompt_len: 16, max_tokens: None, n: 1 };
/// let mut request = RequestMetrics::start_in(&llama, params);
/// request.finish(101.0, vllm_otel_metrics::protocol::FinishReason::Stop);
/// ```
#[derive(Clone)]
pub struct LabelSet {
    pub(crate) handles: Arc<RequestHandles>,
}

impl std::fmt::Debug for LabelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelSet").finish_non_exhaustive()
    }
}

/// Handles per label set, up to a limit (the Views' cardinality limit);
/// later label sets share the overflow handles.
struct HandleCache<H> {
    by_label_set: RwLock<HashMap<String, HashMap<u32, Arc<H>>>>,
    /// Label sets in `by_label_set`; once at `limit`, it never grows again.
    label_sets: AtomicUsize,
    overflow: OnceLock<Arc<H>>,
    limit: usize,
}

impl<H> HandleCache<H> {
    fn new(limit: usize) -> Self {
        HandleCache {
            by_label_set: RwLock::default(),
            label_sets: AtomicUsize::new(0),
            overflow: OnceLock::new(),
            limit,
        }
    }

    /// The handles of a label set, bound under the write lock the first time
    /// the set is seen.
    fn get(&self, model_name: &str, engine: u32, bind: impl Fn(Vec<KeyValue>) -> H) -> Arc<H> {
        let overflow = || {
            Arc::clone(
                self.overflow
                    .get_or_init(|| Arc::new(bind(base_labels(None)))),
            )
        };
        if let Some(handles) = self
            .by_label_set
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model_name)
            .and_then(|by_engine| by_engine.get(&engine))
        {
            return Arc::clone(handles);
        }
        // A full cache stays full: new label sets skip the write lock.
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
        }
        let mut cache = self
            .by_label_set
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(handles) = cache.get(model_name).and_then(|e| e.get(&engine)) {
            return Arc::clone(handles);
        }
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
        }
        let handles = Arc::new(bind(base_labels(Some((model_name, engine)))));
        cache
            .entry(model_name.to_owned())
            .or_default()
            .insert(engine, Arc::clone(&handles));
        self.label_sets.fetch_add(1, Ordering::Release);
        handles
    }
}

struct Inner {
    /// The crate's own providers (the main one first, then the one of the
    /// explicit-bucket readers if any); none for a host's meter.
    providers: Vec<SdkMeterProvider>,
    request: RequestInstruments,
    /// With `--semconv gen_ai`.
    semconv: Option<SemconvInstruments>,
    engine: EngineInstruments,
    /// In `RejectReason::ALL` order.
    rejected: [BoundCounter<u64>; RejectReason::ALL.len()],
    /// In `EvictReason::ALL` order.
    evicted: [BoundCounter<u64>; EvictReason::ALL.len()],
    /// Records the stat-logger plugin dropped.
    plugin_dropped: BoundCounter<u64>,
    request_handles: HandleCache<RequestHandles>,
    engine_handles: HandleCache<EngineHandles>,
    config: InstrumentsConfig,
}

/// Every catalog instrument, the handle caches, and the provider when the
/// instruments own one. Cloning is cheap and shares all of it.
#[derive(Clone)]
pub struct Instruments {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instruments")
            .field("config", &self.inner.config)
            .field("own_providers", &self.inner.providers.len())
            .finish_non_exhaustive()
    }
}

impl Instruments {
    /// A builder with the catalog defaults, the SDK's default resource and
    /// no reader.
    pub fn builder() -> InstrumentsBuilder {
        InstrumentsBuilder {
            provider: SdkMeterProvider::builder(),
            config: InstrumentsConfig::default(),
            server: SemconvServer::default(),
            resource: None,
            explicit_readers: Vec::new(),
        }
    }

    /// A host program's setup in one call: registers the catalog's Views
    /// for `config` (buckets, cardinality limits, names) on the host's
    /// `builder`, builds the provider, and builds the instruments on it from
    /// the same `config`, so the two cannot disagree. The host keeps the
    /// provider, with its own readers, Views and instruments:
    /// [`Instruments::force_flush`] and [`Instruments::shutdown`] do nothing
    /// here; flush and shut down the returned provider instead.
    ///
    /// ```
    /// use opentelemetry::metrics::MeterProvider as _;
    /// use opentelemetry_sdk::metrics::SdkMeterProvider;
    /// use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
    /// use vllm_otel_metrics::instruments::{Instruments, InstrumentsConfig};
    /// use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
    ///
    /// let (bridge, reader) = PrometheusBridge::builder().build();
    /// let mut config = InstrumentsConfig::default();
    /// config.max_model_len = 32_768;
    /// let (provider, instruments) =
    ///     Instruments::install(SdkMeterProvider::builder().with_reader(reader), config);
    /// // The host's own instruments, on the same provider.
    /// provider.meter("my-frontend").u64_counter("batches").build().add(1, &[]);
    ///
    /// let params = RequestParams { arrival_time: 100.0, prompt_len: 64, max_tokens: None, n: 1 };
    /// RequestMetrics::start(&instruments, "my-model", 0, params).abort(100.5);
    /// assert!(bridge.encode(Format::Text).contains(
    ///     "vllm:request_num_preemptions_count{model_name=\"my-model\",engine=\"0\"} 1\n"
    /// ));
    /// # provider.shutdown().unwrap();
    /// ```
    pub fn install(
        builder: MeterProviderBuilder,
        config: InstrumentsConfig,
    ) -> (SdkMeterProvider, Instruments) {
        let (provider, meter) = with_views(builder, config.clone());
        let meters = Meters::one(&meter);
        let instruments = Instruments::new(&meters, config, &SemconvServer::default(), Vec::new());
        (provider, instruments)
    }

    /// The instruments on a meter whose provider has the Views of the same
    /// `config` registered. Hidden: it lets the two disagree, which
    /// [`Instruments::install`] rules out; the benchmarks use it to bind
    /// their SDK floor on the very meter the instruments use.
    #[doc(hidden)]
    pub fn from_meter(meter: &Meter, config: InstrumentsConfig) -> Instruments {
        Instruments::new(
            &Meters::one(meter),
            config,
            &SemconvServer::default(),
            Vec::new(),
        )
    }

    fn new(
        meter: &Meters,
        config: InstrumentsConfig,
        server: &SemconvServer,
        providers: Vec<SdkMeterProvider>,
    ) -> Self {
        let reason = |value: &'static str| [KeyValue::new(catalog::REASON_LABELS[0], value)];
        let rejected = u64_counter(meter, &catalog::REJECTED_INPUTS);
        let evicted = u64_counter(meter, &catalog::EVICTED_REQUESTS);
        let plugin_dropped = u64_counter(meter, &catalog::PLUGIN_DROPPED_RECORDS).bind(&[]);
        // A series without attributes exists only once measured: at 0 from
        // start-up, like the other self-telemetry series.
        plugin_dropped.add(0);
        Instruments {
            inner: Arc::new(Inner {
                providers,
                request: RequestInstruments::new(meter),
                semconv: (config.semconv == Semconv::GenAi)
                    .then(|| SemconvInstruments::new(meter, server)),
                engine: EngineInstruments::new(meter),
                rejected: RejectReason::ALL.map(|r| rejected.bind(&reason(r.as_str()))),
                evicted: EvictReason::ALL.map(|r| evicted.bind(&reason(r.as_str()))),
                plugin_dropped,
                request_handles: HandleCache::new(config.max_label_sets),
                engine_handles: HandleCache::new(config.max_label_sets),
                config,
            }),
        }
    }

    /// The meter provider the builder made; `None` on a host's provider
    /// ([`Instruments::install`]).
    pub fn meter_provider(&self) -> Option<&SdkMeterProvider> {
        self.inner.providers.first()
    }

    /// What the instruments were built for.
    pub fn config(&self) -> &InstrumentsConfig {
        &self.inner.config
    }

    /// The `max_model_len` the token buckets were built for.
    pub fn max_model_len(&self) -> u32 {
        self.inner.config.max_model_len
    }

    /// The per-request handles of a label set, bound the first time the set
    /// is seen (beyond the label-set limit, the overflow handles).
    pub fn label_set(&self, model_name: &str, engine: u32) -> LabelSet {
        let request = &self.inner.request;
        let semconv = self.inner.semconv.as_ref();
        let invalid = &self.inner.rejected[RejectReason::InvalidRecord as usize];
        LabelSet {
            handles: self
                .inner
                .request_handles
                .get(model_name, engine, |labels| {
                    RequestHandles::bind(request, semconv, labels, invalid.clone())
                }),
        }
    }

    /// The scheduler- and engine-tier handles of a label set, bound (and
    /// the engine's start-up series recorded) the first time the set is seen.
    pub(crate) fn engine_handles(&self, model_name: &str, engine: u32) -> Arc<EngineHandles> {
        let instruments = &self.inner.engine;
        self.inner.engine_handles.get(model_name, engine, |labels| {
            EngineHandles::bind(instruments, labels)
        })
    }

    /// The engine-tier instruments with label sets of their own
    /// (`vllm:cache_config_info`, `vllm:lora_requests_info`) and the
    /// operation timings.
    pub(crate) fn engine(&self) -> &EngineInstruments {
        &self.inner.engine
    }

    /// Counts one input that changed no vLLM metric.
    pub(crate) fn count_rejected(&self, reason: RejectReason) {
        self.inner.rejected[reason as usize].add(1);
    }

    /// Counts one request the tracker terminated itself.
    pub(crate) fn count_evicted(&self, reason: EvictReason) {
        self.inner.evicted[reason as usize].add(1);
    }

    /// Counts records the vLLM stat-logger plugin reported dropping.
    pub(crate) fn count_plugin_dropped(&self, dropped: u64) {
        self.inner.plugin_dropped.add(dropped);
    }

    /// Exports everything recorded so far through every push reader of the
    /// instruments' own provider.
    pub fn force_flush(&self) -> OTelSdkResult {
        self.inner
            .providers
            .iter()
            .try_for_each(SdkMeterProvider::force_flush)
    }

    /// Shuts the own provider down: every push reader exports a last time
    /// and stops. Later calls do nothing.
    pub fn shutdown(&self) -> OTelSdkResult {
        // Every provider is shut down, even after one fails; the first
        // failure is the outcome.
        let mut outcome = Ok(());
        for provider in &self.inner.providers {
            match provider.shutdown() {
                Ok(()) | Err(OTelSdkError::AlreadyShutdown) => {}
                Err(e) => outcome = outcome.and(Err(e)),
            }
        }
        outcome
    }
}
