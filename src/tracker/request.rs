//! One request's lifecycle with vLLM's exact semantics: the state a
//! frontend keeps per request stream (vLLM's `RequestMetricsTracker`) and
//! what each output and the terminal call record.

use std::sync::Arc;

use crate::catalog::request::TerminalValues;
use crate::instruments::exemplars::TraceLink;
use crate::instruments::spans::{RequestSpans, SpanClass, SpanState, SpanValues};
use crate::instruments::{
    Instruments, LabelSet, Preemptions, RequestClass, RequestHandles, SemconvEnd, SloEnd,
    NO_PREEMPTIONS,
};
use crate::protocol::{
    EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, GenAiOperation, RequestStart,
};
use crate::support::clock::unix_now;

/// The request parameters the terminal histograms report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestParams {
    /// Frontend wall-clock arrival time, seconds.
    pub arrival_time: f64,
    /// Prompt length in tokens.
    pub prompt_len: u32,
    /// The `max_tokens` parameter, if set.
    pub max_tokens: Option<u32>,
    /// The `n` parameter.
    pub n: u32,
}

impl From<&RequestStart> for RequestParams {
    fn from(start: &RequestStart) -> Self {
        RequestParams {
            arrival_time: start.arrival_time,
            prompt_len: start.prompt_len,
            max_tokens: start.max_tokens,
            n: start.n,
        }
    }
}

/// `end - start` when both are set and ordered, else 0 (vLLM's `diff_or_zero`).
fn diff_or_zero(end: f64, start: f64) -> f64 {
    if end > 0.0 && start > 0.0 && end >= start {
        end - start
    } else {
        0.0
    }
}

/// Lifecycle state of one request, the fields of vLLM's `RequestMetricsTracker`.
#[derive(Debug, Clone)]
pub(super) struct RequestState {
    pub(super) params: RequestParams,
    is_prefilling: bool,
    queued_ts: f64,
    scheduled_ts: f64,
    first_token_ts: f64,
    last_token_ts: f64,
    /// Past the first token, with a token time to measure the next one
    /// from, and not terminated: an output that carries only tokens takes
    /// [`RequestState::observe_decoding`].
    decoding: bool,
    /// The batch timestamp of the latest output (engine clock).
    last_batch_ts: f64,
    /// The time to first token recorded, for the span.
    time_to_first_token: f64,
    num_generation_tokens: u64,
    num_preemptions: u64,
    latest_num_cached_tokens: u32,
    /// `gen_ai.operation.name` of the semantic-convention streams.
    operation: GenAiOperation,
}

/// Where an engine output's token and preemption counts go: straight to
/// the label set's counters ([`RequestHandles`]), or into a batch's sums
/// that a [`Tracker`] adds once per label set ([`BatchCounts`]).
pub(super) trait CountSink {
    /// `new_tokens` (more than zero) generation tokens.
    fn tokens(&mut self, handles: &RequestHandles, new_tokens: u64);
    /// An output's preemptions, by reason.
    fn preemptions(&mut self, handles: &RequestHandles, preemptions: &Preemptions);
}

/// Counts go straight to the label set's counters.
struct Immediately;

impl CountSink for Immediately {
    #[inline(always)]
    fn tokens(&mut self, handles: &RequestHandles, new_tokens: u64) {
        handles.add_generation_tokens(new_tokens);
    }

    #[inline]
    fn preemptions(&mut self, handles: &RequestHandles, preemptions: &Preemptions) {
        handles.record_counts(0, preemptions);
    }
}

impl RequestState {
    fn new(params: RequestParams) -> Self {
        RequestState {
            params,
            is_prefilling: true,
            queued_ts: 0.0,
            scheduled_ts: 0.0,
            first_token_ts: 0.0,
            last_token_ts: 0.0,
            decoding: false,
            last_batch_ts: 0.0,
            time_to_first_token: 0.0,
            num_generation_tokens: 0,
            num_preemptions: 0,
            latest_num_cached_tokens: 0,
            operation: GenAiOperation::TextCompletion,
        }
    }

