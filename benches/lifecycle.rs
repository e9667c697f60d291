//! Per-request cost of vLLM's lifecycle metrics: one canonical request
//! (512-token prompt, 128 single-token outputs, two preemptions during
//! decode, finished by `length`) recorded through
//!
//! - `otel_sdk`: this crate's `RequestMetrics` as shipped, on the
//!   OpenTelemetry SDK with the catalog's Views and the Prometheus bridge's
//!   reader (what `replay` runs by default);
//! - `sdk_floor`: the same SDK bound-handle calls (same instruments, Views,
//!   reader, values, order) replayed in a straight loop with no lifecycle
//!   logic, i.e. what the SDK itself costs (`baseline/floor.rs`);
//! - `prometheus_client`: the same lifecycle rules on the `prometheus-client`
//!   crate, `Family` handles resolved once per label set (vLLM's Rust
//!   frontend's library; `baseline/prometheus_client_tracker.rs`);
//!
//! plus references: `vllm_rust_atomic` (the `prometheus_client` tracker
//! with vLLM's Rust frontend's lock-free histogram instead of the crate's,
//! `baseline/atomic_histogram.rs`: the anchor), `both_sinks` (the shipped
//! request with the bridge and OTLP on, reading one aggregation as the CLI
//! registers them), `otel_sdk_two_readers` and `sdk_floor_two_readers`
//! (an OTLP `PeriodicReader` besides the bridge's, each aggregating on its
//! own, as a delta OTLP push still does),
//! `otel_unbound` (the SDK recorded with attributes on every call,
//! `baseline/otel_unbound_tracker.rs`) and `rules_only` (the lifecycle rules
//! recording nothing), `otel_sdk_traced` and `otel_sdk_traced_1pct` (the
//! shipped request with its `llm_request` span, every request sampled or
//! one in a hundred, into a batch span processor), `otel_sdk_semconv` (the
//! shipped request with `--semconv gen_ai`: the GenAI histograms recorded
//! besides vLLM's families), `otel_sdk_slo` (the shipped request judged
//! against an SLO, `--slo`: its outcome and goodput counted),
//! `otel_sdk_lookup` and `otel_sdk_attributed` (the shipped request with
//! its label set looked up at its start as the tracker does, without and
//! with `--attribute lora,priority`: the difference is attribution's cost;
//! `_base` and `_other` for the base model and for an adapter without a
//! label of its own). A last section (`baseline/per_observation.rs`) times
//! single observations on each path.
//!
//! Every label set exists before anything is measured. After criterion's
//! report the bench times the variants itself, interleaved in 51 rounds
//! (`otel_sdk` and `sdk_floor` back to back in A-B-B-A order in every
//! round, then `otel_sdk` and `both_sinks` the same way), and prints, next
//! to last,
//! `sinks: one_reader=… both_sinks=… ns/request ratio=…` (both_sinks ÷
//! otel_sdk), `semconv: off=… on=… ns/request ratio=… added=… ns` (the
//! `--semconv gen_ai` cost, also paired A-B-B-A), and last:
//! `lifecycle: otel_sdk=… sdk_floor=… prometheus_client=… ns/request overhead=… ratio=…`
//! (overhead = otel_sdk / sdk_floor, ratio = otel_sdk / prometheus_client,
//! medians of the rounds).
//!
//! Run: `cargo bench --bench lifecycle`. Without `--bench` (as under
//! `cargo test --all-targets`) it runs a handful of iterations only.

#[path = "baseline/atomic_histogram.rs"]
mod atomic_histogram;
#[path = "baseline/floor.rs"]
mod floor;
#[path = "common/idle_otlp.rs"]
mod idle_otlp;
#[path = "baseline/lifecycle_state.rs"]
mod lifecycle_state;
#[path = "baseline/otel_unbound_tracker.rs"]
mod otel_unbound_tracker;
#[path = "baseline/per_observation.rs"]
mod per_observation;
#[path = "baseline/prometheus_client_tracker.rs"]
mod prometheus_client_tracker;
#[path = "common/timing.rs"]
mod timing;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use timing::{median, ns_per_call};
use vllm_otel_metrics::catalog::DEFAULT_MAX_MODEL_LEN;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::export::shared::SharedAggregation;
use vllm_otel_metrics::instruments::exemplars::TraceLink;
use vllm_otel_metrics::instruments::spans::RequestSpans;
use vllm_otel_metrics::instruments::{
    views, Attribution, ExponentialHistograms, Instruments, InstrumentsConfig, LabelSet,
    OtlpHistograms, PriorityClasses, RequestClass, Semconv, Slo, SCOPE_NAME,
};
use vllm_otel_metrics::protocol::{
    EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, PrefillStats,
};
use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
const ENGINE: u32 = 0;
const PROMPT_LEN: u32 = 512;
const OUTPUTS: usize = 128;
/// Outputs (0-based) that carry a `preempted`/`scheduled` pair.
const PREEMPTED_AT: [usize; 2] = [40, 90];

