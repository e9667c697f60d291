//! Baseline: the same per-request tracker recorded with the `prometheus-client`
//! crate, the way a Rust frontend built on it does (vLLM's Rust frontend):
//! one `Family` per metric in a `Registry`, label sets as structs deriving
//! `EncodeLabelSet`, and the metric handles of each `(model_name, engine)`
//! label set resolved once with `Family::get_or_create_owned` and shared by
//! all requests of that set, as vLLM's Rust frontend keeps them. Every
//! finish reason's `request_success` handle is resolved with the label set
//! and a preemption reason's on its first preemption, as the crate does.
//!
//! Nothing is looked up or allocated per request: this is the fastest way to
//! use the crate, which makes the comparison with `otel_bound` conservative.

use std::sync::OnceLock;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::Registry;
use vllm_otel_metrics::catalog::MetricDef;
use vllm_otel_metrics::protocol::{FinishReason, PreemptionReason, PrefillStats};

use crate::lifecycle_state::{family, prompt_token_sources, Sink, Terminal};

/// Labels `model_name`, `engine`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EngineLabels {
    pub(crate) model_name: String,
    pub(crate) engine: u32,
}

/// Labels `model_name`, `engine`, `finished_reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FinishedLabels {
    pub(crate) model_name: String,
    pub(crate) engine: u32,
    pub(crate) finished_reason: &'static str,
}

/// Labels `model_name`, `engine`, `reason`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) model_name: String,
    pub(crate) engine: u32,
    pub(crate) reason: &'static str,
}

/// Labels `model_name`, `engine`, `source`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SourceLabels {
    pub(crate) model_name: String,
    pub(crate) engine: u32,
    pub(crate) source: &'static str,
}

/// A histogram the tracker records into: `prometheus-client`'s own (the
/// default) or vLLM's lock-free one (`baseline/atomic_histogram.rs`).
pub(crate) trait TrackerHistogram:
    EncodeMetric + TypedMetric + Clone + std::fmt::Debug + Send + Sync + 'static
{
    /// An empty histogram with these upper bounds.
    fn with_bounds(bounds: &[f64]) -> Self;
    /// Records one value.
    fn observe(&self, value: f64);
}

impl TrackerHistogram for Histogram {
    fn with_bounds(bounds: &[f64]) -> Self {
        Histogram::new(bounds.iter().copied())
    }

    #[inline]
    fn observe(&self, value: f64) {
        Histogram::observe(self, value);
    }
}

/// Builds a family's histograms with the catalog's boundaries.
#[derive(Clone, Debug)]
pub(crate) struct Buckets(Vec<f64>);

impl<H: TrackerHistogram> MetricConstructor<H> for Buckets {
    fn new_metric(&self) -> H {
        H::with_bounds(&self.0)
    }
}

type CounterFamily<L> = Family<L, Counter>;
type HistogramFamily<H> = Family<EngineLabels, H, Buckets>;

/// The registry and its 22 per-request families.
pub(crate) struct Metrics<H: TrackerHistogram = Histogram> {
    pub(crate) registry: Registry,
    num_preemptions: CounterFamily<EngineLabels>,
    num_preemptions_by_reason: CounterFamily<ReasonLabels>,
    prompt_tokens: CounterFamily<EngineLabels>,
    prompt_tokens_by_source: CounterFamily<SourceLabels>,
    prompt_tokens_cached: CounterFamily<EngineLabels>,
    generation_tokens: CounterFamily<EngineLabels>,
    request_success: CounterFamily<FinishedLabels>,
    iteration_tokens: HistogramFamily<H>,
    request_prompt_tokens: HistogramFamily<H>,
    request_generation_tokens: HistogramFamily<H>,
    request_max_num_generation_tokens: HistogramFamily<H>,
    request_params_max_tokens: HistogramFamily<H>,
    request_params_n: HistogramFamily<H>,
    request_num_preemptions: HistogramFamily<H>,
    request_prefill_kv_computed_tokens: HistogramFamily<H>,
    time_to_first_token: HistogramFamily<H>,
    inter_token_latency: HistogramFamily<H>,
    e2e_request_latency: HistogramFamily<H>,
    request_queue_time: HistogramFamily<H>,
    request_prefill_time: HistogramFamily<H>,
    request_decode_time: HistogramFamily<H>,
    request_inference_time: HistogramFamily<H>,
    request_time_per_output_token: HistogramFamily<H>,
}

fn counter<L>(registry: &mut Registry, def: &MetricDef) -> CounterFamily<L>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let family = CounterFamily::<L>::default();
    registry.register(def.vllm_name, def.help, family.clone());
    family
}

fn histogram<H: TrackerHistogram>(
    registry: &mut Registry,
    def: &MetricDef,
    max_model_len: u32,
) -> HistogramFamily<H> {
    let family =
        HistogramFamily::<H>::new_with_constructor(Buckets(def.buckets.boundaries(max_model_len)));
    registry.register(def.vllm_name, def.help, family.clone());
    family
}