    /// Why an output stamped `batch_timestamp` and received at `received_at`
    /// cannot be applied: its engine time is earlier than the request's
    /// previous output, or its receive time earlier than the arrival. Either
    /// would record a negative latency.
    #[inline(always)]
    pub(super) fn goes_back(&self, batch_timestamp: f64, received_at: f64) -> bool {
        batch_timestamp < self.last_batch_ts || received_at < self.params.arrival_time
    }

    /// [`RequestState::goes_back`], with the reason when it does.
    pub(super) fn out_of_order(&self, batch_timestamp: f64, received_at: f64) -> Option<String> {
        if !self.goes_back(batch_timestamp, received_at) {
            None
        } else if batch_timestamp < self.last_batch_ts {
            Some(format!(
                "timestamp {batch_timestamp} is earlier than the request's previous output at {}",
                self.last_batch_ts
            ))
        } else if received_at < self.params.arrival_time {
            Some(format!(
                "received_at {received_at} is earlier than the request's arrival_time {}",
                self.params.arrival_time
            ))
        } else {
            None
        }
    }

    /// Whether `output` is the common case [`RequestState::observe_decoding`]
    /// applies: a decoding request's output with no events, no prefill
    /// stats and no finish reason.
    #[inline(always)]
    fn is_decoding_step(&self, output: &EngineCoreOutput) -> bool {
        self.decoding
            && output.events.is_empty()
            && output.prefill_stats.is_none()
            && output.finish_reason.is_none()
    }

    /// [`RequestState::observe_output`] for an output that
    /// [`RequestState::is_decoding_step`] admits, with what cannot happen
    /// there left out: its tokens, and the inter-token latency from the
    /// previous token. Most outputs of a request take this path, so it
    /// checks nothing the general one would have found irrelevant.
    #[inline(always)]
    fn observe_decoding(
        &mut self,
        h: &RequestHandles,
        counts: &mut impl CountSink,
        batch_timestamp: f64,
        output: &EngineCoreOutput,
    ) {
        self.last_batch_ts = batch_timestamp;
        let new_tokens = output.new_token_ids.len() as u64;
        if new_tokens > 0 {
            self.num_generation_tokens += new_tokens;
            counts.tokens(h, new_tokens);
            h.inter_token_latency()
                .record(batch_timestamp - self.last_token_ts);
            self.last_token_ts = batch_timestamp;
        }
    }

    /// Mirrors vLLM's `RequestMetricsTracker::observe_output` (docs/SEMANTICS.md §3
    /// steps 1–4): updates the state and records what the output observes,
    /// its counts into `counts`. Kept out of line: the outputs that need it
    /// (a request's first token, events, prefill stats) are few.
    #[inline(never)]
    fn observe_output(
        &mut self,
        h: &RequestHandles,
        counts: &mut impl CountSink,
        batch_timestamp: f64,
        received_at: f64,
        output: &EngineCoreOutput,
    ) {
        if let Some(stats) = &output.prefill_stats {
            self.latest_num_cached_tokens = stats.num_cached_tokens;
        }
        self.last_batch_ts = batch_timestamp;
        let new_tokens = output.new_token_ids.len() as u64;
        self.num_generation_tokens += new_tokens;
        if !output.events.is_empty() {
            let preemptions = self.observe_events(&output.events);
            if preemptions != NO_PREEMPTIONS {
                counts.preemptions(h, &preemptions);
            }
        }
        if new_tokens > 0 {
            counts.tokens(h, new_tokens);
        }

        // Only outputs that carry tokens drive token timing: a token-less
        // terminal output must not log a stray TTFT or ITL sample.
        if new_tokens > 0 {
            if self.is_prefilling {
                // vLLM's `record_prompt_tokens`: the first token's prefill stats.
                if let Some(stats) = &output.prefill_stats {
                    h.record_prompt_tokens(stats);
                }
                self.time_to_first_token = received_at - self.params.arrival_time;
                h.time_to_first_token().record(self.time_to_first_token);
                self.first_token_ts = batch_timestamp;
                self.is_prefilling = false;
            } else if self.last_token_ts > 0.0 {
                h.inter_token_latency()
                    .record(batch_timestamp - self.last_token_ts);
            }
            self.last_token_ts = batch_timestamp;
        }
        self.decoding = !self.is_prefilling && self.last_token_ts > 0.0;
    }