/// One engine output with its batch timestamp and receive time.
type Step = (f64, f64, EngineCoreOutput);

/// The canonical request: its parameters and its 128 outputs, built once.
struct Canonical {
    params: RequestParams,
    steps: Vec<Step>,
}

fn canonical() -> Canonical {
    let arrival_time = 1_700_000_000.0;
    let event = |kind, timestamp| EngineCoreEvent {
        kind,
        timestamp,
        reason: None,
    };
    let mut batch_timestamp = 10.2;
    let steps = (0..OUTPUTS)
        .map(|i| {
            // Engine clock: queued at 10.0, scheduled at 10.05, first token at
            // 10.2; then one token every 18 to 30 ms (across two ITL buckets),
            // and 250 ms more for the outputs that follow a preemption.
            if i > 0 {
                batch_timestamp += 0.018 + 0.004 * (i % 4) as f64;
                if PREEMPTED_AT.contains(&i) {
                    batch_timestamp += 0.25;
                }
            }
            let received_at = arrival_time + 0.25 + (batch_timestamp - 10.2);
            let mut output = EngineCoreOutput {
                request_id: "canonical".into(),
                new_token_ids: vec![1000 + i as u32],
                ..Default::default()
            };
            if i == 0 {
                output.events = vec![
                    event(EventType::Queued, 10.0),
                    event(EventType::Scheduled, 10.05),
                ];
                output.prefill_stats = Some(PrefillStats {
                    num_prompt_tokens: PROMPT_LEN,
                    num_computed_tokens: 448,
                    num_cached_tokens: 64,
                    num_local_cached_tokens: 64,
                    num_external_cached_tokens: 0,
                });
            }
            if PREEMPTED_AT.contains(&i) {
                output.events = vec![
                    event(EventType::Preempted, batch_timestamp - 0.24),
                    event(EventType::Scheduled, batch_timestamp - 0.02),
                ];
            }
            if i == OUTPUTS - 1 {
                output.finish_reason = Some(FinishReason::Length);
            }
            (batch_timestamp, received_at, output)
        })
        .collect();
    Canonical {
        params: RequestParams {
            arrival_time,
            prompt_len: PROMPT_LEN,
            max_tokens: Some(OUTPUTS as u32),
            n: 1,
        },
        steps,
    }
}

/// Which readers a provider has.
#[derive(Clone, Copy, PartialEq)]
enum Readers {
    /// The bridge's alone (`replay` and `serve` without OTLP).
    Bridge,
    /// The bridge's and an OTLP `PeriodicReader`, each aggregating on its
    /// own (what a delta OTLP push still costs).
    BridgeAndOtlpApart,
    /// The bridge and OTLP reading one aggregation, as the CLI registers
    /// them with cumulative OTLP (`SharedAggregation`).
    BothSinks,
    /// The bridge's alone, with the GenAI semantic-convention streams on.
    BridgeSemconv,
    /// The bridge's alone, each request judged against an SLO (`--slo`).
    BridgeSlo,
    /// The bridge's alone, with exemplars (`--exemplars on`).
    BridgeExemplars,
    /// The bridge's alone, each request labelled with its adapter and
    /// priority class (`--attribute lora,priority`).
    BridgeAttributed,
    /// Both sinks as the CLI registers them with `--otlp-histograms
    /// exponential`: OTLP and the bridge read one aggregation in which the
    /// latency histograms are exponential; the bridge's second reader, on a
    /// provider of its own, reads their explicit twins.
    BothSinksExponential,
}

/// One SDK pipeline as the CLI builds it: the catalog's Views, the
/// [`Readers`], the crate's instruments on its meter, one label set bound
/// for `RequestMetrics` and the same label set bound for the floor.
struct Sdk {
    provider: SdkMeterProvider,
    bridge: PrometheusBridge,
    label_set: LabelSet,
    floor: floor::Handles,
    /// What the label set belongs to, kept as a frontend keeps it.
    _instruments: Instruments,
}

