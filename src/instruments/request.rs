//! The per-request series of one label set, kept together behind one lock.
//!
//! A request's engine output updates up to four of its label set's series
//! (generation tokens, preemptions, time to first token or inter-token
//! latency, and on the first token the prompt-token counters), and its end
//! updates fourteen. Kept in one [`Group`], each of these is one short
//! critical section instead of one atomic operation or lock per series; the
//! values, and each histogram's order of additions, are the same.

use std::sync::{Arc, OnceLock};

use crate::catalog::{self, MetricDef, PROMPT_TOKEN_SOURCES};
use crate::metrics::data::Value;
use crate::metrics::{bucket_index, Family, Group, GroupSeries, Histogram, HistogramState, Labels};
use crate::protocol::{FinishReason, PrefillStats};

/// A per-request histogram family: its index in [`RequestSeries::histograms`].
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

/// Index of each per-request counter in [`RequestSeries::counters`].
mod counter {
    pub const GENERATION_TOKENS: usize = 0;
    pub const NUM_PREEMPTIONS: usize = 1;
    pub const PROMPT_TOKENS: usize = 2;
    /// Three, in `PROMPT_TOKEN_SOURCES` order.
    pub const PROMPT_TOKENS_BY_SOURCE: usize = 3;
    pub const PROMPT_TOKENS_CACHED: usize = 6;
    /// Five, in `FinishReason::ALL` order.
    pub const REQUEST_SUCCESS: usize = 7;
    pub const COUNT: usize = 12;
}

/// Every per-request series of one label set.
#[derive(Debug)]
pub(crate) struct RequestSeries {
    counters: [u64; counter::COUNT],
    histograms: [HistogramState; 15],
}

fn read_counter(series: &RequestSeries, slot: usize) -> Value {
    Value::Counter(series.counters[slot])
}

fn read_histogram(series: &RequestSeries, slot: usize) -> Value {
    Value::Histogram(series.histograms[slot].snapshot())
}

/// The grouped per-request families, in the registry.
#[derive(Debug)]
pub(crate) struct RequestFamilies {
    pub(crate) num_preemptions: Arc<Family<GroupSeries<RequestSeries>>>,
    pub(crate) prompt_tokens: Arc<Family<GroupSeries<RequestSeries>>>,
    pub(crate) prompt_tokens_by_source: Arc<Family<GroupSeries<RequestSeries>>>,
    pub(crate) prompt_tokens_cached: Arc<Family<GroupSeries<RequestSeries>>>,
    pub(crate) generation_tokens: Arc<Family<GroupSeries<RequestSeries>>>,
    pub(crate) request_success: Arc<Family<GroupSeries<RequestSeries>>>,
    pub(crate) iteration_tokens: Arc<Family<Histogram>>,
    /// In [`RequestHistogram`] order.
    pub(crate) histograms: [Arc<Family<GroupSeries<RequestSeries>>>; 15],
}

fn with_label(base: &Labels, name: &'static str, value: &'static str) -> Labels {
    let mut labels = base.clone();
    labels.push((name, value.to_owned()));
    labels
}

/// The per-request handles of one `(model_name, engine)` label set (the
/// counterpart of vLLM's `RequestMetricHandles`).
pub(crate) struct RequestHandles {
    series: Arc<Group<RequestSeries>>,
    /// The bounds of each [`RequestHistogram`].
    bounds: [Arc<[f64]>; 15],
    /// Registered on first use: vLLM creates a finish reason's series when a
    /// request first finishes with it, not at request start.
    request_success: [OnceLock<()>; 5],
    request_success_family: Arc<Family<GroupSeries<RequestSeries>>>,
    labels: Labels,
    pub(crate) iteration_tokens: Arc<Histogram>,
}