    /// Applies the events' timestamps; returns the preemptions by reason.
    #[inline]
    fn observe_events(&mut self, events: &[EngineCoreEvent]) -> Preemptions {
        let mut preemptions = NO_PREEMPTIONS;
        for event in events {
            match event.kind {
                EventType::Queued => self.queued_ts = event.timestamp,
                // The first admission defines the queue time; re-admissions after
                // a preemption must not move it.
                EventType::Scheduled if self.scheduled_ts == 0.0 => {
                    self.scheduled_ts = event.timestamp
                }
                EventType::Scheduled => {}
                EventType::Preempted => preemptions[event.reason.unwrap_or_default() as usize] += 1,
            }
        }
        self.num_preemptions += preemptions.iter().sum::<u64>();
        preemptions
    }

    /// Mirrors vLLM's `record_finished`: every terminal family once, the
    /// preemption count included even when it is zero. Then ends the
    /// request's span, when it has one, from the same values, and keeps the
    /// request for its exemplars (linked to that span, else to `link`).
    /// The values stay in this frame: built once, read in place.
    fn record_terminal(
        &self,
        h: &RequestHandles,
        received_at: f64,
        reason: FinishReason,
        span: Option<Box<SpanState>>,
        link: Option<&TraceLink>,
    ) {
        let p = &self.params;
        let tokens = self.num_generation_tokens as f64;
        let mut values = SpanValues {
            reason,
            start_time: p.arrival_time,
            end_time: received_at,
            prompt_tokens: p.prompt_len,
            completion_tokens: self.num_generation_tokens,
            cached_tokens: self.latest_num_cached_tokens,
            max_tokens: p.max_tokens,
            n: Some(p.n),
            num_preemptions: self.num_preemptions,
            queue: diff_or_zero(self.scheduled_ts, self.queued_ts),
            time_to_first_token: Some(self.time_to_first_token),
            // An explicit end before the arrival (a caller's clock skew)
            // must not record a negative latency.
            e2e: (received_at - p.arrival_time).max(0.0),
            prefill: diff_or_zero(self.first_token_ts, self.scheduled_ts),
            decode: diff_or_zero(self.last_token_ts, self.first_token_ts),
            inference: diff_or_zero(self.last_token_ts, self.scheduled_ts),
            slo_outcome: None,
        };
        let per_output_token = if self.num_generation_tokens > 1 {
            values.decode / (tokens - 1.0)
        } else {
            0.0
        };
        // Only a request that produced a token has a first-token time; only
        // one of two tokens or more a time per output token.
        let time_to_first_token =
            (self.num_generation_tokens > 0).then_some(self.time_to_first_token);
        let terminal = TerminalValues {
            prompt_tokens: p.prompt_len,
            cached_tokens: self.latest_num_cached_tokens,
            generation_tokens: self.num_generation_tokens,
            // One sequence per request stream: its own count.
            max_num_generation_tokens: Some(self.num_generation_tokens),
            params_n: Some(p.n),
            // Observed only when the request set it.
            params_max_tokens: p.max_tokens,
            num_preemptions: self.num_preemptions,
            e2e: values.e2e,
            queue: values.queue,
            prefill: values.prefill,
            decode: values.decode,
            inference: values.inference,
            time_per_output_token: per_output_token,
            time_to_first_token,
        };
        h.record_terminal(reason, &terminal);
        let time_per_output_token = (self.num_generation_tokens > 1).then_some(per_output_token);
        h.record_semconv(&SemconvEnd {
            operation: self.operation,
            reason,
            duration: values.e2e,
            time_to_first_token,
            time_per_output_token,
        });
        // Checked first: without `--slo` nothing more is built or copied.
        if let Some(slo) = h.slo() {
            values.slo_outcome = Some(slo.record(&SloEnd {
                reason,
                time_to_first_token,
                time_per_output_token,
                e2e: values.e2e,
                generation_tokens: self.num_generation_tokens,
            }));
        }
        let made;
        let link = match span {
            Some(span) => {
                made = span.end(&values);
                made.as_ref()
            }
            None => link,
        };
        // Checked first: without exemplars nothing more is copied.
        if let Some(exemplars) = h.exemplars() {
            if let Some(link) = link {
                exemplars.keep(link, values.end_time, &terminal, values.slo_outcome);
            }
        }
    }
}

