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
mod rejection;
mod request;

pub use rejection::Rejection;
use request::CountSink;
pub use request::{RequestMetrics, RequestParams};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::catalog::{EvictReason, RejectReason};
use crate::instruments::spans::RequestSpans;
use crate::instruments::{Instruments, Preemptions, RequestClass, RequestHandles, NO_PREEMPTIONS};
use crate::protocol::{
    shown, Abort, FinishReason, InputLimits, OutputBatch, Record, RecordKind, RequestStart,
    SchedulerStats,
};

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
    /// Each engine's label set of its latest request: a batch whose outputs
    /// all belong to requests no longer tracked observes 0 iteration tokens
    /// there, as vLLM's Rust frontend labels by engine alone.
    engine_handles: Vec<(u32, Arc<RequestHandles>)>,
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
    #[inline(always)]
    fn tokens(&mut self, _: &RequestHandles, new_tokens: u64) {
        self.new_tokens += new_tokens;
    }

    #[inline]
    fn preemptions(&mut self, _: &RequestHandles, preemptions: &Preemptions) {
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
    /// The request has stop strings: an abort record ends it as `stop`
    /// (docs/SEMANTICS.md, "Stop strings"); an eviction still as `abort`.
    stop_strings: bool,
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
            engine_handles: Vec::new(),
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
                let mut rejections = Vec::new();
                plugin::iteration_stats(
                    &self.instruments,
                    self.spans.as_ref(),
                    stats,
                    &self.limits,
                    &mut |kind, request_id, detail| {
                        rejections.push(self.invalid(kind, request_id, detail));
                    },
                );
                rejections
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
        let class = RequestClass {
            lora_name: start.lora_name.as_deref().filter(|name| !name.is_empty()),
            priority: start.priority,
        };
        let label_set = self
            .instruments
            .label_set_for(&start.model_name, start.engine, &class);
        let mut metrics = RequestMetrics::start_in(&label_set, RequestParams::from(start));
        if let Some(operation) = start.operation_name {
            metrics.set_operation(operation);
        }
        match self
            .engine_handles
            .iter_mut()
            .find(|(e, _)| *e == start.engine)
        {
            Some((_, handles)) if Arc::ptr_eq(handles, &metrics.handles) => {}
            Some((_, handles)) => *handles = Arc::clone(&metrics.handles),
            None => self
                .engine_handles
                .push((start.engine, Arc::clone(&metrics.handles))),
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
            // Without spans, exemplars point at the caller's span.
            None => match traceparent.map(crate::instruments::spans::caller_link) {
                Some(Ok(link)) => {
                    metrics.link(link);
                    None
                }
                Some(Err(invalid)) => Some(invalid),
                None => None,
            },
        };
        metrics.trace_class(&class);
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
            // Ended requests linger in the queue until met; keep it bounded.
            // Pruned before this request joins: it is not live yet, so the
            // pruning would drop it and the in-flight limit never evict it.
            if order.len() >= 2 * self.requests.len() + 1024 {
                let requests = &self.requests;
                order.retain(|(n, id)| requests.get(&**id).is_some_and(|live| live.start == *n));
            }
            order.push_back((self.starts, start.request_id.as_str().into()));
        }
        self.requests.insert(
            start.request_id.clone(),
            Live {
                metrics,
                start: self.starts,
                last_seen: self.now,
                stop_strings: start.stop_strings,
            },
        );
        rejection.into_iter().collect()
    }

    /// Applies one engine step: every output of a live request, terminal
    /// recording for finishing ones, and the batch's iteration tokens, observed
    /// once per label set with at least one applied output, zero included
    /// (docs/SEMANTICS.md §3, "Per batch"). Outputs of unknown requests are
    /// rejected one by one and have no label set: a batch of only those
    /// observes nothing, and so are invalid outputs
    /// ([`EngineCoreOutput::validate`](crate::protocol::EngineCoreOutput::validate)):
    /// the rest of the step is applied. A batch whose own times are invalid
    /// ([`OutputBatch::validate`]) changes nothing and is rejected whole, as
    /// [`Tracker::apply`] does.
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
            if let Err(e) = output.validate(&self.limits) {
                let detail = format!("request '{}': {}", shown(&output.request_id), e.0);
                rejections.push(self.invalid(RecordKind::Output, &output.request_id, detail));
                continue;
            }
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
        if self.batch_counts.is_empty() && !batch.outputs.is_empty() {
            // Every output was for a request no longer tracked (a late
            // output after an abort): vLLM's Rust frontend still observes
            // the batch, at 0, under the engine's labels.
            if let Some((_, handles)) = self.engine_handles.iter().find(|(e, _)| *e == batch.engine)
            {
                handles.iteration_tokens.record(0.0);
            }
        }
        let counted = &self.batch_counts;
        for (at, counts) in counted.iter().enumerate() {
            counts
                .handles
                .record_counts(counts.new_tokens, &counts.preemptions);
            // Once per label set with an applied output, zero included, as
            // vLLM's Rust frontend observes every non-empty batch. The
            // classes of one label set (`--attribute`) share its series:
            // the first of them observes the tokens of all.
            let series = &counts.handles.iteration_tokens;
            let same = |c: &&BatchCounts| Arc::ptr_eq(&c.handles.iteration_tokens, series);
            if counted[..at].iter().any(|c| same(&c)) {
                continue;
            }
            let tokens: u64 = counted[at..]
                .iter()
                .filter(same)
                .map(|c| c.iteration_tokens)
                .sum();
            series.record(tokens as f64);
        }
        self.batch_counts.clear();
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
                // A frontend that matched a stop string ends the request
                // with this same abort; the engine core cannot tell it from
                // a client's.
                let reason = if live.stop_strings {
                    FinishReason::Stop
                } else {
                    FinishReason::Abort
                };
                live.metrics.finish(abort.received_at, reason);
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
        match stats.validate(&self.limits) {
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
