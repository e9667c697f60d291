//! The builder that makes [`Instruments`] on a meter provider of their own
//! ([`InstrumentsBuilder`]), with the catalog's Views and the readers given
//! to it.

use std::sync::Arc;

use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use super::attribution::Attribution;
use super::buckets::{BucketOverrides, OtlpHistograms};
use super::config::{InstrumentsConfig, NameStyle};
use super::meters::Meters;
use super::registry::Instruments;
use super::semconv::{Semconv, SemconvServer};
use super::slo::Slo;
use super::views::with_views;
use crate::catalog::TokenBuckets;

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

impl Instruments {
    /// A builder with the catalog defaults, the SDK's default resource and
    /// no reader.
    pub fn builder() -> InstrumentsBuilder {
        InstrumentsBuilder::new()
    }
}

impl InstrumentsBuilder {
    /// A builder with the catalog defaults, the SDK's default resource and
    /// no reader ([`Instruments::builder`]).
    fn new() -> Self {
        InstrumentsBuilder {
            provider: SdkMeterProvider::builder(),
            config: InstrumentsConfig::default(),
            server: SemconvServer::default(),
            resource: None,
            explicit_readers: Vec::new(),
        }
    }

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

    /// Keeps, per bucket of each per-request histogram and per SLO outcome,
    /// the latest request's trace link ([`super::exemplars`]): `/metrics`
    /// writes them in OpenMetrics. Off by default.
    pub fn with_exemplars(mut self, enabled: bool) -> Self {
        self.config.exemplars = enabled;
        self
    }

    /// Records the per-request families with each request's class, its
    /// adapter and priority class, as attributes, as `attribution` says
    /// (`--attribute`; [`super::attribution`]); the Prometheus bridge sums
    /// them away from vLLM's families and writes the series by class as
    /// `vllm_class:` families. An attribution with neither label is off.
    pub fn with_attribution(mut self, attribution: Attribution) -> Self {
        self.config.attribution = attribution.is_on().then_some(attribution);
        self
    }

    /// Judges each finished request against `slo` and records the SLO
    /// families (`--slo`).
    pub fn with_slo(mut self, slo: Slo) -> Self {
        self.config.slo = Some(Arc::new(slo));
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