impl<H: TrackerHistogram> Metrics<H> {
    pub(crate) fn new(max_model_len: u32) -> Self {
        let mut r = Registry::default();
        let len = max_model_len;
        Metrics {
            num_preemptions: counter(&mut r, family("vllm:num_preemptions")),
            num_preemptions_by_reason: counter(&mut r, family("vllm:num_preemptions_by_reason")),
            prompt_tokens: counter(&mut r, family("vllm:prompt_tokens")),
            prompt_tokens_by_source: counter(&mut r, family("vllm:prompt_tokens_by_source")),
            prompt_tokens_cached: counter(&mut r, family("vllm:prompt_tokens_cached")),
            generation_tokens: counter(&mut r, family("vllm:generation_tokens")),
            request_success: counter(&mut r, family("vllm:request_success")),
            iteration_tokens: histogram(&mut r, family("vllm:iteration_tokens_total"), len),
            request_prompt_tokens: histogram(&mut r, family("vllm:request_prompt_tokens"), len),
            request_generation_tokens: histogram(
                &mut r,
                family("vllm:request_generation_tokens"),
                len,
            ),
            request_max_num_generation_tokens: histogram(
                &mut r,
                family("vllm:request_max_num_generation_tokens"),
                len,
            ),
            request_params_max_tokens: histogram(
                &mut r,
                family("vllm:request_params_max_tokens"),
                len,
            ),
            request_params_n: histogram(&mut r, family("vllm:request_params_n"), len),
            request_num_preemptions: histogram(&mut r, family("vllm:request_num_preemptions"), len),
            request_prefill_kv_computed_tokens: histogram(
                &mut r,
                family("vllm:request_prefill_kv_computed_tokens"),
                len,
            ),
            time_to_first_token: histogram(&mut r, family("vllm:time_to_first_token_seconds"), len),
            inter_token_latency: histogram(&mut r, family("vllm:inter_token_latency_seconds"), len),
            e2e_request_latency: histogram(&mut r, family("vllm:e2e_request_latency_seconds"), len),
            request_queue_time: histogram(&mut r, family("vllm:request_queue_time_seconds"), len),
            request_prefill_time: histogram(
                &mut r,
                family("vllm:request_prefill_time_seconds"),
                len,
            ),
            request_decode_time: histogram(&mut r, family("vllm:request_decode_time_seconds"), len),
            request_inference_time: histogram(
                &mut r,
                family("vllm:request_inference_time_seconds"),
                len,
            ),
            request_time_per_output_token: histogram(
                &mut r,
                family("vllm:request_time_per_output_token_seconds"),
                len,
            ),
            registry: r,
        }
    }

