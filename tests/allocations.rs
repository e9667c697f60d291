//! Recording into an existing label set allocates nothing: the hot path of
//! `RequestMetrics`, `Tracker::observe_batch` and the engine-level records is
//! counted, not timed.
//!
//! A counting global allocator counts the allocations (and reallocations) of
//! the current thread while a thread-local flag is set, so tests running in
//! parallel on other threads do not disturb each other. Set
//! `ALLOCATIONS_BACKTRACE=1` to print a backtrace of every counted allocation.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod paths;
    pub mod proto_fields;
}

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use vllm_otel_metrics::export::prometheus::PrometheusBridge;
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::{
    EngineConfig, EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, FinishedRequest,
    IterationStats, Operation, OperationKind, OutputBatch, PluginDrops, PrefillStats,
    PromptTokenStats, Record, RequestStart, SleepState,
};
use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams, Tracker};

struct CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

impl CountingAllocator {
    fn count(&self) {
        let counting = COUNTING.try_with(Cell::get).unwrap_or(false);
        if !counting {
            return;
        }
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        if TRACING.try_with(Cell::get).unwrap_or(false) {
            // Capturing allocates: stop counting meanwhile.
            let _ = COUNTING.try_with(|c| c.set(false));
            eprintln!(
                "counted allocation:\n{}",
                std::backtrace::Backtrace::force_capture()
            );
            let _ = COUNTING.try_with(|c| c.set(true));
        }
    }
}

// A global allocator can only be written with `unsafe`: it forwards every
// call unchanged to the system allocator and only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// How many allocations `f` makes on this thread.
fn allocations<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let tracing = std::env::var_os("ALLOCATIONS_BACKTRACE").is_some_and(|v| v != "0");
    TRACING.with(|t| t.set(tracing));
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    let result = f();
    COUNTING.with(|c| c.set(false));
    (ALLOCATIONS.with(Cell::get), result)
}

const MODEL: &str = "m";

fn params() -> RequestParams {
    RequestParams {
        arrival_time: 100.0,
        prompt_len: 64,
        max_tokens: Some(16),
        n: 1,
    }
}

fn event(kind: EventType, timestamp: f64) -> EngineCoreEvent {
    EngineCoreEvent {
        kind,
        timestamp,
        reason: None,
    }
}

fn first_output(id: &str) -> EngineCoreOutput {
    EngineCoreOutput {
        request_id: id.into(),
        new_token_ids: vec![1],
        events: vec![
            event(EventType::Queued, 1.0),
            event(EventType::Scheduled, 1.5),
        ],
        prefill_stats: Some(PrefillStats {
            num_prompt_tokens: 64,
            num_computed_tokens: 60,
            num_cached_tokens: 4,
            num_local_cached_tokens: 4,
            num_external_cached_tokens: 0,
        }),
        finish_reason: None,
    }
}

/// A decode output with tokens and a preemption/rescheduling pair.
fn preempted_output(id: &str) -> EngineCoreOutput {
    EngineCoreOutput {
        request_id: id.into(),
        new_token_ids: vec![2, 3],
        events: vec![
            event(EventType::Preempted, 2.2),
            event(EventType::Scheduled, 2.4),
        ],
        prefill_stats: None,
        finish_reason: None,
    }
}

fn last_output(id: &str, reason: FinishReason) -> EngineCoreOutput {
    EngineCoreOutput {
        request_id: id.into(),
        new_token_ids: vec![4],
        finish_reason: Some(reason),
        ..Default::default()
    }
}

/// Instruments read by the Prometheus bridge, as the command line builds them.
fn instruments() -> Instruments {
    let (bridge, reader) = PrometheusBridge::builder().build();
    // The bridge only reads; recording never touches it.
    drop(bridge);
    Instruments::builder().with_reader(reader).build()
}

/// Runs one whole request of `(MODEL, 0)` finishing with `reason`, so that the
/// label set and that finish reason's series exist.
fn warm(instruments: &Instruments, reason: FinishReason) {
    let mut request = RequestMetrics::start(instruments, MODEL, 0, params());
    request.observe_output(2.0, 100.5, &first_output("warm"));
    request.observe_output(3.0, 101.0, &preempted_output("warm"));
    assert!(request.observe_output(4.0, 101.5, &last_output("warm", reason)));
}

