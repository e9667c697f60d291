//! Per-request lifecycle tracking with vLLM's exact semantics.
//!
//! [`RequestMetrics`] is one request's state, for a frontend that owns a value
//! per request stream (vLLM's `RequestMetricsTracker`): feed it the request's
//! engine-core outputs, then finish or abort it; dropped without either, it
//! records `abort`. [`Tracker`] keeps the requests of a whole input stream keyed
//! by request id, records the per-batch iteration tokens and the scheduler
//! tier, applies the vLLM stat-logger plugin's records with the Python
//! logger's rules, and turns input that does not fit into counted
//! [`Rejection`]s.
//!
//! ```
//! use vllm_otel_metrics::instruments::Instruments;
//! use vllm_otel_metrics::protocol::{EngineCoreOutput, FinishReason};
//! use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
//!
//! let instruments = Instruments::builder().build();
//! let params = RequestParams { arrival_time: 100.0, prompt_len: 64, max_tokens: Some(16), n: 1 };
//! let mut request = RequestMetrics::start(&instruments, "my-model", 0, params);
//! let output = EngineCoreOutput {
//!     request_id: "r1".into(),
//!     new_token_ids: vec![17],
//!     finish_reason: Some(FinishReason::Stop),
//!     ..Default::default()
//! };
//! assert!(request.observe_output(10.0, 100.25, &output)); // terminal: recorded once
//! ```

mod engine;
mod plugin;