impl Sdk {
    fn new(readers: Readers, runtime: &tokio::runtime::Runtime) -> Sdk {
        if readers == Readers::BothSinksExponential {
            return Sdk::exponential(runtime);
        }
        let mut config = InstrumentsConfig::default();
        if let Readers::BridgeSemconv = readers {
            config.semconv = Semconv::GenAi;
        }
        if let Readers::BridgeSlo = readers {
            let slo = Slo::from_json(r#"{"ttft": 0.5, "tpot": 0.05, "e2e": 30}"#).unwrap();
            config.slo = Some(std::sync::Arc::new(slo));
        }
        config.exemplars = readers == Readers::BridgeExemplars;
        if let Readers::BridgeAttributed = readers {
            let attribution = Attribution::default()
                .with_lora()
                .with_adapter_min_requests(1)
                .with_priority(PriorityClasses::default());
            config.attribution = Some(attribution);
        }
        let (bridge, reader) = PrometheusBridge::builder().build();
        let mut builder = SdkMeterProvider::builder().with_view(views(config.clone()));
        if matches!(
            readers,
            Readers::Bridge
                | Readers::BridgeSemconv
                | Readers::BridgeSlo
                | Readers::BridgeExemplars
                | Readers::BridgeAttributed
        ) {
            builder = builder.with_reader(reader);
        } else {
            let push = idle_otlp::idle_push(runtime);
            builder = match readers {
                Readers::BothSinks => builder.with_reader(
                    SharedAggregation::try_new(push.reader, reader)
                        .expect("cumulative OTLP and the bridge share"),
                ),
                _ => builder.with_reader(reader).with_reader(push.reader),
            };
        }
        let provider = builder.build();
        let instruments = Instruments::from_meter(&provider.meter(SCOPE_NAME), config);
        if readers == Readers::BridgeAttributed {
            // Every adapter slot taken, `LABELLED` first, so that any other
            // adapter is `other`; every class the variants use is bound.
            for n in 0..Attribution::default().max_adapters() {
                let name = if n == 0 {
                    LABELLED.to_owned()
                } else {
                    format!("tenant-{n}")
                };
                let class = RequestClass {
                    lora_name: Some(&name),
                    priority: Some(1),
                };
                instruments.label_set_for(MODEL, ENGINE, &class);
            }
            for class in [BASE, OTHER] {
                instruments.label_set_for(MODEL, ENGINE, &class);
            }
        }
        Sdk::on(provider, instruments, bridge)
    }

    /// The label set bound for both the tracker and the floor, on
    /// `provider`'s meter.
    fn on(provider: SdkMeterProvider, instruments: Instruments, bridge: PrometheusBridge) -> Sdk {
        let meter = provider.meter(SCOPE_NAME);
        Sdk {
            label_set: instruments.label_set(MODEL, ENGINE),
            floor: floor::Handles::bind(&meter, MODEL, ENGINE),
            _instruments: instruments,
            bridge,
            provider,
        }
    }
}

impl Sdk {
    /// [`Readers::BothSinksExponential`], built as the CLI builds it.
    fn exponential(runtime: &tokio::runtime::Runtime) -> Sdk {
        let (bridge, reader) = PrometheusBridge::builder().build();
        let push = idle_otlp::idle_push(runtime);
        let shared = SharedAggregation::try_new(push.reader, reader)
            .expect("cumulative OTLP and the bridge share");
        let instruments = Instruments::builder()
            .with_otlp_histograms(OtlpHistograms::Exponential(ExponentialHistograms::DEFAULT))
            .with_reader(shared)
            .with_explicit_histogram_reader(bridge.latency_reader())
            .build();
        let provider = instruments.meter_provider().unwrap().clone();
        Sdk::on(provider, instruments, bridge)
    }
}

/// Everything the variants record into; every label set already exists.
/// Span pipelines for the traced variants: the SDK's batch span processor
/// over an exporter that discards (the cost measured is making and queueing
/// the span), every request sampled, or one in a hundred.
struct Traced {
    all: RequestSpans,
    one_percent: RequestSpans,
    _providers: [SdkTracerProvider; 2],
}

#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

impl Traced {
    fn new() -> Traced {
        use opentelemetry_sdk::trace::Sampler;
        let provider = |sampler: Sampler| {
            SdkTracerProvider::builder()
                .with_batch_exporter(Discard)
                .with_sampler(sampler)
                .build()
        };
        let all = provider(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)));
        let one_percent = provider(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            0.01,
        ))));
        Traced {
            all: RequestSpans::new(&all),
            one_percent: RequestSpans::new(&one_percent),
            _providers: [all, one_percent],
        }
    }
}