/// One request's metrics, owned by whatever owns the request's stream.
///
/// Terminal recording happens exactly once: at a finishing output, at
/// [`finish`](Self::finish) or [`abort`](Self::abort), or, for a value dropped
/// without any of these, as `abort` at the wall-clock time of the drop (vLLM's
/// dropped-stream behaviour).
pub struct RequestMetrics {
    pub(super) handles: Arc<RequestHandles>,
    pub(super) state: RequestState,
    terminated: bool,
    /// The span in the making, when spans are recorded.
    span: Option<Box<SpanState>>,
    /// What the request's exemplars point at when no span is made.
    link: Option<TraceLink>,
}

impl std::fmt::Debug for RequestMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestMetrics")
            .field("state", &self.state)
            .field("terminated", &self.terminated)
            .finish()
    }
}

impl RequestMetrics {
    /// Starts tracking a request of `(model_name, engine)`. Every series of that
    /// label set exists from here on.
    pub fn start(
        instruments: &Instruments,
        model_name: &str,
        engine: u32,
        params: RequestParams,
    ) -> Self {
        Self::start_in(&instruments.label_set(model_name, engine), params)
    }

    /// Starts tracking a request of a label set resolved beforehand, without
    /// looking it up.
    pub fn start_in(label_set: &LabelSet, params: RequestParams) -> Self {
        RequestMetrics {
            handles: Arc::clone(&label_set.handles),
            state: RequestState::new(params),
            terminated: false,
            span: None,
            link: None,
        }
    }

    /// Sets the GenAI operation the semantic-convention streams report
    /// (`gen_ai.operation.name`; `text_completion` until set).
    pub fn set_operation(&mut self, operation: GenAiOperation) {
        self.state.operation = operation;
    }

    /// Also makes the request's `llm_request` span at its end (see
    /// [`crate::instruments::spans`]); `traceparent` is the caller's W3C trace context.
    /// Returns why `traceparent` was ignored, when it was not one.
    pub fn trace(
        &mut self,
        spans: &RequestSpans,
        request_id: &str,
        model_name: &str,
        engine: u32,
        traceparent: Option<&str>,
    ) -> Option<crate::instruments::spans::InvalidTraceparent> {
        let (state, invalid) = SpanState::start(spans, request_id, model_name, engine, traceparent);
        self.span = Some(state);
        invalid
    }

    /// Puts the request's class on its span, when it makes one
    /// ([`trace`](Self::trace)): `vllm.lora.name` and
    /// `vllm.request.priority`, as the request gave them.
    pub fn trace_class(&mut self, class: &RequestClass<'_>) {
        if let Some(span) = &mut self.span {
            span.class = SpanClass {
                lora_name: class.lora_name.map(str::to_owned),
                priority: class.priority,
            };
        }
    }

    /// Points the request's exemplars at `link` (a frontend's own request
    /// span, or the caller's) when it makes no `llm_request` span: with
    /// [`trace`](Self::trace), the span made is the link.
    pub fn link(&mut self, link: TraceLink) {
        self.link = Some(link);
    }

