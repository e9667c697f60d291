//! Comparison: the catalog's families as instruments of the official
//! OpenTelemetry SDK (`opentelemetry_sdk`, one explicit-bucket View per
//! histogram, the crate's buckets), recorded
//! unbound (`otel_unbound`): `add(value, &attributes)` /
//! `record(value, &attributes)` on every call, so the SDK looks the
//! attribute set up each time (a read lock and a hash of the attributes per
//! observation). The attribute slices are built once per label set and
//! reused; nothing else is cached. The crate itself binds its handles once
//! per label set; this is what not binding would cost.

use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{Aggregation, Instrument, ManualReader, SdkMeterProvider, Stream};
use vllm_otel_metrics::catalog::{self, MetricDef};
use vllm_otel_metrics::protocol::{FinishReason, PreemptionReason, PrefillStats};
use vllm_otel_metrics::tracker::RequestParams;

use crate::lifecycle_state::{family, prompt_token_sources, Request, Sink, Terminal};

/// A meter provider with one explicit-bucket View per catalog histogram, a
/// ManualReader, and one instrument per per-request family.
pub(crate) struct Metrics {
    /// Kept alive with the instruments.
    _provider: SdkMeterProvider,
    num_preemptions: Counter<u64>,
    num_preemptions_by_reason: Counter<u64>,
    prompt_tokens: Counter<u64>,
    prompt_tokens_by_source: Counter<u64>,
    prompt_tokens_cached: Counter<u64>,
    generation_tokens: Counter<u64>,
    request_success: Counter<u64>,
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
}

