//! The per-request tier: its OpenTelemetry instruments, and the bound handles
//! of one label set (the counterpart of vLLM's `RequestMetricHandles`).
//!
//! A request's engine output records up to four of its label set's series
//! (generation tokens, preemptions, time to first token or inter-token
//! latency, and on the first token the prompt-token counters), and its end
//! fifteen histograms and `request_success`. The vLLM stat-logger plugin's
//! `iteration_stats` records feed the same series. Every one of them goes
//! through a handle bound once per label set, so recording looks up no
//! attributes and allocates nothing.

use std::sync::OnceLock;

use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram};
use opentelemetry::KeyValue;

use super::label_set::with_label;
use super::meters::{f64_histogram, u64_counter, Meters};
use super::semconv::{SemconvEnd, SemconvHandles, SemconvInstruments};
use super::slo::{SloHandles, SloInstruments};
use crate::catalog::{self, MetricDef, PREEMPTION_REASONS, PROMPT_TOKEN_SOURCES};
use crate::protocol::{FinishReason, PreemptionReason, PrefillStats};

/// Preemptions of an output or a batch, in [`PreemptionReason::ALL`] order.
pub(crate) type Preemptions = [u64; PREEMPTION_REASONS.len()];

/// No preemption, of any reason.
pub(crate) const NO_PREEMPTIONS: Preemptions = [0; PREEMPTION_REASONS.len()];

/// A per-request histogram family: its index in [`REQUEST_HISTOGRAMS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestHistogram {
    PromptTokens,
    GenerationTokens,
    MaxNumGenerationTokens,
    ParamsMaxTokens,
    ParamsN,
    NumPreemptions,
    PrefillKvComputedTokens,
    TimeToFirstToken,
    InterTokenLatency,
    E2eRequestLatency,
    QueueTime,
    PrefillTime,
    DecodeTime,
    InferenceTime,
    TimePerOutputToken,
}

/// The catalog entry of each [`RequestHistogram`], in its order.
pub(crate) const REQUEST_HISTOGRAMS: [&MetricDef; 15] = [
    &catalog::REQUEST_PROMPT_TOKENS,
    &catalog::REQUEST_GENERATION_TOKENS,
    &catalog::REQUEST_MAX_NUM_GENERATION_TOKENS,
    &catalog::REQUEST_PARAMS_MAX_TOKENS,
    &catalog::REQUEST_PARAMS_N,
    &catalog::REQUEST_NUM_PREEMPTIONS,
    &catalog::REQUEST_PREFILL_KV_COMPUTED_TOKENS,
    &catalog::TIME_TO_FIRST_TOKEN,
    &catalog::INTER_TOKEN_LATENCY,
    &catalog::E2E_REQUEST_LATENCY,
    &catalog::REQUEST_QUEUE_TIME,
    &catalog::REQUEST_PREFILL_TIME,
    &catalog::REQUEST_DECODE_TIME,
    &catalog::REQUEST_INFERENCE_TIME,
    &catalog::REQUEST_TIME_PER_OUTPUT_TOKEN,
];

/// The per-request tier's instruments (unbound; one per catalog family).
#[derive(Debug)]
pub(crate) struct RequestInstruments {
    num_preemptions: Counter<u64>,
    num_preemptions_by_reason: Counter<u64>,
    prompt_tokens: Counter<u64>,
    prompt_tokens_by_source: Counter<u64>,
    prompt_tokens_cached: Counter<u64>,
    generation_tokens: Counter<u64>,
    request_success: Counter<u64>,
    iteration_tokens: Histogram<f64>,
    /// In [`RequestHistogram`] order.
    histograms: [Histogram<f64>; REQUEST_HISTOGRAMS.len()],
}

impl RequestInstruments {
    pub(crate) fn new(meter: &Meters) -> Self {
        use catalog::*;
        RequestInstruments {
            num_preemptions: u64_counter(meter, &NUM_PREEMPTIONS),
            num_preemptions_by_reason: u64_counter(meter, &NUM_PREEMPTIONS_BY_REASON),
            prompt_tokens: u64_counter(meter, &PROMPT_TOKENS),
            prompt_tokens_by_source: u64_counter(meter, &PROMPT_TOKENS_BY_SOURCE),
            prompt_tokens_cached: u64_counter(meter, &PROMPT_TOKENS_CACHED),
            generation_tokens: u64_counter(meter, &GENERATION_TOKENS),
            request_success: u64_counter(meter, &REQUEST_SUCCESS),
            iteration_tokens: f64_histogram(meter, &ITERATION_TOKENS),
            histograms: REQUEST_HISTOGRAMS.map(|def| f64_histogram(meter, def)),
        }
    }
}