struct Setup {
    canonical: Canonical,
    script: floor::Script,
    sdk: Sdk,
    sdk_two_readers: Sdk,
    sdk_both_sinks: Sdk,
    sdk_semconv: Sdk,
    sdk_slo: Sdk,
    sdk_exemplars: Sdk,
    /// With `--attribute lora,priority`.
    sdk_attributed: Sdk,
    /// Requests `otel_sdk_exemplars` ended, for its placement every 64.
    exemplar_requests: std::cell::Cell<u64>,
    sdk_exponential: Sdk,
    traced: Traced,
    pc_handles: prometheus_client_tracker::Handles,
    atomic_handles: prometheus_client_tracker::Handles<atomic_histogram::AtomicHistogram>,
    unbound: otel_unbound_tracker::Metrics,
    unbound_attributes: otel_unbound_tracker::Attributes,
    /// Runs nothing; kept alive for the OTLP reader's sake.
    _runtime: tokio::runtime::Runtime,
}

impl Setup {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let pc: prometheus_client_tracker::Metrics =
            prometheus_client_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN);
        let atomic = prometheus_client_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN);
        let labels = prometheus_client_tracker::LabelSet::new(MODEL, ENGINE);
        let canonical = canonical();
        let setup = Setup {
            script: floor::Script::of(canonical.params, &canonical.steps),
            canonical,
            sdk: Sdk::new(Readers::Bridge, &runtime),
            sdk_two_readers: Sdk::new(Readers::BridgeAndOtlpApart, &runtime),
            sdk_both_sinks: Sdk::new(Readers::BothSinks, &runtime),
            sdk_semconv: Sdk::new(Readers::BridgeSemconv, &runtime),
            sdk_slo: Sdk::new(Readers::BridgeSlo, &runtime),
            sdk_exemplars: Sdk::new(Readers::BridgeExemplars, &runtime),
            sdk_attributed: Sdk::new(Readers::BridgeAttributed, &runtime),
            exemplar_requests: std::cell::Cell::new(0),
            sdk_exponential: Sdk::new(Readers::BothSinksExponential, &runtime),
            traced: Traced::new(),
            pc_handles: prometheus_client_tracker::Handles::resolve(&pc, &labels),
            atomic_handles: prometheus_client_tracker::Handles::resolve(&atomic, &labels),
            unbound: otel_unbound_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN),
            unbound_attributes: otel_unbound_tracker::Attributes::new(MODEL, ENGINE),
            _runtime: runtime,
        };
        // Warm: create every series (the finish reason's included) before timing.
        for variant in VARIANTS.iter().chain(&REFERENCES) {
            for _ in 0..3 {
                (variant.run)(&setup);
            }
        }
        setup
    }
}

fn shipped_request(label_set: &LabelSet, c: &Canonical) {
    traced_request(label_set, None, c);
}

/// The shipped request, with its span when `spans` are given.
fn traced_request(label_set: &LabelSet, spans: Option<&RequestSpans>, c: &Canonical) {
    let mut request = RequestMetrics::start_in(label_set, c.params);
    if let Some(spans) = spans {
        request.trace(spans, "canonical", MODEL, ENGINE, None);
    }
    for (batch_timestamp, received_at, output) in &c.steps {
        request.observe_output(*batch_timestamp, *received_at, black_box(output));
    }
    black_box(request.is_terminated());
}

fn otel_sdk(s: &Setup) {
    shipped_request(&s.sdk.label_set, &s.canonical);
}

fn otel_sdk_traced(s: &Setup) {
    traced_request(&s.sdk.label_set, Some(&s.traced.all), &s.canonical);
}

fn otel_sdk_traced_1pct(s: &Setup) {
    traced_request(&s.sdk.label_set, Some(&s.traced.one_percent), &s.canonical);
}

fn otel_sdk_two_readers(s: &Setup) {
    shipped_request(&s.sdk_two_readers.label_set, &s.canonical);
}

