//! The per-request tier: its OpenTelemetry instruments, and the bound handles
//! of one label set (the counterpart of vLLM's `RequestMetricHandles`).
//!
//! A request's engine output records up to four of its label set's series
//! (generation tokens, preemptions, time to first token or inter-token
//! latency, and on the first token the prompt-token counters), and its end
//! every histogram of the per-request table observed at the end
//! ([`REQUEST_HISTOGRAMS`]) and `request_success`. The vLLM stat-logger plugin's
//! `iteration_stats` records feed the same series. Every one of them goes
//! through a handle bound once per label set, so recording looks up no
//! attributes and allocates nothing.

use std::sync::{Arc, OnceLock};

use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram};
use opentelemetry::KeyValue;

use super::attributes::with_label;
use super::exemplars::LabelSetExemplars;
use super::meters::{f64_histogram, u64_counter, Meters};
use super::semconv::{SemconvEnd, SemconvHandles, SemconvInstruments};
use super::slo::{SloHandles, SloInstruments};
use crate::catalog::labels::{
    ENGINE_LABELS, FINISHED_REASONS, FINISHED_REASON_LABELS, PREEMPTION_REASONS,
    PREEMPTION_REASON_LABELS, PROMPT_TOKEN_SOURCES, SOURCE_LABELS,
};
use crate::catalog::request::{
    request_histogram_index, Observed, TerminalValues, GENERATION_TOKENS, INTER_TOKEN_LATENCY,
    ITERATION_TOKENS, NUM_PREEMPTIONS, NUM_PREEMPTIONS_BY_REASON, PROMPT_TOKENS,
    PROMPT_TOKENS_BY_SOURCE, PROMPT_TOKENS_CACHED, REQUEST_HISTOGRAMS,
    REQUEST_MAX_NUM_GENERATION_TOKENS, REQUEST_PARAMS_N, REQUEST_SUCCESS, TIME_TO_FIRST_TOKEN,
};
use crate::protocol::{FinishReason, PreemptionReason, PrefillStats};

/// Preemptions of an output or a batch, in [`PreemptionReason::ALL`] order.
pub(crate) type Preemptions = [u64; PREEMPTION_REASONS.len()];

/// No preemption, of any reason.
pub(crate) const NO_PREEMPTIONS: Preemptions = [0; PREEMPTION_REASONS.len()];

/// The places in [`REQUEST_HISTOGRAMS`] of the histograms recorded other
/// than at a request's end: at its tokens (engine-core path), or per step
/// (the stat-logger path's lists).
const TIME_TO_FIRST_TOKEN_AT: usize = request_histogram_index(&TIME_TO_FIRST_TOKEN);
const INTER_TOKEN_LATENCY_AT: usize = request_histogram_index(&INTER_TOKEN_LATENCY);
const MAX_NUM_GENERATION_TOKENS_AT: usize =
    request_histogram_index(&REQUEST_MAX_NUM_GENERATION_TOKENS);
const PARAMS_N_AT: usize = request_histogram_index(&REQUEST_PARAMS_N);

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
    /// In [`REQUEST_HISTOGRAMS`] order.
    histograms: [Histogram<f64>; REQUEST_HISTOGRAMS.len()],
}

impl RequestInstruments {
    pub(crate) fn new(meter: &Meters) -> Self {
        RequestInstruments {
            num_preemptions: u64_counter(meter, &NUM_PREEMPTIONS),
            num_preemptions_by_reason: u64_counter(meter, &NUM_PREEMPTIONS_BY_REASON),
            prompt_tokens: u64_counter(meter, &PROMPT_TOKENS),
            prompt_tokens_by_source: u64_counter(meter, &PROMPT_TOKENS_BY_SOURCE),
            prompt_tokens_cached: u64_counter(meter, &PROMPT_TOKENS_CACHED),
            generation_tokens: u64_counter(meter, &GENERATION_TOKENS),
            request_success: u64_counter(meter, &REQUEST_SUCCESS),
            iteration_tokens: f64_histogram(meter, &ITERATION_TOKENS),
            histograms: std::array::from_fn(|at| f64_histogram(meter, REQUEST_HISTOGRAMS[at].def)),
        }
    }