/// The per-request handles of one `(model_name, engine)` label set (or of
/// the overflow label set), bound once.
pub(crate) struct RequestHandles {
    generation_tokens: BoundCounter<u64>,
    num_preemptions: BoundCounter<u64>,
    /// Bound on a reason's first preemption, in [`PreemptionReason::ALL`]
    /// order: the plugin path, which knows no reasons, never creates them.
    num_preemptions_by_reason: [OnceLock<BoundCounter<u64>>; PREEMPTION_REASONS.len()],
    num_preemptions_by_reason_instrument: Counter<u64>,
    /// The semantic-convention series, with `--semconv gen_ai`.
    semconv: Option<SemconvHandles>,
    /// The SLO series and the model's bounds, with `--slo`.
    slo: Option<SloHandles>,
    prompt_tokens: BoundCounter<u64>,
    /// In [`PROMPT_TOKEN_SOURCES`] order.
    prompt_tokens_by_source: [BoundCounter<u64>; catalog::PROMPT_TOKEN_SOURCES.len()],
    prompt_tokens_cached: BoundCounter<u64>,
    /// In `FinishReason::ALL` order, every one bound with the label set:
    /// vLLM's Python logger creates them all at zero at start-up (its Rust
    /// frontend creates a reason's series with its first request; this
    /// follows the Python logger, so that success-rate and error-share
    /// panels read 0, not "No data"; docs/SEMANTICS.md §3).
    request_success: [BoundCounter<u64>; catalog::FINISHED_REASONS.len()],
    labels: Vec<KeyValue>,
    pub(crate) iteration_tokens: BoundHistogram<f64>,
    /// `rejected_inputs{reason="invalid_record"}`, for outputs
    /// the tracker's `RequestMetrics` refuses itself.
    invalid: BoundCounter<u64>,
    pub(crate) time_to_first_token: BoundHistogram<f64>,
    pub(crate) inter_token_latency: BoundHistogram<f64>,
    /// In [`RequestHistogram`] order.
    histograms: [BoundHistogram<f64>; REQUEST_HISTOGRAMS.len()],
}

