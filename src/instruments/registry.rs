//! [`Instruments`]: every catalog instrument, the handle caches, and the
//! provider when the instruments own one.

use std::sync::Arc;

use opentelemetry::metrics::{BoundCounter, BoundHistogram, Meter};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};

use super::attribution::{Attribution, Classes, RequestClass};
use super::config::InstrumentsConfig;
use super::engine::{EngineHandles, EngineInstruments};
use super::exemplars::Exemplars;
use super::handle_cache::{HandleCache, UNCLASSED};
use super::label_set::LabelSet;
use super::meters::{u64_counter, Meters};
use super::request::{RequestHandles, RequestInstruments};
use super::semconv::{Semconv, SemconvInstruments, SemconvServer};
use super::slo::{Slo, SloInstruments};
use super::views::with_views;
use crate::catalog::{self, EvictReason, RejectReason};

struct Inner {
    /// The crate's own providers (the main one first, then the one of the
    /// explicit-bucket readers if any); none for a host's meter.
    providers: Vec<SdkMeterProvider>,
    request: RequestInstruments,
    /// With `--semconv gen_ai`.
    semconv: Option<SemconvInstruments>,
    /// With `--slo`.
    slo: Option<SloInstruments>,
    engine: EngineInstruments,
    /// In `RejectReason::ALL` order.
    rejected: [BoundCounter<u64>; RejectReason::ALL.len()],
    /// In `EvictReason::ALL` order.
    evicted: [BoundCounter<u64>; EvictReason::ALL.len()],
    /// Records the stat-logger plugin dropped.
    plugin_dropped: BoundCounter<u64>,
    request_handles: HandleCache<RequestHandles>,
    /// With `--attribute`.
    classes: Option<Classes>,
    /// `vllm:iteration_tokens_total` per `(model_name, engine)`, which the
    /// class label sets of one share, with `--attribute`.
    iteration_tokens: HandleCache<BoundHistogram<f64>>,
    /// With exemplars on.
    exemplars: Option<Exemplars>,
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