impl RequestHandles {
    /// Creates the label set's series; every one but `request_success`
    /// exists, zero-valued, from here on.
    pub(crate) fn new(f: &RequestFamilies, labels: Labels) -> Self {
        let bounds: [Arc<[f64]>; 15] =
            std::array::from_fn(|i| Arc::clone(f.histograms[i].bounds()));
        let series = Arc::new(Group::new(RequestSeries {
            counters: [0; counter::COUNT],
            histograms: std::array::from_fn(|i| HistogramState::new(bounds[i].len())),
        }));
        let counter_view = |slot| GroupSeries::new(&series, slot, read_counter);
        // The handle cache creates a label set's handles once, so every
        // insert adds a series.
        let mut added = f
            .num_preemptions
            .insert(labels.clone(), counter_view(counter::NUM_PREEMPTIONS));
        added &= f
            .prompt_tokens
            .insert(labels.clone(), counter_view(counter::PROMPT_TOKENS));
        for (i, source) in PROMPT_TOKEN_SOURCES.iter().enumerate() {
            added &= f.prompt_tokens_by_source.insert(
                with_label(&labels, catalog::SOURCE_LABELS[2], source),
                counter_view(counter::PROMPT_TOKENS_BY_SOURCE + i),
            );
        }
        added &= f
            .prompt_tokens_cached
            .insert(labels.clone(), counter_view(counter::PROMPT_TOKENS_CACHED));
        added &= f
            .generation_tokens
            .insert(labels.clone(), counter_view(counter::GENERATION_TOKENS));
        for (i, family) in f.histograms.iter().enumerate() {
            added &= family.insert(labels.clone(), GroupSeries::new(&series, i, read_histogram));
        }
        debug_assert!(added, "the series of {labels:?} were created twice");
        RequestHandles {
            iteration_tokens: f.iteration_tokens.series(labels.clone()),
            series,
            bounds,
            request_success: Default::default(),
            request_success_family: Arc::clone(&f.request_success),
            labels,
        }
    }

    /// Records one engine output: its tokens and preemptions, on the first
    /// token the prompt-token counters, and its latency observation.
    #[inline]
    pub(crate) fn record_output(
        &self,
        new_tokens: u64,
        preemptions: u64,
        prompt: Option<&PrefillStats>,
        latency: Option<(RequestHistogram, f64)>,
    ) {
        let latency = latency
            .filter(|(_, v)| v.is_finite())
            .map(|(h, v)| (h as usize, bucket_index(&self.bounds[h as usize], v), v));
        let mut s = self.series.lock();
        s.counters[counter::GENERATION_TOKENS] += new_tokens;
        s.counters[counter::NUM_PREEMPTIONS] += preemptions;
        if let Some(stats) = prompt {
            s.counters[counter::PROMPT_TOKENS] += u64::from(stats.num_prompt_tokens);
            let by_source = [
                stats.num_computed_tokens,
                stats.num_local_cached_tokens,
                stats.num_external_cached_tokens,
            ];
            for (i, tokens) in by_source.into_iter().enumerate() {
                s.counters[counter::PROMPT_TOKENS_BY_SOURCE + i] += u64::from(tokens);
            }
            s.counters[counter::PROMPT_TOKENS_CACHED] += u64::from(stats.num_cached_tokens);
        }
        if let Some((histogram, index, value)) = latency {
            s.histograms[histogram].record_at(index, value);
        }
    }

    /// Records a request's end: `request_success` of `reason` and one
    /// observation per given terminal histogram, in one critical section.
    pub(crate) fn record_terminal(
        &self,
        reason: FinishReason,
        observations: impl IntoIterator<Item = (RequestHistogram, f64)>,
    ) {
        let slot = reason.index();
        self.request_success[slot].get_or_init(|| {
            let added = self.request_success_family.insert(
                with_label(
                    &self.labels,
                    catalog::FINISHED_REASON_LABELS[2],
                    reason.as_str(),
                ),
                GroupSeries::new(&self.series, counter::REQUEST_SUCCESS + slot, read_counter),
            );
            debug_assert!(added, "request_success of {reason:?} was created twice");
        });
        let mut located = [(0, 0, 0.0); 15];
        let mut n = 0;
        for (histogram, value) in observations.into_iter().take(located.len()) {
            if value.is_finite() {
                let h = histogram as usize;
                located[n] = (h, bucket_index(&self.bounds[h], value), value);
                n += 1;
            }
        }
        let mut s = self.series.lock();
        s.counters[counter::REQUEST_SUCCESS + slot] += 1;
        for &(histogram, index, value) in &located[..n] {
            s.histograms[histogram].record_at(index, value);
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