use crate::catalog::{EvictReason, RejectReason};
use crate::support::clock::unix_now;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::instruments::spans::{RequestSpans, SpanState, SpanValues};
use crate::instruments::{
    Instruments, LabelSet, Preemptions, RequestHandles, RequestHistogram, SemconvEnd,
    NO_PREEMPTIONS,
};
use crate::protocol::{
    shown, Abort, EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, GenAiOperation,
    InputLimits, OutputBatch, Record, RecordKind, RequestStart, SchedulerStats,
};

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
struct RequestState {
    params: RequestParams,
    is_prefilling: bool,
    queued_ts: f64,
    scheduled_ts: f64,
    first_token_ts: f64,
    last_token_ts: f64,
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
trait CountSink {
    fn counts(&mut self, handles: &RequestHandles, new_tokens: u64, preemptions: &Preemptions);
}

/// Counts go straight to the label set's counters.
struct Immediately;

impl CountSink for Immediately {
    #[inline]
    fn counts(&mut self, handles: &RequestHandles, new_tokens: u64, preemptions: &Preemptions) {
        handles.record_counts(new_tokens, preemptions);
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
    fn goes_back(&self, batch_timestamp: f64, received_at: f64) -> bool {
        batch_timestamp < self.last_batch_ts || received_at < self.params.arrival_time
    }

    /// [`RequestState::goes_back`], with the reason when it does.
    fn out_of_order(&self, batch_timestamp: f64, received_at: f64) -> Option<String> {
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

    /// Mirrors vLLM's `RequestMetricsTracker::observe_output` (docs/SEMANTICS.md §3
    /// steps 1–4): updates the state and records what the output observes,
    /// its counts into `counts`.
    #[inline(always)]
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
        let preemptions = if output.events.is_empty() {
            NO_PREEMPTIONS
        } else {
            self.observe_events(&output.events)
        };
        counts.counts(h, new_tokens, &preemptions);

        // Only outputs that carry tokens drive token timing: a token-less
        // terminal output must not log a stray TTFT or ITL sample.
        if new_tokens > 0 {
            if self.is_prefilling {
                // vLLM's `record_prompt_tokens`: the first token's prefill stats.
                if let Some(stats) = &output.prefill_stats {
                    h.record_prompt_tokens(stats);
                }
                self.time_to_first_token = received_at - self.params.arrival_time;
                h.time_to_first_token.record(self.time_to_first_token);
                self.first_token_ts = batch_timestamp;
                self.is_prefilling = false;
            } else if self.last_token_ts > 0.0 {
                h.inter_token_latency
                    .record(batch_timestamp - self.last_token_ts);
            }
            self.last_token_ts = batch_timestamp;
        }
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
    /// preemption count included even when it is zero. Returns what the
    /// request's span reports, from the same values.
    fn record_terminal(
        &self,
        h: &RequestHandles,
        received_at: f64,
        reason: FinishReason,
    ) -> SpanValues {
        use RequestHistogram::*;
        let p = &self.params;
        let tokens = self.num_generation_tokens as f64;
        let values = SpanValues {
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
        };
        let per_output_token = if self.num_generation_tokens > 1 {
            values.decode / (tokens - 1.0)
        } else {
            0.0
        };
        let observations = [
            (PromptTokens, f64::from(p.prompt_len)),
            (GenerationTokens, tokens),
            (MaxNumGenerationTokens, tokens),
            (ParamsN, f64::from(p.n)),
            (NumPreemptions, self.num_preemptions as f64),
            (
                PrefillKvComputedTokens,
                f64::from(p.prompt_len.saturating_sub(self.latest_num_cached_tokens)),
            ),
            (E2eRequestLatency, values.e2e),
            (QueueTime, values.queue),
            (PrefillTime, values.prefill),
            (DecodeTime, values.decode),
            (InferenceTime, values.inference),
            (TimePerOutputToken, per_output_token),
        ];
        // `max_tokens` is observed only when the request set it.
        let max_tokens = p.max_tokens.map(|m| (ParamsMaxTokens, f64::from(m)));
        h.record_terminal(reason, observations.into_iter().chain(max_tokens));
        h.record_semconv(&SemconvEnd {
            operation: self.operation,
            reason,
            duration: values.e2e,
            // Only a request that produced a token has a first-token time.
            time_to_first_token: (self.num_generation_tokens > 0)
                .then_some(self.time_to_first_token),
            time_per_output_token: (self.num_generation_tokens > 1).then_some(per_output_token),
        });
        values
    }
}

/// One request's metrics, owned by whatever owns the request's stream.
///
/// Terminal recording happens exactly once: at a finishing output, at
/// [`finish`](Self::finish) or [`abort`](Self::abort), or, for a value dropped
/// without any of these, as `abort` at the wall-clock time of the drop (vLLM's
/// dropped-stream behaviour).
pub struct RequestMetrics {
    handles: Arc<RequestHandles>,
    state: RequestState,
    terminated: bool,
    /// The span in the making, when spans are recorded.
    span: Option<Box<SpanState>>,
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
    fn observe_output_into(
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
            let values = self
                .state
                .record_terminal(&self.handles, received_at, reason);
            if let Some(span) = self.span.take() {
                span.end(&values);
            }
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
    fn iteration_tokens(output: &EngineCoreOutput) -> u64 {
        output.new_token_ids.len() as u64
            + output
                .prefill_stats
                .map_or(0, |s| u64::from(s.num_computed_tokens))
    }

    /// Drops without recording anything (for a tracker whose input ended mid-request).
    fn forget(mut self) {
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

/// An input the tracker counted instead of applying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub reason: RejectReason,
    /// Which record (or output of one) carried it.
    pub record: RecordKind,
    /// The request id it named (shortened when long).
    pub request_id: String,
    /// What is wrong, for an invalid record.
    pub detail: String,
}

impl Rejection {
    /// Whether `rejections` (what [`Tracker::apply`] returned) refuse the
    /// record as a whole: one invalid-record rejection naming the record
    /// itself, not one of its outputs.
    pub fn refuse_whole_record(rejections: &[Rejection]) -> bool {
        matches!(
            rejections,
            [only] if only.reason == RejectReason::InvalidRecord && only.record != RecordKind::Output
        )
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            RejectReason::UnknownRequest => write!(
                f,
                "{} for unknown or already finished request '{}'",
                self.record, self.request_id
            ),
            RejectReason::DuplicateRequest => {
                write!(f, "second start for live request '{}'", self.request_id)
            }
            RejectReason::InvalidTraceparent => write!(
                f,
                "request '{}' has an invalid traceparent ({}); it is tracked, its span starts a new trace",
                self.request_id, self.detail
            ),
            RejectReason::InvalidRecord => {
                write!(f, "invalid {} record: {}", self.record, self.detail)
            }
        }
    }
}

/// The requests of one input stream, keyed by request id.
///
/// Requests still live when a `Tracker` is dropped are not recorded: their
/// input simply ended (a trace cut mid-request), so there is no receive time
/// to close them at. Use [`Tracker::abort_all`] to terminate them explicitly,
/// and [`Tracker::evict_oldest`] / [`Tracker::evict_idle`] to bound a
/// long-running tracker fed by clients that may vanish.
pub struct Tracker {
    instruments: Instruments,
    requests: HashMap<String, Live>,
    /// Per-batch counts by label set; reused so batches allocate nothing.
    batch_counts: Vec<BatchCounts>,
    limits: InputLimits,
    spans: Option<RequestSpans>,
    /// Start order `(start number, id)`, kept only for [`Tracker::evict_oldest`];
    /// entries of requests that ended are skipped lazily.
    start_order: Option<VecDeque<(u64, Box<str>)>>,
    starts: u64,
    /// The caller's clock, stamped on requests as their last activity.
    now: f64,
    engines: engine::EngineRecords,
}

/// What a batch adds to one label set's counters and iteration tokens, once
/// per batch: vLLM's Python frontend, too, adds token counts once per
/// iteration. Counter totals do not depend on how adds are grouped.
struct BatchCounts {
    handles: Arc<RequestHandles>,
    iteration_tokens: u64,
    new_tokens: u64,
    preemptions: Preemptions,
}

impl CountSink for BatchCounts {
    #[inline]
    fn counts(&mut self, _: &RequestHandles, new_tokens: u64, preemptions: &Preemptions) {
        self.new_tokens += new_tokens;
        for (sum, count) in self.preemptions.iter_mut().zip(preemptions) {
            *sum += count;
        }
    }
}

/// A live request with its bookkeeping.
struct Live {
    metrics: RequestMetrics,
    start: u64,
    last_seen: f64,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("in_flight", &self.requests.len())
            .finish_non_exhaustive()
    }
}

impl Tracker {
    /// A tracker recording into `instruments`.
    pub fn new(instruments: Instruments) -> Self {
        Tracker {
            instruments,
            requests: HashMap::new(),
            batch_counts: Vec::new(),
            limits: InputLimits::default(),
            spans: None,
            start_order: None,
            starts: 0,
            now: 0.0,
            engines: engine::EngineRecords::default(),
        }
    }

    /// Keeps the start order so that [`Tracker::evict_oldest`] can work.
    pub fn with_start_order(mut self) -> Self {
        self.start_order = Some(VecDeque::new());
        self
    }

    /// Sets the clock that stamps the requests' last activity (seconds, any
    /// origin); [`Tracker::evict_idle`] compares against it.
    pub fn set_now(&mut self, now: f64) {
        self.now = now;
    }

    /// The instruments this tracker records into.
    pub fn instruments(&self) -> &Instruments {
        &self.instruments
    }

    /// Requests started and not yet terminated.
    pub fn in_flight(&self) -> usize {
        self.requests.len()
    }

    /// Also makes each terminated request's `llm_request` span.
    pub fn with_spans(mut self, spans: RequestSpans) -> Self {
        self.spans = Some(spans);
        self
    }

    /// The bounds records are checked against.
    pub fn with_limits(mut self, limits: InputLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Applies any record; returns what was rejected (empty when all
    /// applied). A record that fails [`Record::validate`] against the
    /// tracker's [`InputLimits`] changes nothing and comes back as one
    /// `invalid_record` rejection: this is where every source's records are
    /// checked.
    pub fn apply(&mut self, record: &Record) -> Vec<Rejection> {
        if let Err(error) = record.validate(&self.limits) {
            let (kind, id) = record.kind();
            return vec![self.invalid(kind, id, error.0)];
        }
        match record {
            Record::Request(start) => self.start_valid(start),
            Record::Outputs(batch) => self.batch_valid(batch),
            Record::Abort(abort) => self.abort_valid(abort).err().into_iter().collect(),
            Record::SchedulerStats(stats) => {
                self.engines.scheduler_stats(&self.instruments, stats);
                Vec::new()
            }
            Record::EngineConfig(config) => {
                self.engines.engine_config(&self.instruments, config);
                Vec::new()
            }
            Record::SleepState(sleep) => {
                self.engines.sleep_state(&self.instruments, sleep);
                Vec::new()
            }
            Record::Operation(operation) => {
                self.engines.operation(&self.instruments, operation);
                Vec::new()
            }
            Record::IterationStats(stats) => {
                plugin::iteration_stats(&self.instruments, self.spans.as_ref(), stats);
                Vec::new()
            }
            Record::PluginDrops(drops) => {
                self.instruments.count_plugin_dropped(drops.dropped);
                Vec::new()
            }
        }
    }

    fn reject(&self, reason: RejectReason, record: RecordKind, request_id: &str) -> Rejection {
        self.instruments.count_rejected(reason);
        Rejection {
            reason,
            record,
            request_id: shown(request_id),
            detail: String::new(),
        }
    }

    fn invalid(&self, record: RecordKind, request_id: &str, detail: String) -> Rejection {
        Rejection {
            detail,
            ..self.reject(RejectReason::InvalidRecord, record, request_id)
        }
    }

    /// Starts a request, as [`Tracker::apply`] does a `request` record:
    /// an invalid start ([`RequestStart::validate`]) or a start for a live
    /// id changes nothing and is rejected. A started request comes back with
    /// a rejection of its `traceparent` alone when that is not a W3C trace
    /// context.
    pub fn start_request(&mut self, start: &RequestStart) -> Vec<Rejection> {
        match start.validate(&self.limits) {
            Ok(()) => self.start_valid(start),
            Err(e) => vec![self.invalid(RecordKind::Request, &start.request_id, e.0)],
        }
    }

    fn start_valid(&mut self, start: &RequestStart) -> Vec<Rejection> {
        if self.requests.contains_key(&start.request_id) {
            return vec![self.reject(
                RejectReason::DuplicateRequest,
                RecordKind::Request,
                &start.request_id,
            )];
        }
        let mut metrics = RequestMetrics::start(
            &self.instruments,
            &start.model_name,
            start.engine,
            RequestParams::from(start),
        );
        if let Some(operation) = start.operation_name {
            metrics.set_operation(operation);
        }
        let traceparent = start.traceparent.as_deref();
        let invalid_traceparent = match &self.spans {
            Some(spans) => metrics.trace(
                spans,
                &start.request_id,
                &start.model_name,
                start.engine,
                traceparent,
            ),
            None => traceparent.and_then(|t| crate::instruments::spans::parent_context(t).err()),
        };
        let rejection = invalid_traceparent.map(|invalid| Rejection {
            detail: invalid.to_string(),
            ..self.reject(
                RejectReason::InvalidTraceparent,
                RecordKind::Request,
                &start.request_id,
            )
        });
        self.starts += 1;
        if let Some(order) = &mut self.start_order {
            order.push_back((self.starts, start.request_id.as_str().into()));
            // Ended requests linger in the queue until met; keep it bounded.
            if order.len() > 2 * self.requests.len() + 1024 {
                let requests = &self.requests;
                order.retain(|(n, id)| requests.get(&**id).is_some_and(|live| live.start == *n));
            }
        }
        self.requests.insert(
            start.request_id.clone(),
            Live {
                metrics,
                start: self.starts,
                last_seen: self.now,
            },
        );
        rejection.into_iter().collect()
    }

    /// Applies one engine step: every output of a live request, terminal
    /// recording for finishing ones, and the batch's iteration tokens, observed
    /// once per label set with at least one applied output, zero included
    /// (docs/SEMANTICS.md §3, "Per batch"). Outputs of unknown requests are
    /// rejected one by one and have no label set: a batch of only those
    /// observes nothing. An invalid batch ([`OutputBatch::validate`])
    /// changes nothing and is rejected whole, as [`Tracker::apply`] does.
    pub fn observe_batch(&mut self, batch: &OutputBatch) -> Vec<Rejection> {
        match batch.validate(&self.limits) {
            Ok(()) => self.batch_valid(batch),
            Err(e) => vec![self.invalid(RecordKind::Outputs, "", e.0)],
        }
    }

    fn batch_valid(&mut self, batch: &OutputBatch) -> Vec<Rejection> {
        let mut rejections = Vec::new();
        self.batch_counts.clear();
        for output in &batch.outputs {
            let Some(live) = self.requests.get_mut(output.request_id.as_str()) else {
                rejections.push(self.reject(
                    RejectReason::UnknownRequest,
                    RecordKind::Output,
                    &output.request_id,
                ));
                continue;
            };
            if live
                .metrics
                .state
                .goes_back(batch.timestamp, batch.received_at)
            {
                let detail = live
                    .metrics
                    .state
                    .out_of_order(batch.timestamp, batch.received_at)
                    .unwrap_or_default();
                rejections.push(self.invalid(RecordKind::Output, &output.request_id, detail));
                continue;
            }
            live.last_seen = self.now;
            let request = &mut live.metrics;
            let counts = match self
                .batch_counts
                .iter()
                .position(|c| Arc::ptr_eq(&c.handles, &request.handles))
            {
                Some(i) => &mut self.batch_counts[i],
                None => {
                    self.batch_counts.push(BatchCounts {
                        handles: Arc::clone(&request.handles),
                        iteration_tokens: 0,
                        new_tokens: 0,
                        preemptions: NO_PREEMPTIONS,
                    });
                    self.batch_counts.last_mut().expect("just pushed")
                }
            };
            counts.iteration_tokens += RequestMetrics::iteration_tokens(output);
            if request.observe_output_into(counts, batch.timestamp, batch.received_at, output) {
                self.requests.remove(output.request_id.as_str());
            }
        }
        for counts in self.batch_counts.drain(..) {
            counts
                .handles
                .record_counts(counts.new_tokens, &counts.preemptions);
            // Once per label set with an applied output, zero included, as
            // vLLM's Rust frontend observes every non-empty batch.
            counts
                .handles
                .iteration_tokens
                .record(counts.iteration_tokens as f64);
        }
        rejections
    }

    /// Terminates a request as `abort`; an invalid abort
    /// ([`Abort::validate`]), one for an unknown request or one received
    /// before the request's arrival is rejected.
    pub fn abort(&mut self, abort: &Abort) -> Vec<Rejection> {
        match abort.validate(&self.limits) {
            Ok(()) => self.abort_valid(abort).err().into_iter().collect(),
            Err(e) => vec![self.invalid(RecordKind::Abort, &abort.request_id, e.0)],
        }
    }

    fn abort_valid(&mut self, abort: &Abort) -> Result<(), Rejection> {
        let arrival = self
            .requests
            .get(abort.request_id.as_str())
            .map(|live| live.metrics.state.params.arrival_time);
        match arrival {
            Some(arrival) if abort.received_at < arrival => Err(self.invalid(
                RecordKind::Abort,
                &abort.request_id,
                format!(
                    "received_at {} is earlier than the request's arrival_time {arrival}",
                    abort.received_at
                ),
            )),
            Some(_) => {
                let mut live = self
                    .requests
                    .remove(abort.request_id.as_str())
                    .expect("just found");
                live.metrics.abort(abort.received_at);
                Ok(())
            }
            None => Err(self.reject(
                RejectReason::UnknownRequest,
                RecordKind::Abort,
                &abort.request_id,
            )),
        }
    }

    /// Terminates every live request as `abort` at `received_at`; returns how many.
    pub fn abort_all(&mut self, received_at: f64) -> usize {
        let count = self.requests.len();
        for (_, mut live) in self.requests.drain() {
            live.metrics.abort(received_at);
        }
        count
    }

    /// Terminates the oldest requests as `abort` at `received_at` until at
    /// most `limit` are in flight (needs [`Tracker::with_start_order`]);
    /// returns how many went.
    pub fn evict_oldest(&mut self, limit: usize, received_at: f64) -> usize {
        let Some(order) = &mut self.start_order else {
            return 0;
        };
        let mut evicted = 0;
        while self.requests.len() > limit {
            let Some((n, id)) = order.pop_front() else {
                break;
            };
            if self.requests.get(&*id).is_some_and(|live| live.start == n) {
                let mut live = self.requests.remove(&*id).expect("just found");
                live.metrics.abort(received_at);
                self.instruments.count_evicted(EvictReason::InflightLimit);
                evicted += 1;
            }
        }
        evicted
    }

    /// Terminates as `abort` at `received_at` every request with no activity
    /// since `idle_before` (on the [`Tracker::set_now`] clock); returns how many.
    pub fn evict_idle(&mut self, idle_before: f64, received_at: f64) -> usize {
        let idle: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, live)| live.last_seen < idle_before)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &idle {
            if let Some(mut live) = self.requests.remove(id) {
                live.metrics.abort(received_at);
                self.instruments.count_evicted(EvictReason::Ttl);
            }
        }
        idle.len()
    }

    /// Applies one engine step's scheduler stats, as [`Tracker::apply`]
    /// does a `scheduler_stats` record: invalid ones change nothing and are
    /// rejected.
    pub fn record_scheduler_stats(&mut self, stats: &SchedulerStats) -> Vec<Rejection> {
        match stats.validate(self.limits.max_label_bytes) {
            Ok(()) => {
                self.engines.scheduler_stats(&self.instruments, stats);
                Vec::new()
            }
            Err(e) => vec![self.invalid(RecordKind::SchedulerStats, "", e.0)],
        }
    }

    /// Counts an input that could not be decoded at all.
    pub fn count_invalid_record(&self) {
        self.instruments.count_rejected(RejectReason::InvalidRecord);
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for (_, live) in self.requests.drain() {
            live.metrics.forget();
        }
    }
}
