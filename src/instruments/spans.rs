//! The `llm_request` span of a terminated request: vLLM's request span
//! (`vllm/tracing.py`, made in its output processor) plus what vLLM's span
//! lacks, the preemptions.
//!
//! [`RequestSpans`] wraps the `opentelemetry_sdk` tracer the spans are made
//! with. A tracked request keeps a `SpanState` (allocated once, at its
//! start, with room for a few preemptions) and at its end the tracker turns
//! it into one SERVER span, from the very values the metrics recorded:
//! start at `arrival_time`, end at the terminal receive time, vLLM's
//! `gen_ai.*` attributes, `vllm.request.num_preemptions` (the value
//! observed into `vllm:request_num_preemptions`),
//! `vllm.request.finished_reason`, `vllm.engine`, and one `preempted` event
//! per preemption, with the count so far and its reason
//! (`vllm.preemption.reason`: `kv_full`, `priority`, `prefix_cache_reset`). An abort is not an error: the status stays unset.
//!
//! A request the vLLM stat-logger plugin reports finished (in an
//! `iteration_stats` record) becomes the same span, made at once from its
//! `FinishedRequestStats`: it starts `e2e_latency` before the record's
//! receive time, starts a new trace, and has only the attributes those
//! values give (no `n`, no time to first token, no preempted events).
//!
//! ```
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use vllm_otel_metrics::instruments::Instruments;
//! use vllm_otel_metrics::protocol::{Abort, RequestStart};
//! use vllm_otel_metrics::instruments::spans::RequestSpans;
//! use vllm_otel_metrics::tracker::Tracker;
//!
//! let exporter = InMemorySpanExporter::default();
//! let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
//! let mut tracker = Tracker::new(Instruments::builder().build()).with_spans(RequestSpans::new(&provider));
//! assert!(tracker.start_request(&RequestStart {
//!     request_id: "r1".into(), model_name: "m".into(), engine: 0, arrival_time: 100.0,
//!     prompt_len: 8, max_tokens: None, n: 1,
//!     traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()), operation_name: None, stop_strings: false,
//!     lora_name: None, priority: None,
//! }).is_empty());
//! assert!(tracker.abort(&Abort { request_id: "r1".into(), received_at: 101.0 }).is_empty());
//! let spans = exporter.get_finished_spans().unwrap();
//! assert_eq!(spans[0].name, "llm_request");
//! assert_eq!(spans[0].span_context.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
//! ```

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span, SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use super::exemplars::TraceLink;
use super::meters::scope;
use crate::protocol::{shown, FinishReason, PreemptionReason};

/// The span's name, as vLLM names it.
pub const SPAN_NAME: &str = "llm_request";
/// The name of a preemption's span event.
pub const PREEMPTED_EVENT: &str = "preempted";

/// Span attribute keys: vLLM's (`SpanAttributes` in `vllm/tracing.py`)
/// and this crate's.
pub mod keys {
    /// The request id.
    pub const REQUEST_ID: &str = "gen_ai.request.id";
    /// The served model.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// The `max_tokens` parameter, when set.
    pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
    /// The `n` parameter.
    pub const REQUEST_N: &str = "gen_ai.request.n";
    /// Prompt tokens.
    pub const USAGE_PROMPT_TOKENS: &str = "gen_ai.usage.prompt_tokens";
    /// Generated tokens.
    pub const USAGE_COMPLETION_TOKENS: &str = "gen_ai.usage.completion_tokens";
    /// Prompt tokens found in the prefix cache.
    pub const USAGE_CACHED_TOKENS: &str = "gen_ai.usage.cached_tokens";
    /// Seconds waiting in the queue.
    pub const LATENCY_TIME_IN_QUEUE: &str = "gen_ai.latency.time_in_queue";
    /// Seconds to the first token.
    pub const LATENCY_TIME_TO_FIRST_TOKEN: &str = "gen_ai.latency.time_to_first_token";
    /// Seconds from arrival to the end.
    pub const LATENCY_E2E: &str = "gen_ai.latency.e2e";
    /// Seconds in prefill.
    pub const LATENCY_TIME_IN_MODEL_PREFILL: &str = "gen_ai.latency.time_in_model_prefill";
    /// Seconds in decode.
    pub const LATENCY_TIME_IN_MODEL_DECODE: &str = "gen_ai.latency.time_in_model_decode";
    /// Seconds running (prefill and decode).
    pub const LATENCY_TIME_IN_MODEL_INFERENCE: &str = "gen_ai.latency.time_in_model_inference";
    /// How often the request was preempted (the value the histogram observed).
    pub const NUM_PREEMPTIONS: &str = "vllm.request.num_preemptions";
    /// Why the request ended (`stop`, `length`, `abort`, …).
    pub const FINISHED_REASON: &str = "vllm.request.finished_reason";
    /// The engine index.
    pub const ENGINE: &str = "vllm.engine";
    /// How the request fared against its model's SLO (`--slo`): the
    /// `outcome` of `vllm_otel_metrics_slo_requests_total`.
    pub const SLO_OUTCOME: &str = "vllm_otel_metrics.slo.outcome";
    /// Why a `preempted` event happened (`vllm:num_preemptions_by_reason`'s
    /// `reason`).
    pub const PREEMPTION_REASON: &str = "vllm.preemption.reason";
    /// The request's priority, the integer (vLLM's `Request.priority`; vLLM
    /// names no span attribute for it).
    pub const REQUEST_PRIORITY: &str = "vllm.request.priority";
    /// The request's LoRA adapter, its full name (vLLM's
    /// `lora_request.lora_name`; vLLM names no span attribute for it).
    pub const LORA_NAME: &str = "vllm.lora.name";
}

