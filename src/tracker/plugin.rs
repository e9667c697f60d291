//! Applies the vLLM stat-logger plugin's `iteration_stats` records with the
//! rules of vLLM's Python `PrometheusStatLogger.record()` (docs/SEMANTICS.md
//! "Plugin path"), not the engine-core rules the rest of the tracker follows.
//!
//! The Python logger sees an engine step already summed up: its token
//! counts, its per-request lists, and the requests that finished with their
//! durations computed. So there is no per-request state here: each record is
//! recorded through its label set's bound handles as it comes, and each
//! finished request becomes one `llm_request` span at once.

use opentelemetry::Context;

use crate::catalog::request::TerminalValues;
use crate::instruments::spans::{RequestSpans, SpanClass, SpanRequest, SpanValues};
use crate::instruments::{Instruments, RequestHandles, SloEnd, SloOutcome, NO_PREEMPTIONS};
use crate::protocol::{shown, FinishedRequest, InputLimits, IterationStats, RecordKind};
use crate::support::clock::unix_now;

/// One step's stats, as `PrometheusStatLogger.record()` applies an
/// `IterationStats` (the record already validated: see `Record::validate`).
/// A finished request that fails [`FinishedRequest::validate`], or a
/// per-request list value that is not finite, is handed to `invalid` (its
/// kind, request id and what is wrong) and left out; the rest is recorded.
pub(super) fn iteration_stats(
    instruments: &Instruments,
    spans: Option<&RequestSpans>,
    stats: &IterationStats,
    limits: &InputLimits,
    invalid: &mut dyn FnMut(RecordKind, &str, String),
) {
    let label_set = instruments.label_set(&stats.model_name, stats.engine);
    let h = &*label_set.handles;
    h.record_counts(stats.num_generation_tokens, &NO_PREEMPTIONS);
    if stats.num_preempted_reqs > 0 {
        // vLLM's `IterationStats` carry no reasons: no by-reason series.
        h.add_preemptions(stats.num_preempted_reqs);
    }
    let p = &stats.prompt_token_stats;
    h.add_prompt_tokens(
        p.total,
        [p.computed, p.local_cache_hit, p.external_kv_transfer],
        p.cached_tokens,
    );
    // Once per step, zero included, as the Python logger observes it.
    h.iteration_tokens
        .record(p.computed.saturating_add(stats.num_generation_tokens) as f64);
    for tokens in &stats.max_num_generation_tokens_iter {
        h.max_num_generation_tokens().record(*tokens as f64);
    }
    for n in &stats.n_params_iter {
        h.params_n().record(*n as f64);
    }
    for (what, values, histogram) in [
        (
            "time_to_first_tokens_iter",
            &stats.time_to_first_tokens_iter,
            h.time_to_first_token(),
        ),
        (
            "inter_token_latencies_iter",
            &stats.inter_token_latencies_iter,
            h.inter_token_latency(),
        ),
    ] {
        for (i, value) in values.iter().enumerate() {
            if value.is_finite() {
                histogram.record(*value);
            } else {
                invalid(
                    RecordKind::IterationValue,
                    "",
                    format!("{what}[{i}] is not a finite number ({value})"),
                );
            }
        }
    }
    if stats.finished_requests.is_empty() {
        return;
    }
    let received_at = stats.received_at.unwrap_or_else(unix_now);
    for request in &stats.finished_requests {
        if let Err(e) = request.validate(limits) {
            invalid(
                RecordKind::FinishedRequest,
                &request.request_id,
                format!("request '{}': {}", shown(&request.request_id), e.0),
            );
            continue;
        }
        let (slo_outcome, terminal) = finished(h, request);
        let link = spans.and_then(|spans| span(spans, stats, received_at, request, slo_outcome));
        if let (Some(exemplars), Some(link)) = (h.exemplars(), link) {
            exemplars.keep(&link, received_at, &terminal, slo_outcome);
        }
    }
}

/// A finished request's terminal families (`record()`'s loop over
/// `finished_requests`); returns its SLO outcome with `--slo`, and the
/// values observed.
fn finished(h: &RequestHandles, r: &FinishedRequest) -> (Option<SloOutcome>, TerminalValues) {
    let terminal = TerminalValues {
        prompt_tokens: r.num_prompt_tokens,
        cached_tokens: r.num_cached_tokens,
        generation_tokens: u64::from(r.num_generation_tokens),
        // `record()` observes these from the step's lists, not here.
        max_num_generation_tokens: None,
        params_n: None,
        // Python: `if finished_request.max_tokens_param:` (neither None nor 0).
        params_max_tokens: r.max_tokens_param.filter(|m| *m > 0),
        num_preemptions: u64::from(r.num_preemptions),
        e2e: r.e2e_latency,
        queue: r.queued_time,
        prefill: r.prefill_time,
        decode: r.decode_time,
        inference: r.inference_time,
        time_per_output_token: r.mean_time_per_output_token,
        // Observed per step from lists that name no request.
        time_to_first_token: None,
    };
    h.record_terminal(r.finish_reason, &terminal);
    // vLLM's finished-request stats carry no time to first token: the
    // engine's, from queued to the first token, stands in (it leaves out
    // what the frontend spends before queueing; docs/SEMANTICS.md).
    let outcome = h.slo().map(|slo| {
        slo.record(&SloEnd {
            reason: r.finish_reason,
            time_to_first_token: (r.num_generation_tokens > 0)
                .then_some(r.queued_time + r.prefill_time),
            time_per_output_token: (r.num_generation_tokens > 1)
                .then_some(r.mean_time_per_output_token),
            e2e: r.e2e_latency,
            generation_tokens: u64::from(r.num_generation_tokens),
        })
    });
    (outcome, terminal)
}

/// A finished request's `llm_request` span: from `received_at − e2e_latency`
/// to `received_at`, in a new trace, with the attributes its values give;
/// its link when sampled.
fn span(
    spans: &RequestSpans,
    stats: &IterationStats,
    received_at: f64,
    r: &FinishedRequest,
    slo_outcome: Option<SloOutcome>,
) -> Option<crate::instruments::exemplars::TraceLink> {
    let values = SpanValues {
        reason: r.finish_reason,
        start_time: received_at - r.e2e_latency,
        end_time: received_at,
        prompt_tokens: r.num_prompt_tokens,
        completion_tokens: u64::from(r.num_generation_tokens),
        cached_tokens: r.num_cached_tokens,
        max_tokens: r.max_tokens_param,
        n: None,
        num_preemptions: u64::from(r.num_preemptions),
        queue: r.queued_time,
        time_to_first_token: None,
        e2e: r.e2e_latency,
        prefill: r.prefill_time,
        decode: r.decode_time,
        inference: r.inference_time,
        slo_outcome,
    };
    let request_id = (!r.request_id.is_empty()).then(|| r.request_id.clone());
    let request = SpanRequest {
        request_id,
        model_name: stats.model_name.clone(),
        engine: stats.engine,
        class: SpanClass::default(),
    };
    spans.emit(&Context::new(), request, &[], &values)
}
