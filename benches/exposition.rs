//! Scrape cost at 1, 100 and 1,000 `(model_name, engine)` label sets: the
//! bridge's text 0.0.4 and OpenMetrics expositions, side by side with the
//! baseline, `prometheus-client`'s OpenMetrics encoder (its only format, as
//! vLLM's Rust frontend serves it) over the same requests recorded by the
//! baseline tracker of `benches/lifecycle.rs`.
//!
//! Every label set gets the same two requests (one preempted and finished by
//! `length`, one finished by `stop`), so both sides hold the same per-request
//! series. The crate's exposition also carries its scheduler families
//! (HELP/TYPE only here) and its two self-telemetry counters.
//!
//! After criterion's report it prints, per size, one line:
//! `exposition: label_sets=N text_us=… openmetrics_us=… prometheus_client_us=… gather_us=… bytes=… ratio_text=… ratio_openmetrics=… gather_share=…`
//! (ratios against `prometheus_client`, medians of interleaved rounds;
//! `gather_us` is the SDK collect and `opentelemetry-prometheus`'s
//! families alone, `gather_share` its part of a text scrape, `sdk_collect_us`
//! the SDK's collect alone, of the bridge's own reader), and last, for
//! the largest size, `scrape_memory: label_sets=1000 encoder=… allocations=… bytes=… minor_faults=… resident_growth_kib=…`
//! per encoder (per scrape, over five scrapes after one of its own; the
//! resident growth over all five) and
//! `scrape: label_sets=1000 ours=… prometheus_client=… ms ratio=…`
//! (the text scrape against `prometheus-client`'s).
//! With exemplars on (`--exemplars on`), the same requests recorded again,
//! each linked to a span: `openmetrics_exemplars` is that OpenMetrics
//! scrape, and one line per size compares it with `openmetrics`:
//! `exemplars: label_sets=N off_us=… on_us=… ratio=… bytes_off=… bytes_on=…`.
//! With attribution (`--attribute lora,priority`), the same requests
//! recorded again, each label set's two in two classes: `text_attributed`
//! is that text scrape (vLLM's families with the classes summed away, and
//! the `vllm_class:` families), and one line per size compares it with
//! `text`: `attribution: label_sets=N off_us=… on_us=… ratio=… bytes_off=… bytes_on=…`.
//! Run: `cargo bench --bench exposition`.

#[path = "common/alloc_count.rs"]
mod alloc_count;
#[path = "common/timing.rs"]
mod timing;

#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;

use timing::median;

#[path = "baseline/lifecycle_state.rs"]
mod lifecycle_state;
#[path = "baseline/prometheus_client_tracker.rs"]
mod prometheus_client_tracker;

use std::hint::black_box;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use opentelemetry_prometheus::PrometheusExporter;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, Pipeline, Temporality};

use criterion::Criterion;
use opentelemetry::trace::{SpanId, TraceId};
use vllm_otel_metrics::catalog::DEFAULT_MAX_MODEL_LEN;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::exemplars::TraceLink;
use vllm_otel_metrics::instruments::{Attribution, Instruments, PriorityClasses, RequestClass};
use vllm_otel_metrics::protocol::{
    EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, PrefillStats,
};
use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};

const SIZES: [u32; 3] = [1, 100, 1_000];

/// The outputs of one request finished by `reason`, with one preemption.
fn outputs(reason: FinishReason) -> Vec<(f64, f64, EngineCoreOutput)> {
    let event = |kind, timestamp| EngineCoreEvent {
        kind,
        timestamp,
        reason: None,
    };
    vec![
        (
            10.2,
            100.3,
            EngineCoreOutput {
                request_id: "r".into(),
                new_token_ids: vec![1],
                events: vec![
                    event(EventType::Queued, 10.0),
                    event(EventType::Scheduled, 10.05),
                ],
                prefill_stats: Some(PrefillStats {
                    num_prompt_tokens: 512,
                    num_computed_tokens: 448,
                    num_cached_tokens: 64,
                    num_local_cached_tokens: 64,
                    num_external_cached_tokens: 0,
                }),
                finish_reason: None,
            },
        ),
        (
            10.6,
            100.7,
            EngineCoreOutput {
                request_id: "r".into(),
                new_token_ids: vec![2, 3],
                events: vec![
                    event(EventType::Preempted, 10.3),
                    event(EventType::Scheduled, 10.5),
                ],
                ..Default::default()
            },
        ),
        (
            10.63,
            100.73,
            EngineCoreOutput {
                request_id: "r".into(),
                new_token_ids: vec![4],
                finish_reason: Some(reason),
                ..Default::default()
            },
        ),
    ]
}