/// A request's class as its span carries it: the adapter's name and the
/// priority as the request gave them, not the bounded labels of its
/// series (a span is one request's: nothing to bound).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SpanClass {
    pub(crate) lora_name: Option<String>,
    pub(crate) priority: Option<i64>,
}

/// Which request a span is of.
pub(crate) struct SpanRequest {
    /// None when the source names none.
    pub(crate) request_id: Option<String>,
    pub(crate) model_name: String,
    pub(crate) engine: u32,
    pub(crate) class: SpanClass,
}

/// Preemption times kept without allocating; more grow the list.
const PREEMPTIONS_INLINE: usize = 4;

/// Makes the `llm_request` spans. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct RequestSpans {
    tracer: SdkTracer,
}

impl RequestSpans {
    /// Spans from `provider`, under this crate's instrumentation scope.
    pub fn new(provider: &SdkTracerProvider) -> Self {
        RequestSpans {
            tracer: provider.tracer_with_scope(scope()),
        }
    }
}

/// What a request's span reports, computed by the tracker from the state
/// its metrics come from. An attribute whose value is `None` is left out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpanValues {
    pub(crate) reason: FinishReason,
    /// Frontend wall clock of the start (the arrival), seconds.
    pub(crate) start_time: f64,
    pub(crate) end_time: f64,
    pub(crate) prompt_tokens: u32,
    pub(crate) completion_tokens: u64,
    pub(crate) cached_tokens: u32,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) n: Option<u32>,
    pub(crate) num_preemptions: u64,
    pub(crate) queue: f64,
    pub(crate) time_to_first_token: Option<f64>,
    pub(crate) e2e: f64,
    pub(crate) prefill: f64,
    pub(crate) decode: f64,
    pub(crate) inference: f64,
    /// With `--slo`.
    pub(crate) slo_outcome: Option<super::slo::SloOutcome>,
}

/// A tracked request's span in the making.
#[derive(Debug)]
pub(crate) struct SpanState {
    spans: RequestSpans,
    parent: Context,
    request_id: String,
    model_name: String,
    engine: u32,
    /// Wall-clock times and reasons of the preemptions so far.
    preemptions: Vec<(f64, PreemptionReason)>,
    pub(crate) class: SpanClass,
}

/// Seconds since the Unix epoch as a time (never before the epoch; a time
/// the platform cannot represent is the epoch, never a panic).
fn at(seconds: f64) -> SystemTime {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|since| UNIX_EPOCH.checked_add(since))
        .unwrap_or(UNIX_EPOCH)
}

/// A `traceparent` that is not a W3C trace context (shown shortened).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{shown}' is not a W3C trace context")]
#[non_exhaustive]
pub struct InvalidTraceparent {
    /// The value, shortened when long.
    pub shown: String,
}

/// The caller's span, from a W3C `traceparent`: what a request's exemplars
/// point at when no `llm_request` span is made.
pub(crate) fn caller_link(traceparent: &str) -> Result<TraceLink, InvalidTraceparent> {
    let context = parent_context(traceparent)?;
    let span = context.span();
    let caller = span.span_context();
    Ok(TraceLink {
        trace_id: caller.trace_id(),
        span_id: caller.span_id(),
    })
}

/// The caller's context from a W3C `traceparent`.
pub(crate) fn parent_context(traceparent: &str) -> Result<Context, InvalidTraceparent> {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        Ok(context)
    } else {
        Err(InvalidTraceparent {
            shown: shown(traceparent),
        })
    }
}

impl SpanState {
    /// The state of a request starting now. With an invalid `traceparent`
    /// the span starts a new trace, and the reason comes back too.
    pub(crate) fn start(
        spans: &RequestSpans,
        request_id: &str,
        model_name: &str,
        engine: u32,
        traceparent: Option<&str>,
    ) -> (Box<SpanState>, Option<InvalidTraceparent>) {
        let (parent, invalid) = match traceparent.map(parent_context) {
            Some(Ok(context)) => (context, None),
            Some(Err(why)) => (Context::new(), Some(why)),
            None => (Context::new(), None),
        };
        let state = Box::new(SpanState {
            spans: spans.clone(),
            parent,
            request_id: request_id.to_owned(),
            model_name: model_name.to_owned(),
            engine,
            preemptions: Vec::with_capacity(PREEMPTIONS_INLINE),
            class: SpanClass::default(),
        });
        (state, invalid)
    }