fn both_sinks(s: &Setup) {
    shipped_request(&s.sdk_both_sinks.label_set, &s.canonical);
}

fn otel_sdk_semconv(s: &Setup) {
    shipped_request(&s.sdk_semconv.label_set, &s.canonical);
}

/// The shipped request with exemplars on, linked to a span of the
/// frontend's; every 64 requests the pending ones are placed in their
/// buckets, as the pipeline's one-second tick does at 64 requests/s per
/// label set (the placement is counted here too, on the same thread).
fn otel_sdk_exemplars(s: &Setup) {
    let link = TraceLink {
        trace_id: TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c_u128),
        span_id: SpanId::from(0xb7ad_6b71_6920_3331_u64),
    };
    let mut request = RequestMetrics::start_in(&s.sdk_exemplars.label_set, s.canonical.params);
    request.link(link);
    for (batch_timestamp, received_at, output) in &s.canonical.steps {
        request.observe_output(*batch_timestamp, *received_at, black_box(output));
    }
    black_box(request.is_terminated());
    let ended = s.exemplar_requests.get() + 1;
    s.exemplar_requests.set(ended);
    if ended.is_multiple_of(64) {
        if let Some(exemplars) = s.sdk_exemplars._instruments.exemplars() {
            exemplars.place_pending();
        }
    }
}

/// The shipped request, its label set looked up by `(model_name, engine)`
/// at its start, as the tracker does for every request record.
fn otel_sdk_lookup(s: &Setup) {
    let label_set = s.sdk._instruments.label_set(MODEL, ENGINE);
    shipped_request(&label_set, &s.canonical);
}

/// The adapter with a label of its own the attributed variants use.
const LABELLED: &str = "sql-lora";
/// A request of the base model, at vLLM's default priority.
const BASE: RequestClass<'static> = RequestClass {
    lora_name: None,
    priority: None,
};
/// A request of an adapter without a label (`lora_name="other"`: every
/// slot is taken).
const OTHER: RequestClass<'static> = RequestClass {
    lora_name: Some("tenant-without-a-label"),
    priority: Some(-3),
};

/// [`otel_sdk_lookup`] with `--attribute lora,priority`: the label set
/// looked up with the request's class (an adapter with a label of its own,
/// priority 1), as the tracker does; the difference is attribution's cost
/// per request.
fn otel_sdk_attributed(s: &Setup) {
    let class = RequestClass {
        lora_name: Some(LABELLED),
        priority: Some(1),
    };
    attributed_request(s, &class);
}

/// [`otel_sdk_attributed`] for a request of the base model
/// (`lora_name="none"`).
fn otel_sdk_attributed_base(s: &Setup) {
    attributed_request(s, &BASE);
}

/// [`otel_sdk_attributed`] for a request of an adapter without a label
/// (`lora_name="other"`).
fn otel_sdk_attributed_other(s: &Setup) {
    attributed_request(s, &OTHER);
}

fn attributed_request(s: &Setup, class: &RequestClass<'_>) {
    let instruments = &s.sdk_attributed._instruments;
    let label_set = instruments.label_set_for(MODEL, ENGINE, black_box(class));
    shipped_request(&label_set, &s.canonical);
}

fn otel_sdk_slo(s: &Setup) {
    shipped_request(&s.sdk_slo.label_set, &s.canonical);
}

fn both_sinks_exponential(s: &Setup) {
    shipped_request(&s.sdk_exponential.label_set, &s.canonical);
}

fn sdk_floor(s: &Setup) {
    floor::sdk_floor(&s.sdk.floor, &s.script);
}

fn sdk_floor_two_readers(s: &Setup) {
    floor::sdk_floor(&s.sdk_two_readers.floor, &s.script);
}

/// Runs the canonical request through a baseline's request.
fn baseline_request<S: lifecycle_state::Sink>(
    mut request: lifecycle_state::Request<S>,
    c: &Canonical,
) {
    for (batch_timestamp, received_at, output) in &c.steps {
        request.observe_output(*batch_timestamp, *received_at, black_box(output));
    }
    black_box(&request);
}

fn prometheus_client(s: &Setup) {
    let request = lifecycle_state::Request::start(&s.pc_handles, s.canonical.params);
    baseline_request(request, &s.canonical);
}

fn vllm_rust_atomic(s: &Setup) {
    let request = lifecycle_state::Request::start(&s.atomic_handles, s.canonical.params);
    baseline_request(request, &s.canonical);
}

