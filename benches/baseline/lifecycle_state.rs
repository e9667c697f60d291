//! The per-request lifecycle rules of vLLM's frontend tracker, written once for
//! the two baselines of `benches/lifecycle.rs` and generic over where the
//! observations go (a [`Sink`]), so both record exactly what
//! `vllm_otel_metrics::tracker::RequestMetrics` records for the same outputs.
//!
//! Written from the semantics in docs/SEMANTICS.md and `src/tracker/`: token counts
//! and events on every output, TTFT on the first output with tokens (with the
//! prompt-token counters from its prefill stats), ITL on later ones, and every
//! terminal family once when a finish reason arrives.

use vllm_otel_metrics::catalog::{self, MetricDef};
use vllm_otel_metrics::protocol::{
    EngineCoreOutput, EventType, FinishReason, PreemptionReason, PrefillStats,
};
use vllm_otel_metrics::tracker::RequestParams;

/// The values of every terminal family of one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terminal {
    pub(crate) reason: FinishReason,
    pub(crate) prompt_tokens: f64,
    pub(crate) generation_tokens: f64,
    pub(crate) max_tokens: Option<f64>,
    pub(crate) n: f64,
    pub(crate) num_preemptions: f64,
    pub(crate) prefill_kv_computed_tokens: f64,
    pub(crate) e2e: f64,
    pub(crate) queue: f64,
    pub(crate) prefill: f64,
    pub(crate) decode: f64,
    pub(crate) inference: f64,
    pub(crate) time_per_output_token: f64,
}

/// Where one request's observations go (one implementation per baseline).
pub(crate) trait Sink {
    fn generation_tokens(&self, tokens: u64);
    /// One preemption, of `reason`.
    fn preemption(&self, reason: PreemptionReason);
    fn prompt_tokens(&self, stats: &PrefillStats);
    fn time_to_first_token(&self, seconds: f64);
    fn inter_token_latency(&self, seconds: f64);
    fn terminal(&self, terminal: &Terminal);
}

fn diff_or_zero(end: f64, start: f64) -> f64 {
    if end > 0.0 && start > 0.0 && end >= start {
        end - start
    } else {
        0.0
    }
}

/// One request's lifecycle state.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    params: RequestParams,
    is_prefilling: bool,
    queued_ts: f64,
    scheduled_ts: f64,
    first_token_ts: f64,
    last_token_ts: f64,
    num_generation_tokens: u64,
    num_preemptions: u64,
    latest_num_cached_tokens: u32,
    terminated: bool,
}

impl Lifecycle {
    pub(crate) fn new(params: RequestParams) -> Self {
        Lifecycle {
            params,
            is_prefilling: true,
            queued_ts: 0.0,
            scheduled_ts: 0.0,
            first_token_ts: 0.0,
            last_token_ts: 0.0,
            num_generation_tokens: 0,
            num_preemptions: 0,
            latest_num_cached_tokens: 0,
            terminated: false,
        }
    }

    /// Applies one output; returns whether the request is terminated.
    #[inline]
    pub(crate) fn observe_output<S: Sink>(
        &mut self,
        sink: &S,
        batch_timestamp: f64,
        received_at: f64,
        output: &EngineCoreOutput,
    ) -> bool {
        if self.terminated {
            return true;
        }
        if let Some(stats) = &output.prefill_stats {
            self.latest_num_cached_tokens = stats.num_cached_tokens;
        }
        let new_tokens = output.new_token_ids.len() as u64;
        self.num_generation_tokens += new_tokens;
        sink.generation_tokens(new_tokens);
        for event in &output.events {
            match event.kind {
                EventType::Queued => self.queued_ts = event.timestamp,
                EventType::Scheduled => {
                    if self.scheduled_ts == 0.0 {
                        self.scheduled_ts = event.timestamp;
                    }
                }
                EventType::Preempted => {
                    self.num_preemptions += 1;
                    sink.preemption(event.reason.unwrap_or_default());
                }
            }
        }
        if new_tokens > 0 {
            if self.is_prefilling {
                if let Some(stats) = &output.prefill_stats {
                    sink.prompt_tokens(stats);
                }
                sink.time_to_first_token(received_at - self.params.arrival_time);
                self.first_token_ts = batch_timestamp;
                self.is_prefilling = false;
            } else if self.last_token_ts > 0.0 {
                sink.inter_token_latency(batch_timestamp - self.last_token_ts);
            }
            self.last_token_ts = batch_timestamp;
        }
        if let Some(reason) = output.finish_reason {
            self.finish(sink, received_at, reason);
        }
        self.terminated
    }

    /// Records every terminal family once.
    #[inline]
    pub(crate) fn finish<S: Sink>(&mut self, sink: &S, received_at: f64, reason: FinishReason) {
        if self.terminated {
            return;
        }
        self.terminated = true;
        let p = &self.params;
        let tokens = self.num_generation_tokens as f64;
        let decode = diff_or_zero(self.last_token_ts, self.first_token_ts);
        sink.terminal(&Terminal {
            reason,
            prompt_tokens: f64::from(p.prompt_len),
            generation_tokens: tokens,
            max_tokens: p.max_tokens.map(f64::from),
            n: f64::from(p.n),
            num_preemptions: self.num_preemptions as f64,
            prefill_kv_computed_tokens: f64::from(
                p.prompt_len.saturating_sub(self.latest_num_cached_tokens),
            ),
            e2e: received_at - p.arrival_time,
            queue: diff_or_zero(self.scheduled_ts, self.queued_ts),
            prefill: diff_or_zero(self.first_token_ts, self.scheduled_ts),
            decode,
            inference: diff_or_zero(self.last_token_ts, self.scheduled_ts),
            time_per_output_token: if self.num_generation_tokens > 1 {
                decode / (tokens - 1.0)
            } else {
                0.0
            },
        });
    }
}

/// One request of a baseline: lifecycle state recording into `sink`.
pub(crate) struct Request<S> {
    sink: S,
    state: Lifecycle,
}

impl<S: Sink> Request<S> {
    pub(crate) fn start(sink: S, params: RequestParams) -> Self {
        Request {
            sink,
            state: Lifecycle::new(params),
        }
    }

    #[inline]
    pub(crate) fn observe_output(
        &mut self,
        batch_timestamp: f64,
        received_at: f64,
        output: &EngineCoreOutput,
    ) -> bool {
        self.state
            .observe_output(&self.sink, batch_timestamp, received_at, output)
    }
}

/// The catalog's family `/metrics` names `vllm_name`: the baselines build
/// their own instruments from the crate's names, units, HELP and buckets.
pub(crate) fn family(vllm_name: &str) -> &'static MetricDef {
    catalog::by_vllm_name(vllm_name).unwrap_or_else(|| panic!("no family {vllm_name}"))
}

/// The values of `vllm:prompt_tokens_by_source`'s `source` label, in the
/// catalog's order.
pub(crate) fn prompt_token_sources() -> [&'static str; 3] {
    family("vllm:prompt_tokens_by_source")
        .label_values
        .try_into()
        .expect("three prompt token sources")
}