    /// Applies one engine-core output of this request, received at
    /// `received_at` in a batch stamped `batch_timestamp`. When the output
    /// carries a finish reason the request is terminated; returns whether it is.
    /// Outputs after termination change nothing.
    #[inline]
    pub fn observe_output(
        &mut self,
        batch_timestamp: f64,
        received_at: f64,
        output: &EngineCoreOutput,
    ) -> bool {
        self.observe_output_into(&mut Immediately, batch_timestamp, received_at, output)
    }

    /// As [`RequestMetrics::observe_output`], with the output's token and
    /// preemption counts going to `counts`.
    #[inline(always)]
    pub(super) fn observe_output_into(
        &mut self,
        counts: &mut impl CountSink,
        batch_timestamp: f64,
        received_at: f64,
        output: &EngineCoreOutput,
    ) -> bool {
        // A terminated request is never `decoding`, so the common output
        // needs no check of its own for it.
        if self.state.is_decoding_step(output)
            && !self.state.goes_back(batch_timestamp, received_at)
        {
            self.state
                .observe_decoding(&self.handles, counts, batch_timestamp, output);
            return false;
        }
        self.observe_output_general(counts, batch_timestamp, received_at, output)
    }

    /// [`RequestMetrics::observe_output_into`] for every output that is not
    /// a plain decoding step.
    #[inline(never)]
    fn observe_output_general(
        &mut self,
        counts: &mut impl CountSink,
        batch_timestamp: f64,
        received_at: f64,
        output: &EngineCoreOutput,
    ) -> bool {
        if self.terminated {
            return true;
        }
        if self.state.goes_back(batch_timestamp, received_at) {
            self.handles.count_invalid();
            return false;
        }
        self.state
            .observe_output(&self.handles, counts, batch_timestamp, received_at, output);
        if let Some(span) = &mut self.span {
            for event in &output.events {
                if event.kind == EventType::Preempted {
                    // The event's engine time on the frontend's clock, by
                    // way of the batch that reported it.
                    span.preempted(
                        received_at - (batch_timestamp - event.timestamp),
                        event.reason.unwrap_or_default(),
                    );
                }
            }
        }
        if let Some(reason) = output.finish_reason {
            self.finish(received_at, reason);
        }
        self.terminated
    }

    /// Terminates the request with `reason` at `received_at` (no-op if already terminated).
    pub fn finish(&mut self, received_at: f64, reason: FinishReason) {
        if !self.terminated {
            self.terminated = true;
            self.state.decoding = false;
            self.state.record_terminal(
                &self.handles,
                received_at,
                reason,
                self.span.take(),
                self.link.as_ref(),
            );
        }
    }

    /// Terminates the request as `abort` at `received_at` (no-op if already terminated).
    pub fn abort(&mut self, received_at: f64) {
        self.finish(received_at, FinishReason::Abort);
    }

    /// Whether terminal metrics were recorded.
    pub fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// Preemptions observed so far.
    pub fn num_preemptions(&self) -> u64 {
        self.state.num_preemptions
    }

    /// Tokens of this output counted towards a batch's iteration tokens: its
    /// new tokens plus, when present, `prefill_stats.num_computed_tokens`
    /// (vLLM's engine sends prefill stats once, on a request's first output).
    pub(super) fn iteration_tokens(output: &EngineCoreOutput) -> u64 {
        output.new_token_ids.len() as u64
            + output
                .prefill_stats
                .map_or(0, |s| u64::from(s.num_computed_tokens))
    }

    /// Drops without recording anything (for a tracker whose input ended mid-request).
    pub(super) fn forget(mut self) {
        self.terminated = true;
    }
}

impl Drop for RequestMetrics {
    fn drop(&mut self) {
        if !self.terminated {
            self.abort(unix_now());
        }
    }
}
