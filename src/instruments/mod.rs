//! OpenTelemetry instruments built from the catalog, and per-label-set handles.
//!
//! [`Instruments`] creates one `opentelemetry` API instrument per catalog
//! family from a [`Meter`](opentelemetry::metrics::Meter), either its own `SdkMeterProvider` (with the
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
//! // Every family but the SLO ones (only with `with_slo`), series or not.
//! let catalog = vllm_otel_metrics::catalog::all().count();
//! assert_eq!(bridge.snapshot().len(), catalog - vllm_otel_metrics::catalog::slo::ALL.len());
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

mod attributes;
pub mod attribution;
mod buckets;
mod builder;
mod config;
mod engine;
pub mod exemplars;
mod handle_cache;
mod kv_connector;
mod label_set;
mod meters;
mod registry;
mod request;
mod semconv;
mod slo;
pub mod spans;
mod tee;
mod views;

pub use attributes::OVERFLOW_ATTRIBUTE;
pub use attribution::{Attribution, AttributionError, PriorityClasses, RequestClass};
pub use buckets::{BucketOverrideError, BucketOverrides, ExponentialHistograms, OtlpHistograms};
pub use builder::InstrumentsBuilder;
pub use config::{InstrumentsConfig, NameStyle, DEFAULT_MAX_LABEL_SETS};
pub use label_set::LabelSet;
pub use meters::SCOPE_NAME;
pub use registry::Instruments;
pub(crate) use request::{Preemptions, RequestHandles, NO_PREEMPTIONS};
pub(crate) use semconv::SemconvEnd;
pub use semconv::{Semconv, SemconvServer};
pub(crate) use slo::SloEnd;
pub use slo::{Slo, SloBounds, SloError, SloOutcome};
#[doc(hidden)]
pub use views::views;