#[test]
fn starting_a_request_of_an_existing_label_set_allocates_nothing() {
    let instruments = instruments();
    warm(&instruments, FinishReason::Stop);
    let (n, mut request) = allocations(|| RequestMetrics::start(&instruments, MODEL, 0, params()));
    assert_eq!(n, 0, "RequestMetrics::start allocated {n} time(s)");
    request.finish(101.0, FinishReason::Stop);
    let label_set = instruments.label_set(MODEL, 0);
    let (n, mut request) = allocations(|| RequestMetrics::start_in(&label_set, params()));
    assert_eq!(n, 0, "RequestMetrics::start_in allocated {n} time(s)");
    request.finish(101.0, FinishReason::Stop);
}

#[test]
fn observing_a_non_terminal_output_allocates_nothing() {
    let instruments = instruments();
    warm(&instruments, FinishReason::Stop);
    let mut request = RequestMetrics::start(&instruments, MODEL, 0, params());
    let first = first_output("r");
    let preempted = preempted_output("r");
    let (n, terminated) = allocations(|| {
        // The first output (TTFT, prompt-token counters, events) and a decode
        // output with tokens and events (ITL, preemption counter).
        let a = request.observe_output(2.0, 100.5, &first);
        let b = request.observe_output(3.0, 101.0, &preempted);
        a || b
    });
    assert!(!terminated);
    assert_eq!(n, 0, "RequestMetrics::observe_output allocated {n} time(s)");
    request.finish(101.5, FinishReason::Stop);
}

/// With spans on, a request's outputs still allocate nothing (preemptions
/// go to room kept at the start); only its end makes the span.
#[test]
fn with_spans_the_outputs_of_a_request_allocate_nothing() {
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use vllm_otel_metrics::instruments::spans::RequestSpans;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let spans = RequestSpans::new(&provider);
    let instruments = instruments();
    warm(&instruments, FinishReason::Stop);
    let mut request = RequestMetrics::start(&instruments, MODEL, 0, params());
    assert_eq!(request.trace(&spans, "r", MODEL, 0, None), None);
    let (first, preempted) = (first_output("r"), preempted_output("r"));
    let (n, terminated) = allocations(|| {
        let a = request.observe_output(2.0, 100.5, &first);
        let b = request.observe_output(3.0, 101.0, &preempted);
        let c = request.observe_output(4.0, 101.5, &preempted);
        a || b || c
    });
    assert!(!terminated);
    assert_eq!(n, 0, "outputs with spans on allocated {n} time(s)");
    request.finish(102.0, FinishReason::Stop);
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].events.len(), 2, "two preempted events");
}

#[test]
fn finishing_a_request_allocates_nothing() {
    let instruments = instruments();
    warm(&instruments, FinishReason::Length);
    let last = last_output("r", FinishReason::Length);

    // Terminal recording through a finishing output.
    let mut request = RequestMetrics::start(&instruments, MODEL, 0, params());
    request.observe_output(2.0, 100.5, &first_output("r"));
    request.observe_output(3.0, 101.0, &preempted_output("r"));
    let (n, terminated) = allocations(|| request.observe_output(4.0, 101.5, &last));
    assert!(terminated);
    assert_eq!(n, 0, "a finishing output allocated {n} time(s)");
    let (n, ()) = allocations(|| drop(request));
    assert_eq!(n, 0, "dropping a finished request allocated {n} time(s)");

    // Terminal recording through `finish`.
    let mut request = RequestMetrics::start(&instruments, MODEL, 0, params());
    request.observe_output(2.0, 100.5, &first_output("r"));
    let (n, ()) = allocations(|| request.finish(101.5, FinishReason::Length));
    assert!(request.is_terminated());
    assert_eq!(n, 0, "RequestMetrics::finish allocated {n} time(s)");
}

/// Finishing a warmed label set's request, as a success and as an abort,
/// allocates nothing.
fn finishing_as_success_or_abort_allocates_nothing(instruments: &Instruments) {
    for reason in [FinishReason::Length, FinishReason::Abort] {
        warm(instruments, reason);
        let mut request = RequestMetrics::start(instruments, MODEL, 0, params());
        request.observe_output(2.0, 100.5, &first_output("r"));
        request.observe_output(3.0, 101.0, &preempted_output("r"));
        let (n, ()) = allocations(|| request.finish(101.5, reason));
        assert_eq!(n, 0, "finishing as {reason:?} allocated {n} time(s)");
    }
}