    /// The Prometheus text exposition of everything recorded.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

/// The label keys of one `(model_name, engine)` label set, built once.
pub(crate) struct LabelSet {
    engine: EngineLabels,
    sources: [SourceLabels; 3],
    finished: [FinishedLabels; 5],
    reasons: [ReasonLabels; 3],
}

impl LabelSet {
    pub(crate) fn new(model_name: &str, engine: u32) -> Self {
        let model_name = model_name.to_owned();
        LabelSet {
            sources: prompt_token_sources().map(|source| SourceLabels {
                model_name: model_name.clone(),
                engine,
                source,
            }),
            finished: FinishReason::ALL.map(|reason| FinishedLabels {
                model_name: model_name.clone(),
                engine,
                finished_reason: reason.as_str(),
            }),
            reasons: PreemptionReason::ALL.map(|reason| ReasonLabels {
                model_name: model_name.clone(),
                engine,
                reason: reason.as_str(),
            }),
            engine: EngineLabels { model_name, engine },
        }
    }
}

/// The handles of one label set, resolved once.
pub(crate) struct Handles<H: TrackerHistogram = Histogram> {
    /// Every finish reason's, resolved with the label set, as the crate
    /// binds them.
    request_success: [Counter; 5],
    num_preemptions: Counter,
    /// Resolved on a reason's first preemption, as the crate does.
    num_preemptions_by_reason: [OnceLock<Counter>; 3],
    num_preemptions_by_reason_family: Family<ReasonLabels, Counter>,
    reason_labels: [ReasonLabels; 3],
    prompt_tokens: Counter,
    prompt_tokens_by_source: [Counter; 3],
    prompt_tokens_cached: Counter,
    generation_tokens: Counter,
    // Resolved like every other handle even though only the per-batch
    // iteration path records it.
    _iteration_tokens: H,
    request_prompt_tokens: H,
    request_generation_tokens: H,
    request_max_num_generation_tokens: H,
    request_params_max_tokens: H,
    request_params_n: H,
    request_num_preemptions: H,
    request_prefill_kv_computed_tokens: H,
    time_to_first_token: H,
    inter_token_latency: H,
    e2e_request_latency: H,
    request_queue_time: H,
    request_prefill_time: H,
    request_decode_time: H,
    request_inference_time: H,
    request_time_per_output_token: H,
}

impl<H: TrackerHistogram> Handles<H> {
    pub(crate) fn resolve(m: &Metrics<H>, labels: &LabelSet) -> Self {
        let l = &labels.engine;
        Handles {
            request_success: std::array::from_fn(|i| {
                m.request_success.get_or_create_owned(&labels.finished[i])
            }),
            num_preemptions: m.num_preemptions.get_or_create_owned(l),
            num_preemptions_by_reason: Default::default(),
            num_preemptions_by_reason_family: m.num_preemptions_by_reason.clone(),
            reason_labels: labels.reasons.clone(),
            prompt_tokens: m.prompt_tokens.get_or_create_owned(l),
            prompt_tokens_by_source: [
                m.prompt_tokens_by_source
                    .get_or_create_owned(&labels.sources[0]),
                m.prompt_tokens_by_source
                    .get_or_create_owned(&labels.sources[1]),
                m.prompt_tokens_by_source
                    .get_or_create_owned(&labels.sources[2]),
            ],
            prompt_tokens_cached: m.prompt_tokens_cached.get_or_create_owned(l),
            generation_tokens: m.generation_tokens.get_or_create_owned(l),
            _iteration_tokens: m.iteration_tokens.get_or_create_owned(l),
            request_prompt_tokens: m.request_prompt_tokens.get_or_create_owned(l),
            request_generation_tokens: m.request_generation_tokens.get_or_create_owned(l),
            request_max_num_generation_tokens: m
                .request_max_num_generation_tokens
                .get_or_create_owned(l),
            request_params_max_tokens: m.request_params_max_tokens.get_or_create_owned(l),
            request_params_n: m.request_params_n.get_or_create_owned(l),
            request_num_preemptions: m.request_num_preemptions.get_or_create_owned(l),
            request_prefill_kv_computed_tokens: m
                .request_prefill_kv_computed_tokens
                .get_or_create_owned(l),
            time_to_first_token: m.time_to_first_token.get_or_create_owned(l),
            inter_token_latency: m.inter_token_latency.get_or_create_owned(l),
            e2e_request_latency: m.e2e_request_latency.get_or_create_owned(l),
            request_queue_time: m.request_queue_time.get_or_create_owned(l),
            request_prefill_time: m.request_prefill_time.get_or_create_owned(l),
            request_decode_time: m.request_decode_time.get_or_create_owned(l),
            request_inference_time: m.request_inference_time.get_or_create_owned(l),
            request_time_per_output_token: m.request_time_per_output_token.get_or_create_owned(l),
        }
    }
}

impl<H: TrackerHistogram> Sink for &Handles<H> {
    #[inline]
    fn generation_tokens(&self, tokens: u64) {
        self.generation_tokens.inc_by(tokens);
    }

    #[inline]
    fn preemption(&self, reason: PreemptionReason) {
        self.num_preemptions.inc();
        let reason = reason as usize;
        self.num_preemptions_by_reason[reason]
            .get_or_init(|| {
                self.num_preemptions_by_reason_family
                    .get_or_create_owned(&self.reason_labels[reason])
            })
            .inc();
    }

    #[inline]
    fn prompt_tokens(&self, stats: &PrefillStats) {
        self.prompt_tokens
            .inc_by(u64::from(stats.num_prompt_tokens));
        let by_source = [
            stats.num_computed_tokens,
            stats.num_local_cached_tokens,
            stats.num_external_cached_tokens,
        ];
        for (counter, tokens) in self.prompt_tokens_by_source.iter().zip(by_source) {
            counter.inc_by(u64::from(tokens));
        }
        self.prompt_tokens_cached
            .inc_by(u64::from(stats.num_cached_tokens));
    }

    #[inline]
    fn time_to_first_token(&self, seconds: f64) {
        self.time_to_first_token.observe(seconds);
    }

    #[inline]
    fn inter_token_latency(&self, seconds: f64) {
        self.inter_token_latency.observe(seconds);
    }

    fn terminal(&self, t: &Terminal) {
        let reason = t.reason.index();
        self.request_success[reason].inc();
        self.request_prompt_tokens.observe(t.prompt_tokens);
        self.request_generation_tokens.observe(t.generation_tokens);
        self.request_max_num_generation_tokens
            .observe(t.generation_tokens);
        if let Some(max_tokens) = t.max_tokens {
            self.request_params_max_tokens.observe(max_tokens);
        }
        self.request_params_n.observe(t.n);
        self.request_num_preemptions.observe(t.num_preemptions);
        self.request_prefill_kv_computed_tokens
            .observe(t.prefill_kv_computed_tokens);
        self.e2e_request_latency.observe(t.e2e);
        self.request_queue_time.observe(t.queue);
        self.request_prefill_time.observe(t.prefill);
        self.request_decode_time.observe(t.decode);
        self.request_inference_time.observe(t.inference);
        self.request_time_per_output_token
            .observe(t.time_per_output_token);
    }
}