impl RequestHandles {
    /// Binds every series of the label set; each but the by-reason
    /// preemption counters exists, zero-valued, from here on (vLLM resolves
    /// them at request start, and its Python logger creates
    /// `request_success` of every finish reason at start-up).
    pub(crate) fn bind(
        instruments: &RequestInstruments,
        semconv: Option<&SemconvInstruments>,
        slo: Option<&SloInstruments>,
        labels: Vec<KeyValue>,
        invalid: BoundCounter<u64>,
    ) -> Self {
        let i = instruments;
        let model_name = labels
            .iter()
            .find(|l| l.key.as_str() == catalog::ENGINE_LABELS[0])
            .map(|l| l.value.as_str());
        let source = |s: &'static str| {
            i.prompt_tokens_by_source
                .bind(&with_label(&labels, catalog::SOURCE_LABELS[2], s))
        };
        RequestHandles {
            generation_tokens: i.generation_tokens.bind(&labels),
            num_preemptions: i.num_preemptions.bind(&labels),
            num_preemptions_by_reason: Default::default(),
            num_preemptions_by_reason_instrument: i.num_preemptions_by_reason.clone(),
            semconv: semconv.map(|s| SemconvHandles::new(s, model_name.as_deref())),
            slo: slo.map(|s| SloHandles::bind(s, &labels, model_name.as_deref())),
            prompt_tokens: i.prompt_tokens.bind(&labels),
            prompt_tokens_by_source: PROMPT_TOKEN_SOURCES.map(source),
            prompt_tokens_cached: i.prompt_tokens_cached.bind(&labels),
            request_success: FinishReason::ALL.map(|reason| {
                let series = i.request_success.bind(&with_label(
                    &labels,
                    catalog::FINISHED_REASON_LABELS[2],
                    reason.as_str(),
                ));
                series.add(0);
                series
            }),
            iteration_tokens: i.iteration_tokens.bind(&labels),
            invalid,
            time_to_first_token: i.histograms[RequestHistogram::TimeToFirstToken as usize]
                .bind(&labels),
            inter_token_latency: i.histograms[RequestHistogram::InterTokenLatency as usize]
                .bind(&labels),
            histograms: std::array::from_fn(|h| i.histograms[h].bind(&labels)),
            labels,
        }
    }

    /// Adds an engine output's (or a batch's) new tokens and preemptions.
    #[inline]
    pub(crate) fn record_counts(&self, new_tokens: u64, preemptions: &Preemptions) {
        if new_tokens > 0 {
            self.generation_tokens.add(new_tokens);
        }
        let total: u64 = preemptions.iter().sum();
        if total > 0 {
            self.num_preemptions.add(total);
            for (reason, &count) in PreemptionReason::ALL.iter().zip(preemptions) {
                if count > 0 {
                    self.preemptions_by_reason(*reason).add(count);
                }
            }
        }
    }

    /// Adds an engine output's new tokens.
    #[inline(always)]
    pub(crate) fn add_generation_tokens(&self, new_tokens: u64) {
        self.generation_tokens.add(new_tokens);
    }

    /// Adds preemptions that carry no reason (the plugin path's).
    pub(crate) fn add_preemptions(&self, preemptions: u64) {
        self.num_preemptions.add(preemptions);
    }

    /// The `num_preemptions_by_reason` series of `reason`, bound on first use.
    fn preemptions_by_reason(&self, reason: PreemptionReason) -> &BoundCounter<u64> {
        self.num_preemptions_by_reason[reason as usize].get_or_init(|| {
            self.num_preemptions_by_reason_instrument.bind(&with_label(
                &self.labels,
                catalog::PREEMPTION_REASON_LABELS[2],
                reason.as_str(),
            ))
        })
    }

    /// Records a request's end on the semantic-convention streams, if on.
    #[inline]
    pub(crate) fn record_semconv(&self, end: &SemconvEnd) {
        if let Some(semconv) = &self.semconv {
            semconv.record_end(end);
        }
    }

    /// The SLO handles, with `--slo`.
    #[inline]
    pub(crate) fn slo(&self) -> Option<&SloHandles> {
        self.slo.as_ref()
    }

    /// Counts one output refused as invalid.
    pub(crate) fn count_invalid(&self) {
        self.invalid.add(1);
    }

    /// Adds the first token's prefill stats to the prompt-token counters.
    #[inline]
    pub(crate) fn record_prompt_tokens(&self, stats: &PrefillStats) {
        self.add_prompt_tokens(
            u64::from(stats.num_prompt_tokens),
            [
                stats.num_computed_tokens,
                stats.num_local_cached_tokens,
                stats.num_external_cached_tokens,
            ]
            .map(u64::from),
            u64::from(stats.num_cached_tokens),
        );
    }

    /// Adds to the prompt-token counters: `total`, the tokens by source (in
    /// [`PROMPT_TOKEN_SOURCES`] order) and the cached ones.
    #[inline]
    pub(crate) fn add_prompt_tokens(
        &self,
        total: u64,
        by_source: [u64; PROMPT_TOKEN_SOURCES.len()],
        cached: u64,
    ) {
        self.prompt_tokens.add(total);
        for (handle, tokens) in self.prompt_tokens_by_source.iter().zip(by_source) {
            handle.add(tokens);
        }
        self.prompt_tokens_cached.add(cached);
    }

    /// The `request_success` series of `reason`.
    #[inline]
    fn request_success(&self, reason: FinishReason) -> &BoundCounter<u64> {
        &self.request_success[reason.index()]
    }

    /// One observation of a per-request histogram.
    #[inline]
    pub(crate) fn observe(&self, histogram: RequestHistogram, value: f64) {
        self.histograms[histogram as usize].record(value);
    }

    /// Records a request's end: `request_success` of `reason` and one
    /// observation per given terminal histogram.
    #[inline]
    pub(crate) fn record_terminal(
        &self,
        reason: FinishReason,
        observations: impl IntoIterator<Item = (RequestHistogram, f64)>,
    ) {
        self.request_success(reason).add(1);
        for (histogram, value) in observations {
            self.observe(histogram, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each histogram is recorded into its own catalog family.
    #[test]
    fn every_request_histogram_maps_to_its_family() {
        use catalog::*;
        use RequestHistogram::*;
        let expected: [(RequestHistogram, &MetricDef); 15] = [
            (PromptTokens, &REQUEST_PROMPT_TOKENS),
            (GenerationTokens, &REQUEST_GENERATION_TOKENS),
            (MaxNumGenerationTokens, &REQUEST_MAX_NUM_GENERATION_TOKENS),
            (ParamsMaxTokens, &REQUEST_PARAMS_MAX_TOKENS),
            (ParamsN, &REQUEST_PARAMS_N),
            (NumPreemptions, &REQUEST_NUM_PREEMPTIONS),
            (PrefillKvComputedTokens, &REQUEST_PREFILL_KV_COMPUTED_TOKENS),
            (TimeToFirstToken, &TIME_TO_FIRST_TOKEN),
            (InterTokenLatency, &INTER_TOKEN_LATENCY),
            (E2eRequestLatency, &E2E_REQUEST_LATENCY),
            (QueueTime, &REQUEST_QUEUE_TIME),
            (PrefillTime, &REQUEST_PREFILL_TIME),
            (DecodeTime, &REQUEST_DECODE_TIME),
            (InferenceTime, &REQUEST_INFERENCE_TIME),
            (TimePerOutputToken, &REQUEST_TIME_PER_OUTPUT_TOKEN),
        ];
        for (histogram, def) in expected {
            assert_eq!(
                REQUEST_HISTOGRAMS[histogram as usize].vllm_name, def.vllm_name,
                "{histogram:?}"
            );
        }
    }
}