fn counter(meter: &Meter, def: &'static MetricDef) -> Counter<u64> {
    meter
        .u64_counter(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

fn histogram(meter: &Meter, def: &'static MetricDef) -> Histogram<f64> {
    meter
        .f64_histogram(def.otel_name)
        .with_unit(def.unit)
        .with_description(def.help)
        .build()
}

impl Metrics {
    pub(crate) fn new(max_model_len: u32) -> Self {
        use catalog::*;
        let provider = SdkMeterProvider::builder()
            .with_reader(ManualReader::builder().build())
            .with_view(move |inst: &Instrument| {
                let def = catalog::by_otel_name(inst.name())?;
                if def.kind != Kind::Histogram {
                    return None;
                }
                Stream::builder()
                    .with_aggregation(Aggregation::ExplicitBucketHistogram {
                        boundaries: def.buckets.boundaries(max_model_len),
                        record_min_max: false,
                    })
                    .build()
                    .ok()
            })
            .build();
        let m = provider.meter("lifecycle-bench");
        Metrics {
            num_preemptions: counter(&m, family("vllm:num_preemptions")),
            num_preemptions_by_reason: counter(&m, family("vllm:num_preemptions_by_reason")),
            prompt_tokens: counter(&m, family("vllm:prompt_tokens")),
            prompt_tokens_by_source: counter(&m, family("vllm:prompt_tokens_by_source")),
            prompt_tokens_cached: counter(&m, family("vllm:prompt_tokens_cached")),
            generation_tokens: counter(&m, family("vllm:generation_tokens")),
            request_success: counter(&m, family("vllm:request_success")),
            request_prompt_tokens: histogram(&m, family("vllm:request_prompt_tokens")),
            request_generation_tokens: histogram(&m, family("vllm:request_generation_tokens")),
            request_max_num_generation_tokens: histogram(
                &m,
                family("vllm:request_max_num_generation_tokens"),
            ),
            request_params_max_tokens: histogram(&m, family("vllm:request_params_max_tokens")),
            request_params_n: histogram(&m, family("vllm:request_params_n")),
            request_num_preemptions: histogram(&m, family("vllm:request_num_preemptions")),
            request_prefill_kv_computed_tokens: histogram(
                &m,
                family("vllm:request_prefill_kv_computed_tokens"),
            ),
            time_to_first_token: histogram(&m, family("vllm:time_to_first_token_seconds")),
            inter_token_latency: histogram(&m, family("vllm:inter_token_latency_seconds")),
            e2e_request_latency: histogram(&m, family("vllm:e2e_request_latency_seconds")),
            request_queue_time: histogram(&m, family("vllm:request_queue_time_seconds")),
            request_prefill_time: histogram(&m, family("vllm:request_prefill_time_seconds")),
            request_decode_time: histogram(&m, family("vllm:request_decode_time_seconds")),
            request_inference_time: histogram(&m, family("vllm:request_inference_time_seconds")),
            request_time_per_output_token: histogram(
                &m,
                family("vllm:request_time_per_output_token_seconds"),
            ),
            _provider: provider,
        }
    }
}

/// The attribute slices of one `(model_name, engine)` label set, built once.
pub(crate) struct Attributes {
    engine: [KeyValue; 2],
    sources: [[KeyValue; 3]; 3],
    finished: [[KeyValue; 3]; 5],
    reasons: [[KeyValue; 3]; 3],
}

impl Attributes {
    pub(crate) fn new(model_name: &str, engine: u32) -> Self {
        let base = [
            KeyValue::new("model_name", model_name.to_owned()),
            KeyValue::new("engine", engine.to_string()),
        ];
        let with = |name: &'static str, value: &'static str| {
            [base[0].clone(), base[1].clone(), KeyValue::new(name, value)]
        };
        Attributes {
            sources: prompt_token_sources().map(|s| with("source", s)),
            finished: FinishReason::ALL.map(|r| with("finished_reason", r.as_str())),
            reasons: PreemptionReason::ALL.map(|r| with("reason", r.as_str())),
            engine: base,
        }
    }
}

struct Unbound<'a> {
    m: &'a Metrics,
    a: &'a Attributes,
}

impl Sink for Unbound<'_> {
    #[inline]
    fn generation_tokens(&self, tokens: u64) {
        self.m.generation_tokens.add(tokens, &self.a.engine);
    }

    #[inline]
    fn preemption(&self, reason: PreemptionReason) {
        self.m.num_preemptions.add(1, &self.a.engine);
        self.m
            .num_preemptions_by_reason
            .add(1, &self.a.reasons[reason as usize]);
    }

    #[inline]
    fn prompt_tokens(&self, stats: &PrefillStats) {
        let (m, a) = (self.m, self.a);
        m.prompt_tokens
            .add(u64::from(stats.num_prompt_tokens), &a.engine);
        let by_source = [
            stats.num_computed_tokens,
            stats.num_local_cached_tokens,
            stats.num_external_cached_tokens,
        ];
        for (attributes, tokens) in a.sources.iter().zip(by_source) {
            m.prompt_tokens_by_source.add(u64::from(tokens), attributes);
        }
        m.prompt_tokens_cached
            .add(u64::from(stats.num_cached_tokens), &a.engine);
    }

    #[inline]
    fn time_to_first_token(&self, seconds: f64) {
        self.m.time_to_first_token.record(seconds, &self.a.engine);
    }

    #[inline]
    fn inter_token_latency(&self, seconds: f64) {
        self.m.inter_token_latency.record(seconds, &self.a.engine);
    }

    fn terminal(&self, t: &Terminal) {
        let (m, l) = (self.m, &self.a.engine);
        m.request_success.add(1, &self.a.finished[t.reason.index()]);
        m.request_prompt_tokens.record(t.prompt_tokens, l);
        m.request_generation_tokens.record(t.generation_tokens, l);
        m.request_max_num_generation_tokens
            .record(t.generation_tokens, l);
        if let Some(max_tokens) = t.max_tokens {
            m.request_params_max_tokens.record(max_tokens, l);
        }
        m.request_params_n.record(t.n, l);
        m.request_num_preemptions.record(t.num_preemptions, l);
        m.request_prefill_kv_computed_tokens
            .record(t.prefill_kv_computed_tokens, l);
        m.e2e_request_latency.record(t.e2e, l);
        m.request_queue_time.record(t.queue, l);
        m.request_prefill_time.record(t.prefill, l);
        m.request_decode_time.record(t.decode, l);
        m.request_inference_time.record(t.inference, l);
        m.request_time_per_output_token
            .record(t.time_per_output_token, l);
    }
}

/// One request recording through unbound instruments.
pub(crate) fn unbound_request<'a>(
    metrics: &'a Metrics,
    attributes: &'a Attributes,
    params: RequestParams,
) -> Request<impl Sink + 'a> {
    Request::start(
        Unbound {
            m: metrics,
            a: attributes,
        },
        params,
    )
}