    /// Notes a preemption at a wall-clock time.
    #[inline]
    pub(crate) fn preempted(&mut self, wall_time: f64, reason: PreemptionReason) {
        self.preemptions.push((wall_time, reason));
    }

    /// Ends the request: makes, fills and ends its span; returns its link
    /// when the span is sampled. Out of line: a request without a span must
    /// not pay for the room its inlined body takes.
    #[inline(never)]
    pub(crate) fn end(self, v: &SpanValues) -> Option<TraceLink> {
        let request = SpanRequest {
            request_id: Some(self.request_id),
            model_name: self.model_name,
            engine: self.engine,
            class: self.class,
        };
        self.spans.emit(&self.parent, request, &self.preemptions, v)
    }
}

impl RequestSpans {
    /// Makes one ended `llm_request` span under `parent` (an empty context:
    /// a new trace) from a terminated request's values, with one
    /// `preempted` event per wall-clock time and reason in `preemptions`.
    ///
    /// Returns the span's trace and span ids when it is sampled: the
    /// request's exemplars point at them. They are read off the span made,
    /// not chosen beforehand: the SDK (0.33) takes its ids from the
    /// provider's id generator and ignores a span builder's, so reading
    /// them is what agrees with the exported span whatever the provider
    /// (and an unsampled span, which no backend receives, links nothing).
    pub(crate) fn emit(
        &self,
        parent: &Context,
        request: SpanRequest,
        preemptions: &[(f64, PreemptionReason)],
        v: &SpanValues,
    ) -> Option<TraceLink> {
        let SpanRequest {
            request_id,
            model_name,
            engine,
            class,
        } = request;
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let attributes = [
            request_id.map(|id| KeyValue::new(keys::REQUEST_ID, id)),
            Some(KeyValue::new(keys::RESPONSE_MODEL, model_name)),
            v.n.map(|n| KeyValue::new(keys::REQUEST_N, i64::from(n))),
            Some(KeyValue::new(
                keys::USAGE_PROMPT_TOKENS,
                i64::from(v.prompt_tokens),
            )),
            Some(KeyValue::new(
                keys::USAGE_COMPLETION_TOKENS,
                count(v.completion_tokens),
            )),
            Some(KeyValue::new(
                keys::USAGE_CACHED_TOKENS,
                i64::from(v.cached_tokens),
            )),
            Some(KeyValue::new(keys::LATENCY_TIME_IN_QUEUE, v.queue)),
            v.time_to_first_token
                .map(|ttft| KeyValue::new(keys::LATENCY_TIME_TO_FIRST_TOKEN, ttft)),
            Some(KeyValue::new(keys::LATENCY_E2E, v.e2e)),
            Some(KeyValue::new(
                keys::LATENCY_TIME_IN_MODEL_PREFILL,
                v.prefill,
            )),
            Some(KeyValue::new(keys::LATENCY_TIME_IN_MODEL_DECODE, v.decode)),
            Some(KeyValue::new(
                keys::LATENCY_TIME_IN_MODEL_INFERENCE,
                v.inference,
            )),
            Some(KeyValue::new(
                keys::NUM_PREEMPTIONS,
                count(v.num_preemptions),
            )),
            Some(KeyValue::new(keys::FINISHED_REASON, v.reason.as_str())),
            Some(KeyValue::new(keys::ENGINE, i64::from(engine))),
            v.max_tokens
                .map(|m| KeyValue::new(keys::REQUEST_MAX_TOKENS, i64::from(m))),
            v.slo_outcome
                .map(|o| KeyValue::new(keys::SLO_OUTCOME, o.as_str())),
            class
                .lora_name
                .map(|name| KeyValue::new(keys::LORA_NAME, name)),
            class
                .priority
                .map(|priority| KeyValue::new(keys::REQUEST_PRIORITY, priority)),
        ];
        let mut present = Vec::with_capacity(attributes.len());
        present.extend(attributes.into_iter().flatten());
        let tracer = &self.tracer;
        let mut span = tracer
            .span_builder(SPAN_NAME)
            .with_kind(SpanKind::Server)
            .with_start_time(at(v.start_time))
            .with_attributes(present)
            .start_with_context(tracer, parent);
        for (i, (wall_time, reason)) in preemptions.iter().enumerate() {
            span.add_event_with_timestamp(
                PREEMPTED_EVENT,
                at(*wall_time),
                vec![
                    KeyValue::new(keys::NUM_PREEMPTIONS, i as i64 + 1),
                    KeyValue::new(keys::PREEMPTION_REASON, reason.as_str()),
                ],
            );
        }
        let context = span.span_context();
        let link = context.is_sampled().then(|| TraceLink {
            trace_id: context.trace_id(),
            span_id: context.span_id(),
        });
        span.end_with_timestamp(at(v.end_time));
        link
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_parsed_by_the_sdk_propagator() {
        let valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let context = parent_context(valid).unwrap();
        assert_eq!(
            context.span().span_context().span_id().to_string(),
            "b7ad6b7169203331"
        );
        for invalid in [
            "",
            "00-xyz",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        ] {
            assert!(parent_context(invalid).is_err(), "{invalid}");
        }
    }
}