/// The bridge's reader behind a handle the bench keeps, to time the SDK's
/// own collect of the very aggregation a scrape reads (a second reader
/// would aggregate everything a second time, doubling the state a scrape
/// walks through, which the command line never does).
#[derive(Debug, Clone)]
struct SharedReader(Arc<PrometheusExporter>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// Both sides with `label_sets` label sets, two requests each.
struct State {
    bridge: PrometheusBridge,
    sdk: SharedReader,
    _instruments: Instruments,
    baseline: prometheus_client_tracker::Metrics,
    /// The same requests, recorded with exemplars on.
    with_exemplars: PrometheusBridge,
    _exemplar_instruments: Instruments,
    /// The same requests, recorded with attribution, in two classes.
    with_classes: PrometheusBridge,
    _class_instruments: Instruments,
}

fn populate(label_sets: u32) -> State {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let sdk = SharedReader(Arc::new(reader));
    let instruments = Instruments::builder().with_reader(sdk.clone()).build();
    let (with_exemplars, reader) = PrometheusBridge::builder().build();
    let exemplar_instruments = Instruments::builder()
        .with_reader(reader)
        .with_exemplars(true)
        .build();
    let with_exemplars = with_exemplars.with_exemplars(exemplar_instruments.exemplars());
    let (with_classes, reader) = PrometheusBridge::builder().build();
    let class_instruments = Instruments::builder()
        .with_reader(reader)
        .with_attribution(
            Attribution::default()
                .with_lora()
                .with_adapter_min_requests(1)
                .with_priority(PriorityClasses::default()),
        )
        .build();
    let mut spans = 0u64;
    let baseline: prometheus_client_tracker::Metrics =
        prometheus_client_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN);
    let params = RequestParams {
        arrival_time: 100.0,
        prompt_len: 512,
        max_tokens: Some(128),
        n: 1,
    };
    for i in 0..label_sets {
        let model = format!("model-{}", i % 10);
        let engine = i / 10;
        let handles = prometheus_client_tracker::Handles::resolve(
            &baseline,
            &prometheus_client_tracker::LabelSet::new(&model, engine),
        );
        for (reason, lora_name, priority) in [
            (FinishReason::Length, "sql-lora", 0),
            (FinishReason::Stop, "chat-lora", 1),
        ] {
            let mut ours = RequestMetrics::start(&instruments, &model, engine, params);
            let class = RequestClass {
                lora_name: Some(lora_name),
                priority: Some(priority),
            };
            let label_set = class_instruments.label_set_for(&model, engine, &class);
            let mut classed = RequestMetrics::start_in(&label_set, params);
            let mut linked = RequestMetrics::start(&exemplar_instruments, &model, engine, params);
            spans += 1;
            linked.link(TraceLink {
                trace_id: TraceId::from(u128::from(spans) << 64 | 0x5eed),
                span_id: SpanId::from(spans),
            });
            let mut theirs = lifecycle_state::Request::start(&handles, params);
            for (batch_timestamp, received_at, output) in &outputs(reason) {
                ours.observe_output(*batch_timestamp, *received_at, output);
                linked.observe_output(*batch_timestamp, *received_at, output);
                classed.observe_output(*batch_timestamp, *received_at, output);
                theirs.observe_output(*batch_timestamp, *received_at, output);
            }
        }
    }
    State {
        bridge,
        sdk,
        _instruments: instruments,
        baseline,
        with_exemplars,
        _exemplar_instruments: exemplar_instruments,
        with_classes,
        _class_instruments: class_instruments,
    }
}

/// Encodes (or only gathers); returns something to keep the work alive.
type Encoder = fn(&State) -> usize;

const ENCODERS: [(&str, Encoder); 7] = [
    ("text", |s| s.bridge.encode(Format::Text).len()),
    ("openmetrics", |s| {
        s.bridge.encode(Format::OpenMetrics).len()
    }),
    ("prometheus_client", |s| s.baseline.encode().len()),
    // The part of a scrape that is the SDK and `opentelemetry-prometheus`:
    // collect the SDK, build the `prometheus` crate's families.
    ("gather", |s| s.bridge.registry().gather().len()),
    // The SDK's collect alone: what any reader pays before converting.
    ("sdk_collect", |s| {
        let mut rm = ResourceMetrics::default();
        s.sdk.collect(&mut rm).unwrap();
        rm.scope_metrics().count()
    }),
    ("openmetrics_exemplars", |s| {
        s.with_exemplars.encode(Format::OpenMetrics).len()
    }),
    ("text_attributed", |s| {
        s.with_classes.encode(Format::Text).len()
    }),
];