fn otel_unbound(s: &Setup) {
    let request = otel_unbound_tracker::unbound_request(
        &s.unbound,
        &s.unbound_attributes,
        s.canonical.params,
    );
    baseline_request(request, &s.canonical);
}

fn rules_only(s: &Setup) {
    floor::rules_only(s.canonical.params, &s.canonical.steps);
}

struct Variant {
    name: &'static str,
    run: fn(&Setup),
}

/// The summary line's variants; the first two are timed as a pair.
const VARIANTS: [Variant; 3] = [
    Variant {
        name: "otel_sdk",
        run: otel_sdk,
    },
    Variant {
        name: "sdk_floor",
        run: sdk_floor,
    },
    Variant {
        name: "prometheus_client",
        run: prometheus_client,
    },
];

/// Reference points, timed alongside but not part of the summary line.
const REFERENCES: [Variant; 16] = [
    Variant {
        name: "vllm_rust_atomic",
        run: vllm_rust_atomic,
    },
    Variant {
        name: "otel_sdk_semconv",
        run: otel_sdk_semconv,
    },
    Variant {
        name: "otel_sdk_slo",
        run: otel_sdk_slo,
    },
    Variant {
        name: "otel_sdk_exemplars",
        run: otel_sdk_exemplars,
    },
    Variant {
        name: "otel_sdk_lookup",
        run: otel_sdk_lookup,
    },
    Variant {
        name: "otel_sdk_attributed",
        run: otel_sdk_attributed,
    },
    Variant {
        name: "otel_sdk_attributed_base",
        run: otel_sdk_attributed_base,
    },
    Variant {
        name: "otel_sdk_attributed_other",
        run: otel_sdk_attributed_other,
    },
    Variant {
        name: "both_sinks",
        run: both_sinks,
    },
    Variant {
        name: "both_sinks_exponential",
        run: both_sinks_exponential,
    },
    Variant {
        name: "otel_sdk_two_readers",
        run: otel_sdk_two_readers,
    },
    Variant {
        name: "sdk_floor_two_readers",
        run: sdk_floor_two_readers,
    },
    Variant {
        name: "otel_unbound",
        run: otel_unbound,
    },
    Variant {
        name: "rules_only",
        run: rules_only,
    },
    Variant {
        name: "otel_sdk_traced",
        run: otel_sdk_traced,
    },
    Variant {
        name: "otel_sdk_traced_1pct",
        run: otel_sdk_traced_1pct,
    },
];

/// `name{labels}` → value of every counter and histogram sample of a text
/// exposition.
fn totals(exposition: &str) -> BTreeMap<String, f64> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(key, _)| {
            let name = key.split('{').next().unwrap_or(key);
            name.ends_with("_count")
                || name.ends_with("_sum")
                || name.ends_with("_total")
                || name.ends_with("_bucket")
        })
        .map(|(key, value)| (normalized(key), value.parse().expect("a number")))
        .collect()
}

/// `name{labels}` with the labels sorted (the encoders order `le` differently;
/// no label value here contains a comma).
fn normalized(key: &str) -> String {
    match key.split_once('{') {
        Some((name, labels)) => {
            let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
            labels.sort_unstable();
            format!("{name}{{{}}}", labels.join(","))
        }
        None => key.to_owned(),
    }
}