    /// `vllm:iteration_tokens_total` of a label set without a class, which
    /// its classes share ([`RequestHandles::iteration_tokens`]).
    pub(crate) fn bind_iteration_tokens(&self, labels: &[KeyValue]) -> BoundHistogram<f64> {
        self.iteration_tokens.bind(labels)
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
    prompt_tokens_by_source: [BoundCounter<u64>; PROMPT_TOKEN_SOURCES.len()],
    prompt_tokens_cached: BoundCounter<u64>,
    /// In `FinishReason::ALL` order, every one bound with the label set:
    /// vLLM's Python logger creates them all at zero at start-up (its Rust
    /// frontend creates a reason's series with its first request; this
    /// follows the Python logger, so that success-rate and error-share
    /// panels read 0, not "No data"; docs/SEMANTICS.md §3).
    request_success: [BoundCounter<u64>; FINISHED_REASONS.len()],
    labels: Vec<KeyValue>,
    /// `vllm:iteration_tokens_total` of the label set without its class:
    /// every class of one `(model_name, engine)` shares it, so that an
    /// engine step is observed once whatever classes its requests are of.
    pub(crate) iteration_tokens: Arc<BoundHistogram<f64>>,
    /// `rejected_inputs{reason="invalid_record"}`, for outputs
    /// the tracker's `RequestMetrics` refuses itself.
    invalid: BoundCounter<u64>,
    /// In [`REQUEST_HISTOGRAMS`] order.
    histograms: [BoundHistogram<f64>; REQUEST_HISTOGRAMS.len()],
    /// The label set's exemplars, with exemplars on.
    pub(super) exemplars: Option<Arc<LabelSetExemplars>>,
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
        iteration_tokens: Option<Arc<BoundHistogram<f64>>>,
        invalid: BoundCounter<u64>,
    ) -> Self {
        let i = instruments;
        let model_name = labels
            .iter()
            .find(|l| l.key.as_str() == ENGINE_LABELS[0])
            .map(|l| l.value.as_str());
        let source = |s: &'static str| {
            i.prompt_tokens_by_source
                .bind(&with_label(&labels, SOURCE_LABELS[2], s))
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
                    FINISHED_REASON_LABELS[2],
                    reason.as_str(),
                ));
                series.add(0);
                series
            }),
            iteration_tokens: iteration_tokens
                .unwrap_or_else(|| Arc::new(i.iteration_tokens.bind(&labels))),
            invalid,
            histograms: std::array::from_fn(|h| i.histograms[h].bind(&labels)),
            exemplars: None,
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
                PREEMPTION_REASON_LABELS[2],
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

    /// The label set's exemplars, with exemplars on.
    #[inline(always)]
    pub(crate) fn exemplars(&self) -> Option<&LabelSetExemplars> {
        self.exemplars.as_deref()
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

    /// `vllm:time_to_first_token_seconds` of the label set.
    #[inline(always)]
    pub(crate) fn time_to_first_token(&self) -> &BoundHistogram<f64> {
        &self.histograms[TIME_TO_FIRST_TOKEN_AT]
    }

    /// `vllm:inter_token_latency_seconds` of the label set.
    #[inline(always)]
    pub(crate) fn inter_token_latency(&self) -> &BoundHistogram<f64> {
        &self.histograms[INTER_TOKEN_LATENCY_AT]
    }

    /// `vllm:request_max_num_generation_tokens` of the label set (observed
    /// per step on the stat-logger path).
    pub(crate) fn max_num_generation_tokens(&self) -> &BoundHistogram<f64> {
        &self.histograms[MAX_NUM_GENERATION_TOKENS_AT]
    }

    /// `vllm:request_params_n` of the label set (observed per step on the
    /// stat-logger path).
    pub(crate) fn params_n(&self) -> &BoundHistogram<f64> {
        &self.histograms[PARAMS_N_AT]
    }

    /// Records a request's end: `request_success` of `reason` and one
    /// observation of each histogram observed at the end that `values`
    /// gives a value (vLLM's `record_finished`).
    #[inline]
    pub(crate) fn record_terminal(&self, reason: FinishReason, values: &TerminalValues) {
        self.request_success(reason).add(1);
        for (row, histogram) in REQUEST_HISTOGRAMS.iter().zip(&self.histograms) {
            if let Observed::AtEnd(value_of) = row.observed {
                if let Some(value) = value_of(values) {
                    histogram.record(value);
                }
            }
        }
    }
}