    pub(super) fn new(
        meter: &Meters,
        config: InstrumentsConfig,
        server: &SemconvServer,
        providers: Vec<SdkMeterProvider>,
    ) -> Self {
        let reason =
            |value: &'static str| [KeyValue::new(catalog::labels::REASON_LABELS[0], value)];
        let rejected = u64_counter(meter, &catalog::telemetry::REJECTED_INPUTS);
        let evicted = u64_counter(meter, &catalog::telemetry::EVICTED_REQUESTS);
        let plugin_dropped =
            u64_counter(meter, &catalog::telemetry::PLUGIN_DROPPED_RECORDS).bind(&[]);
        // A series without attributes exists only once measured: at 0 from
        // start-up, like the other self-telemetry series.
        plugin_dropped.add(0);
        Instruments {
            inner: Arc::new(Inner {
                providers,
                request: RequestInstruments::new(meter),
                semconv: (config.semconv == Semconv::GenAi)
                    .then(|| SemconvInstruments::new(meter, server)),
                slo: config
                    .slo
                    .as_ref()
                    .map(|slo| SloInstruments::new(meter, Slo::clone(slo))),
                engine: EngineInstruments::new(meter),
                rejected: RejectReason::ALL.map(|r| rejected.bind(&reason(r.as_str()))),
                evicted: EvictReason::ALL.map(|r| evicted.bind(&reason(r.as_str()))),
                plugin_dropped,
                request_handles: HandleCache::new(
                    config.max_label_sets,
                    config
                        .attribution
                        .as_ref()
                        .map_or(0, Attribution::max_classes),
                ),
                classes: config.attribution.clone().map(Classes::new),
                iteration_tokens: HandleCache::new(config.max_label_sets, 0),
                exemplars: config.exemplars.then(|| Exemplars::new(&config)),
                engine_handles: HandleCache::new(config.max_label_sets, 0),
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
    #[inline]
    pub fn label_set(&self, model_name: &str, engine: u32) -> LabelSet {
        let handles = &self.inner.request_handles;
        if let Some(handles) = handles.indexed(model_name, engine, UNCLASSED, 0) {
            return LabelSet { handles };
        }
        self.request_label_set(model_name, engine, None)
    }

    /// The per-request handles of a request of `class`: with attribution on
    /// ([`InstrumentsBuilder::with_attribution`](super::InstrumentsBuilder::with_attribution)),
    /// those of its class's label set (`lora_name`, `priority` after
    /// `engine`), else [`label_set`](Self::label_set)'s. The class labels
    /// are added here, once per label set, never per family or per request.
    ///
    /// ```
    /// use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
    /// use vllm_otel_metrics::instruments::{Attribution, Instruments, RequestClass};
    /// use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
    ///
    /// let (bridge, reader) = PrometheusBridge::builder().build();
    /// let attribution = Attribution::default().with_priority("0,10".parse().unwrap());
    /// let instruments = Instruments::builder().with_attribution(attribution).with_reader(reader).build();
    /// let class = RequestClass { lora_name: None, priority: Some(20) };
    /// let params = RequestParams { arrival_time: 100.0, prompt_len: 16, max_tokens: None, n: 1 };
    /// RequestMetrics::start_in(&instruments.label_set_for("llama", 0, &class), params).abort(101.0);
    /// let text = bridge.encode(Format::Text);
    /// // vLLM's family as without attribution, the class in its twin.
    /// assert!(text.contains("vllm:request_num_preemptions_count{model_name=\"llama\",engine=\"0\"} 1\n"));
    /// assert!(text.contains(
    ///     "vllm_class:request_num_preemptions_count{model_name=\"llama\",engine=\"0\",priority=\">9\"} 1\n"
    /// ));
    /// # instruments.shutdown().unwrap();
    /// ```
    #[inline]
    pub fn label_set_for(
        &self,
        model_name: &str,
        engine: u32,
        class: &RequestClass<'_>,
    ) -> LabelSet {
        match &self.inner.classes {
            None => self.label_set(model_name, engine),
            Some(classes) => {
                // A class some request has bound already: no count, no lock.
                if let Some((adapter, priority)) = classes.key(class) {
                    let handles = &self.inner.request_handles;
                    if let Some(handles) = handles.indexed(model_name, engine, adapter, priority) {
                        return LabelSet { handles };
                    }
                }
                let resolved = classes.resolve(class);
                self.request_label_set(model_name, engine, Some(&resolved))
            }
        }
    }

    fn request_label_set(
        &self,
        model_name: &str,
        engine: u32,
        class: Option<&super::attribution::ResolvedClass<'_>>,
    ) -> LabelSet {
        let request = &self.inner.request;
        let semconv = self.inner.semconv.as_ref();
        let slo = self.inner.slo.as_ref();
        let invalid = &self.inner.rejected[RejectReason::InvalidRecord as usize];
        let exemplars = self.inner.exemplars.as_ref();
        LabelSet {
            handles: self.inner.request_handles.get(
                model_name,
                engine,
                class,
                |label_set, labels| {
                    // A class's steps are its engine's: observed unclassed.
                    let iteration_tokens = match (class, label_set) {
                        (Some(_), Some(_)) => Some(self.inner.iteration_tokens.get(
                            model_name,
                            engine,
                            None,
                            |_, labels| request.bind_iteration_tokens(&labels),
                        )),
                        _ => None,
                    };
                    let mut handles = RequestHandles::bind(
                        request,
                        semconv,
                        slo,
                        labels,
                        iteration_tokens,
                        invalid.clone(),
                    );
                    handles.exemplars = exemplars.map(|e| e.label_set(label_set));
                    handles
                },
            ),
        }
    }

    /// The exemplars of every label set, with exemplars on
    /// ([`InstrumentsBuilder::with_exemplars`](super::InstrumentsBuilder::with_exemplars)):
    /// for [`PrometheusBridge::with_exemplars`](crate::export::prometheus::PrometheusBridge::with_exemplars).
    pub fn exemplars(&self) -> Option<&Exemplars> {
        self.inner.exemplars.as_ref()
    }

    /// The scheduler- and engine-tier handles of a label set, bound (and
    /// the engine's start-up series recorded) the first time the set is seen.
    pub(crate) fn engine_handles(&self, model_name: &str, engine: u32) -> Arc<EngineHandles> {
        let instruments = &self.inner.engine;
        self.inner
            .engine_handles
            .get(model_name, engine, None, |_, labels| {
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