/// The floor makes exactly the SDK calls the crate makes (the same
/// exposition, byte for byte), and the `prometheus-client` baseline records
/// what the crate records (same series, same totals).
fn check_equivalence(runtime: &tokio::runtime::Runtime) {
    let c = canonical();
    let crate_side = Sdk::new(Readers::Bridge, runtime);
    let floor_side = Sdk::new(Readers::Bridge, runtime);
    let script = floor::Script::of(c.params, &c.steps);
    let pc: prometheus_client_tracker::Metrics =
        prometheus_client_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN);
    let atomic = prometheus_client_tracker::Metrics::<atomic_histogram::AtomicHistogram>::new(
        DEFAULT_MAX_MODEL_LEN,
    );
    let labels = prometheus_client_tracker::LabelSet::new(MODEL, ENGINE);
    let handles = prometheus_client_tracker::Handles::resolve(&pc, &labels);
    let atomic_handles = prometheus_client_tracker::Handles::resolve(&atomic, &labels);
    for _ in 0..3 {
        let mut a = RequestMetrics::start_in(&crate_side.label_set, c.params);
        let mut b = lifecycle_state::Request::start(&handles, c.params);
        let mut d = lifecycle_state::Request::start(&atomic_handles, c.params);
        for (ts, received_at, output) in &c.steps {
            a.observe_output(*ts, *received_at, output);
            b.observe_output(*ts, *received_at, output);
            d.observe_output(*ts, *received_at, output);
        }
        assert!(a.is_terminated());
        floor::sdk_floor(&floor_side.floor, &script);
    }
    let ours_text = crate_side.bridge.encode(Format::Text);
    assert_eq!(
        ours_text,
        floor_side.bridge.encode(Format::Text),
        "the floor's SDK calls differ from the crate's"
    );
    // Same lines; a family's series come in its hash map's order.
    let sorted_lines = |text: String| {
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.sort_unstable();
        lines
    };
    assert_eq!(
        sorted_lines(atomic.encode()),
        sorted_lines(pc.encode()),
        "the atomic histogram records other values than prometheus-client's"
    );
    let ours = totals(&ours_text);
    let baseline = totals(&pc.encode());
    // vLLM's families only (not this crate's self-telemetry), and not the
    // per-batch iteration tokens, which are not part of a request's lifecycle.
    let lifecycle = |map: BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        map.into_iter()
            .filter(|(k, _)| k.starts_with("vllm:") && !k.starts_with("vllm:iteration_tokens"))
            .collect()
    };
    let (ours, baseline) = (lifecycle(ours), lifecycle(baseline));
    let only_ours: Vec<_> = ours.keys().filter(|k| !baseline.contains_key(*k)).collect();
    let only_baseline: Vec<_> = baseline.keys().filter(|k| !ours.contains_key(*k)).collect();
    assert!(
        only_ours.is_empty() && only_baseline.is_empty(),
        "the baseline records other series than the crate: only the crate's {only_ours:?}, only the baseline's {only_baseline:?}"
    );
    for (key, value) in &ours {
        let other = baseline[key];
        assert!(
            (value - other).abs() <= 1e-6 * value.abs().max(1.0),
            "{key}: crate {value}, baseline {other}"
        );
    }
    let preemptions =
        format!("vllm:request_num_preemptions_sum{{engine=\"{ENGINE}\",model_name=\"{MODEL}\"}}");
    assert_eq!(
        ours[&preemptions], 6.0,
        "two preemptions in each of 3 requests"
    );
    for sdk in [crate_side, floor_side] {
        sdk.provider.shutdown().unwrap();
    }
}