/// With `--semconv gen_ai`, the GenAI histograms' series are bound on
/// their first observation; after that, finishing a request (success or
/// abort) allocates nothing either.
#[test]
fn with_semconv_on_finishing_a_request_allocates_nothing() {
    use vllm_otel_metrics::instruments::Semconv;
    let (_bridge, reader) = PrometheusBridge::builder().with_semconv(true).build();
    let instruments = Instruments::builder()
        .with_reader(reader)
        .with_semconv(Semconv::GenAi)
        .build();
    finishing_as_success_or_abort_allocates_nothing(&instruments);
}

/// With `--slo`, every outcome's series is bound with the label set:
/// judging and counting a finished request (met, missed or aborted)
/// allocates nothing.
#[test]
fn with_an_slo_finishing_a_request_allocates_nothing() {
    use vllm_otel_metrics::instruments::Slo;
    let (_bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder()
        .with_reader(reader)
        .with_slo(Slo::from_json(r#"{"ttft": 0.1, "tpot": 0.05, "e2e": 30}"#).unwrap())
        .build();
    finishing_as_success_or_abort_allocates_nothing(&instruments);
}

/// With exemplars on, a request's end copies it into its label set's ring
/// and allocates nothing; nor does one that finds the ring full and places
/// the oldest request itself, with `--slo` too.
#[test]
fn with_exemplars_finishing_a_request_allocates_nothing() {
    use opentelemetry::trace::{SpanId, TraceId};
    use vllm_otel_metrics::instruments::exemplars::{TraceLink, RING_CAPACITY};
    use vllm_otel_metrics::instruments::Slo;
    let (_bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder()
        .with_reader(reader)
        .with_exemplars(true)
        .with_slo(Slo::from_json(r#"{"ttft": 0.1, "tpot": 0.05, "e2e": 30}"#).unwrap())
        .build();
    let link = TraceLink {
        trace_id: TraceId::from(7u128),
        span_id: SpanId::from(9u64),
    };
    finishing_as_success_or_abort_allocates_nothing(&instruments);
    for round in 0..RING_CAPACITY + 2 {
        let mut request = RequestMetrics::start(&instruments, MODEL, 0, params());
        request.link(link);
        request.observe_output(2.0, 100.5, &first_output("r"));
        request.observe_output(3.0, 101.0, &preempted_output("r"));
        let (n, ()) = allocations(|| request.finish(101.5, FinishReason::Stop));
        assert_eq!(
            n, 0,
            "finishing linked request {round} allocated {n} time(s)"
        );
    }
    let exemplars = instruments.exemplars().unwrap();
    assert_eq!(exemplars.most_preempted().map(|(count, _)| count), Some(1));
}

/// With `--attribute lora,priority`, a request of a class whose handles
/// exist resolves its class and starts without allocating (an adapter with
/// a label of its own, one folded into `other`, the base model), and its
/// whole lifecycle, exemplars and SLO included, allocates nothing.
#[test]
fn with_attribution_a_request_of_an_existing_class_allocates_nothing() {
    use vllm_otel_metrics::instruments::{Attribution, PriorityClasses, RequestClass, Slo};
    let (_bridge, reader) = PrometheusBridge::builder().build();
    let attribution = Attribution::default()
        .with_lora()
        .with_max_adapters(1)
        .with_adapter_min_requests(1)
        .with_priority(PriorityClasses::default());
    let instruments = Instruments::builder()
        .with_reader(reader)
        .with_attribution(attribution)
        .with_exemplars(true)
        .with_slo(Slo::from_json(r#"{"ttft": 0.1}"#).unwrap())
        .build();
    let classes = [
        RequestClass {
            lora_name: Some("sql"),
            priority: Some(5),
        },
        // No slot left: `other`, uncounted.
        RequestClass {
            lora_name: Some("chat"),
            priority: Some(-3),
        },
        RequestClass::default(),
    ];
    for class in &classes {
        // The class's label set is bound, and its finish reason's series.
        let label_set = instruments.label_set_for(MODEL, 0, class);
        let mut request = RequestMetrics::start_in(&label_set, params());
        request.observe_output(2.0, 100.5, &first_output("warm"));
        assert!(request.observe_output(3.0, 101.0, &last_output("warm", FinishReason::Stop)));
    }
    for class in &classes {
        let (n, label_set) = allocations(|| instruments.label_set_for(MODEL, 0, class));
        assert_eq!(n, 0, "resolving {class:?} allocated {n} time(s)");
        let (n, mut request) = allocations(|| RequestMetrics::start_in(&label_set, params()));
        assert_eq!(
            n, 0,
            "starting a request of {class:?} allocated {n} time(s)"
        );
        let (first, last) = (first_output("r"), last_output("r", FinishReason::Stop));
        let (n, _) = allocations(|| {
            request.observe_output(2.0, 100.5, &first);
            request.observe_output(3.0, 101.0, &last)
        });
        assert_eq!(n, 0, "a request of {class:?} allocated {n} time(s)");
    }
}

#[test]
fn observing_a_batch_of_live_requests_allocates_nothing_once_warmed() {
    let mut tracker = Tracker::new(instruments());
    warm(tracker.instruments(), FinishReason::Stop);
    let ids: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    for id in &ids {
        let rejections = tracker.start_request(&RequestStart {
            request_id: id.clone(),
            model_name: MODEL.into(),
            engine: 0,
            arrival_time: 100.0,
            prompt_len: 64,
            max_tokens: Some(16),
            n: 1,
            traceparent: None,
            operation_name: None,
            stop_strings: false,
            lora_name: None,
            priority: None,
        });
        assert_eq!(rejections, vec![]);
    }
    let batch = |timestamp: f64, output: fn(&str) -> EngineCoreOutput| OutputBatch {
        engine: 0,
        timestamp,
        received_at: 98.0 + timestamp,
        outputs: ids.iter().map(|id| output(id)).collect(),
    };
    // Warm-up: the first batch sizes the tracker's scratch Vec.
    assert!(tracker.observe_batch(&batch(2.0, first_output)).is_empty());

    let decode = batch(3.0, preempted_output);
    let (n, rejections) = allocations(|| tracker.observe_batch(&decode));
    assert!(rejections.is_empty());
    assert_eq!(tracker.in_flight(), ids.len());
    assert_eq!(n, 0, "Tracker::observe_batch allocated {n} time(s)");

    // A batch in which every request finishes (with a reason whose series exists).
    let last = batch(4.0, |id| last_output(id, FinishReason::Stop));
    let (n, rejections) = allocations(|| tracker.observe_batch(&last));
    assert!(rejections.is_empty());
    assert_eq!(tracker.in_flight(), 0);
    assert_eq!(
        n, 0,
        "a finishing Tracker::observe_batch allocated {n} time(s)"
    );
}

/// A scheduler snapshot with every engine-level field, of `(MODEL, 0)`:
/// every number the proto declares set, and each nested part given here.
fn full_scheduler_stats() -> Record {
    let given = serde_json::json!({
        "type": "scheduler_stats", "model_name": MODEL, "engine": 0,
        "num_running_reqs": 3, "num_waiting_reqs": 5, "kv_cache_usage": 0.4,
        "prefix_cache_queries": 1200, "prefix_cache_hits": 300,
        "received_at": 1_700_000_000.0, "num_skipped_waiting_reqs": 2,
        "num_kv_fetch_reqs_by_stage": {"waiting_to_start": 1, "in_progress": 1, "completed_waiting": 0},
        "external_prefix_cache_queries": 800, "external_prefix_cache_hits": 200,
        "mm_cache_queries": 4, "mm_cache_hits": 1,
        "kv_cache_eviction_events": [{"lifetime_seconds": 12.5, "idle_seconds": 3.0, "reuse_gaps_seconds": [1.0, 2.5]}],
        "perf_stats": {"num_flops_per_gpu": 1.2e13, "num_read_bytes_per_gpu": 1.6e10, "num_write_bytes_per_gpu": 2.0e8},
        "spec_decoding": {"num_drafts": 3, "num_draft_tokens": 9, "num_accepted_tokens": 5, "num_accepted_tokens_per_pos": [3, 2, 0]},
        "running_lora_adapters": ["sql-lora"],
        "waiting_lora_adapters": [],
        // Every KV-connector series too (each bound at its first value).
        "kv_connector_stats": {
            "nixl": {"transfer_duration": [0.02], "post_duration": [0.001], "bytes_transferred": [4096], "num_descriptors": [12], "num_failed_transfers": 1},
            "offloading": {"load_bytes": 1, "load_time": 0.1, "load_sizes": [1], "store_bytes": 1, "store_time": 0.1, "store_sizes": [1], "lookup_sync_delays": [0.001], "lookup_async_delays": [0.01], "allocation_failures": 1, "stores_skipped": 1, "cpu_cache_usage": 0.5, "cpu_cache_write_usage": 0.2, "cpu_cache_read_usage": 0.3},
            "simple_cpu_offload": {"save_outcomes": {"stored": 1, "dropped_cpu_full": 1}, "load_blocks": 2, "used_blocks": 3, "pending_store_blocks": 1},
        },
    });
    serde_json::from_value(common::proto_fields::every_number("SchedulerStats", given))
        .expect("a scheduler_stats record")
}

/// vLLM's engine-level records of a known engine (same LoRA adapters as
/// before) go through bound handles: no allocation. A new set of adapters
/// is a new `lora_requests_info` series, which allocates, as in vLLM.
#[test]
fn engine_level_records_of_a_known_engine_allocate_nothing() {
    let mut tracker = Tracker::new(instruments());
    let records = [
        Record::EngineConfig(EngineConfig {
            model_name: MODEL.into(),
            engine: 0,
            cache_config: [("block_size".to_owned(), "16".to_owned())].into(),
            max_loras: Some(4),
            max_model_len: None,
        }),
        full_scheduler_stats(),
        Record::SleepState(SleepState {
            model_name: MODEL.into(),
            engine: 0,
            level: 1,
        }),
        Record::Operation(Operation {
            operation: OperationKind::Wake,
            duration: 2.5,
        }),
    ];
    for record in &records {
        assert!(tracker.apply(record).is_empty(), "{record:?}");
    }
    for record in &records[1..] {
        let (n, rejections) = allocations(|| tracker.apply(record));
        assert!(rejections.is_empty());
        assert_eq!(n, 0, "applying {record:?} again allocated {n} time(s)");
    }
}

/// The stat-logger plugin's records of a known label set (after its first
/// record, which creates its start-up series) go through bound handles too.
#[test]
fn plugin_records_of_a_known_label_set_allocate_nothing() {
    let mut tracker = Tracker::new(instruments());
    let finished = |reason| FinishedRequest {
        request_id: "r1".into(),
        finish_reason: reason,
        e2e_latency: 1.5,
        queued_time: 0.1,
        prefill_time: 0.2,
        inference_time: 1.3,
        decode_time: 1.1,
        mean_time_per_output_token: 0.04,
        num_prompt_tokens: 116,
        num_generation_tokens: 30,
        num_preemptions: 1,
        num_cached_tokens: 16,
        max_tokens_param: Some(64),
    };
    let step = Record::IterationStats(Box::new(IterationStats {
        model_name: MODEL.into(),
        engine: 0,
        received_at: None,
        num_generation_tokens: 12,
        prompt_token_stats: PromptTokenStats {
            computed: 100,
            local_cache_hit: 16,
            external_kv_transfer: 0,
            cached_tokens: 16,
            total: 116,
        },
        num_preempted_reqs: 1,
        max_num_generation_tokens_iter: vec![30, 64],
        n_params_iter: vec![1, 2],
        time_to_first_tokens_iter: vec![0.25, 0.5],
        inter_token_latencies_iter: vec![0.02, 0.03, 0.04],
        finished_requests: vec![finished(FinishReason::Stop), finished(FinishReason::Abort)],
    }));
    let drops = Record::PluginDrops(PluginDrops { dropped: 5 });
    for record in [&step, &drops] {
        assert!(tracker.apply(record).is_empty(), "{record:?}");
        let (n, rejections) = allocations(|| tracker.apply(record));
        assert!(rejections.is_empty());
        assert_eq!(n, 0, "applying {record:?} again allocated {n} time(s)");
    }
}

#[test]
fn the_counter_counts() {
    // Guards the guard: an allocation inside the window is seen.
    let (n, v) = allocations(|| vec![0u8; 16]);
    assert_eq!(v.len(), 16);
    assert!(n >= 1);

    // And it sees the crate's allocations: the first request of a label set
    // binds the label set's series.
    let instruments = instruments();
    warm(&instruments, FinishReason::Stop);
    let (n, mut request) = allocations(|| RequestMetrics::start(&instruments, MODEL, 1, params()));
    assert!(n >= 1, "binding a new label set should allocate");
    request.finish(101.0, FinishReason::Stop);
}