/// Microseconds per call of `encode`.
fn time_us(state: &State, encode: Encoder, calls: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..calls {
        black_box(encode(state));
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(calls)
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    // `EXPOSITION_PROFILE=<encoder>`: five scrapes of that encoder at 1,000
    // label sets and nothing else, for a profiler (`valgrind
    // --tool=callgrind` counts instructions, whatever else the machine
    // does); `EXPOSITION_PROFILE_SCRAPES=N` makes it N scrapes (for a
    // sampling profiler, so that the scrapes outweigh the set-up).
    if let Ok(name) = std::env::var("EXPOSITION_PROFILE") {
        let (_, encode) = ENCODERS
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("EXPOSITION_PROFILE: no encoder named {name}"));
        let scrapes = std::env::var("EXPOSITION_PROFILE_SCRAPES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(5);
        let state = populate(SIZES[SIZES.len() - 1]);
        time_us(&state, *encode, scrapes);
        return;
    }
    let states: Vec<(u32, State)> = SIZES.iter().map(|&n| (n, populate(n))).collect();
    let mut criterion = Criterion::default().configure_from_args();
    for (label_sets, state) in &states {
        let mut group = criterion.benchmark_group(format!("exposition_{label_sets}_label_sets"));
        if bench_mode {
            group
                .sample_size(20)
                .warm_up_time(Duration::from_secs(1))
                .measurement_time(Duration::from_secs(3));
        }
        for (name, encode) in ENCODERS {
            group.bench_function(name, |b| b.iter(|| encode(state)));
        }
        group.finish();
    }
    criterion.final_summary();

    let rounds = if bench_mode { 11 } else { 1 };
    let mut scrape = None;
    for (label_sets, state) in &states {
        let calls = if bench_mode {
            (2_000 / label_sets).max(3)
        } else {
            1
        };
        let mut samples = [const { Vec::new() }; ENCODERS.len()];
        for round in 0..rounds {
            for k in 0..ENCODERS.len() {
                let index = (round + k) % ENCODERS.len();
                samples[index].push(time_us(state, ENCODERS[index].1, calls));
            }
        }
        let [text, openmetrics, baseline, gather, sdk_collect, exemplars, attributed] =
            samples.map(|mut s| median(&mut s));
        println!(
            "exposition: label_sets={label_sets} text_us={text:.1} openmetrics_us={openmetrics:.1} prometheus_client_us={baseline:.1} gather_us={gather:.1} sdk_collect_us={sdk_collect:.1} bytes={} ratio_text={:.2} ratio_openmetrics={:.2} gather_share={:.2}",
            state.bridge.encode(Format::Text).len(),
            text / baseline,
            openmetrics / baseline,
            gather / text
        );
        println!(
            "exemplars: label_sets={label_sets} off_us={openmetrics:.1} on_us={exemplars:.1} ratio={:.2} bytes_off={} bytes_on={}",
            exemplars / openmetrics,
            state.bridge.encode(Format::OpenMetrics).len(),
            state.with_exemplars.encode(Format::OpenMetrics).len(),
        );
        println!(
            "attribution: label_sets={label_sets} off_us={text:.1} on_us={attributed:.1} ratio={:.2} bytes_off={} bytes_on={}",
            attributed / text,
            state.bridge.encode(Format::Text).len(),
            state.with_classes.encode(Format::Text).len(),
        );
        scrape = Some((label_sets, text, baseline));
    }
    // Memory traffic per scrape at the largest size, each encoder after a
    // scrape of its own: where time goes that instruction counts miss.
    if let Some((label_sets, state)) = states.last() {
        for (name, encode) in ENCODERS {
            black_box(encode(state));
            let cost = alloc_count::measure(5, || {
                black_box(encode(state));
            });
            println!(
                "scrape_memory: label_sets={label_sets} encoder={name} allocations={:.0} bytes={:.0} minor_faults={:.0} resident_growth_kib={:.0}",
                cost.allocations, cost.bytes, cost.minor_faults, cost.resident_growth_kib
            );
        }
    }
    if let Some((label_sets, ours, baseline)) = scrape {
        println!(
            "scrape: label_sets={label_sets} ours={:.1} prometheus_client={:.1} ms ratio={:.2}",
            ours / 1e3,
            baseline / 1e3,
            ours / baseline
        );
    }
}