/// Nanoseconds per request of `variant` over `requests` requests.
fn time_ns(setup: &Setup, variant: &Variant, requests: u32) -> f64 {
    ns_per_call(requests, |_| (variant.run)(setup))
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let setup = Setup::new();
    check_equivalence(&setup._runtime);
    // `LIFECYCLE_PROFILE=<variant>`: run that variant 10,000 times and
    // nothing else, for a profiler (`valgrind --tool=callgrind` counts
    // instructions, whatever else the machine does).
    if let Ok(name) = std::env::var("LIFECYCLE_PROFILE") {
        let variant = VARIANTS
            .iter()
            .chain(&REFERENCES)
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("LIFECYCLE_PROFILE: no variant named {name}"));
        time_ns(&setup, variant, 10_000);
        return;
    }

    let mut criterion = Criterion::default().configure_from_args();
    {
        let mut group = criterion.benchmark_group("lifecycle");
        if bench_mode {
            group
                .warm_up_time(Duration::from_secs(2))
                .measurement_time(Duration::from_secs(5));
        }
        for variant in VARIANTS.iter().chain(&REFERENCES) {
            group.bench_function(variant.name, |b| b.iter(|| (variant.run)(&setup)));
        }
        group.finish();
    }
    criterion.final_summary();

    // Our own timing, in rounds. Each round times the two variants of the
    // overhead back to back in A-B-B-A order, so that both see the same
    // machine state and a drift within the round cancels out, then the two
    // of the sinks line the same way; then every other variant, in an order
    // rotating per round.
    let (rounds, per_round) = if bench_mode { (51, 2000) } else { (3, 4) };
    let all: Vec<&Variant> = VARIANTS.iter().chain(&REFERENCES).collect();
    let position = |name: &str| {
        let index = all.iter().position(|v| v.name == name);
        index.unwrap_or_else(|| panic!("no variant named {name}"))
    };
    for variant in &all {
        time_ns(&setup, variant, per_round / 4 + 1);
    }
    let paired = |a: usize, b: usize| {
        let half = per_round / 2;
        let [a1, b1] = [a, b].map(|i| time_ns(&setup, all[i], half));
        let [b2, a2] = [b, a].map(|i| time_ns(&setup, all[i], half));
        ((a1 + a2) / 2.0, (b1 + b2) / 2.0)
    };
    let (otel_sdk, sdk_floor, both_sinks) = (0, 1, position("both_sinks"));
    let semconv = position("otel_sdk_semconv");
    let exponential = position("both_sinks_exponential");
    let mut samples = vec![Vec::with_capacity(rounds); all.len()];
    let mut exponential_off = Vec::with_capacity(rounds);
    let mut one_reader = Vec::with_capacity(rounds);
    let mut semconv_off = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let (a, b) = paired(otel_sdk, sdk_floor);
        samples[otel_sdk].push(a);
        samples[sdk_floor].push(b);
        let (a, b) = paired(otel_sdk, both_sinks);
        one_reader.push(a);
        samples[both_sinks].push(b);
        let (a, b) = paired(otel_sdk, semconv);
        semconv_off.push(a);
        samples[semconv].push(b);
        let (a, b) = paired(both_sinks, exponential);
        exponential_off.push(a);
        samples[exponential].push(b);
        let others: Vec<usize> = (2..all.len())
            .filter(|&i| ![both_sinks, semconv, exponential].contains(&i))
            .collect();
        for k in 0..others.len() {
            let index = others[(round + k) % others.len()];
            samples[index].push(time_ns(&setup, all[index], per_round));
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let one_reader = median(&mut one_reader);
    let semconv_off = median(&mut semconv_off);
    let exponential_off = median(&mut exponential_off);
    let m = |name: &str| medians[position(name)];
    let (rounds, ops) = if bench_mode { (11, 200_000) } else { (3, 100) };
    let per_observation = per_observation::measure(
        rounds,
        ops,
        [&setup.sdk.provider, &setup.sdk_two_readers.provider],
    )
    .iter()
    .map(|(name, ns)| format!("{name}={ns:.1}"))
    .collect::<Vec<_>>()
    .join(" ");
    println!("per-observation: {per_observation} ns/op");
    println!(
        "references: otel_sdk_two_readers={:.1} sdk_floor_two_readers={:.1} otel_unbound={:.1} rules_only={:.1} otel_sdk_traced={:.1} otel_sdk_traced_1pct={:.1} ns/request sdk_calls={}",
        m("otel_sdk_two_readers"),
        m("sdk_floor_two_readers"),
        m("otel_unbound"),
        m("rules_only"),
        m("otel_sdk_traced"),
        m("otel_sdk_traced_1pct"),
        setup.script.len()
    );
    println!(
        "anchor: vllm_rust_atomic={:.1} prometheus_client={:.1} ns/request otel_sdk/vllm_rust_atomic={:.2}",
        m("vllm_rust_atomic"),
        m("prometheus_client"),
        m("otel_sdk") / m("vllm_rust_atomic")
    );
    println!(
        "sinks: one_reader={:.1} both_sinks={:.1} ns/request ratio={:.2}",
        one_reader,
        m("both_sinks"),
        m("both_sinks") / one_reader
    );
    println!(
        "semconv: off={:.1} on={:.1} ns/request ratio={:.2} added={:.1} ns",
        semconv_off,
        m("otel_sdk_semconv"),
        m("otel_sdk_semconv") / semconv_off,
        m("otel_sdk_semconv") - semconv_off
    );
    println!(
        "otlp_histograms: explicit={:.1} exponential={:.1} ns/request ratio={:.2} added={:.1} ns",
        exponential_off,
        m("both_sinks_exponential"),
        m("both_sinks_exponential") / exponential_off,
        m("both_sinks_exponential") - exponential_off
    );
    println!(
        "lifecycle: otel_sdk={:.1} sdk_floor={:.1} prometheus_client={:.1} ns/request overhead={:.2} ratio={:.2}",
        m("otel_sdk"),
        m("sdk_floor"),
        m("prometheus_client"),
        m("otel_sdk") / m("sdk_floor"),
        m("otel_sdk") / m("prometheus_client")
    );
}
