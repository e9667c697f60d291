//! Per-request cost of vLLM's lifecycle metrics: one canonical request
//! (512-token prompt, 128 single-token outputs, two preemptions during
//! decode, finished by `length`) recorded through
//!
//! - `otel_bound`: this crate's `RequestMetrics` as shipped, its `Instruments`
//!   read by the Prometheus bridge (what the CLI builds, without OTLP);
//! - `prometheus_client`: the same tracker on the `prometheus-client` crate,
//!   `Family` handles resolved once per label set (the baseline,
//!   `baseline/prometheus_client_tracker.rs`);
//! - `otel_unbound`: the same families as instruments of the official
//!   OpenTelemetry SDK with the same explicit-bucket Views, recorded with
//!   attributes on every call (`baseline/otel_unbound_tracker.rs`);
//!
//! plus four references: `sdk_bound` (the same SDK instruments through its
//! bound handles, resolved once per label set: how the crate recorded before
//! it kept its own aggregation), `otel_bound_two_readers` (the crate with a
//! second reader, as when OTLP export is on; readers collect on their own
//! schedule, so recording should not notice) and two floors
//! (`baseline/floor.rs`): the same lifecycle rules recording into raw atomics
//! or raw mutex-guarded histograms. A last section
//! (`baseline/per_observation.rs`) times single observations on each path.
//!
//! Every label set exists before anything is measured. After criterion's
//! report the bench times the variants itself, interleaved in rounds
//! (`otel_bound` and `prometheus_client` back to back in A-B-B-A order in
//! every round), and prints one summary line:
//! `lifecycle: otel_bound=… prometheus_client=… otel_unbound=… ns/request ratio=…`
//! (ratio = otel_bound / prometheus_client, medians of the rounds).
//!
//! Run: `cargo bench --bench lifecycle`. Without `--bench` (as under
//! `cargo test --all-targets`) it runs a handful of iterations only.

#[path = "baseline/floor.rs"]
mod floor;
#[path = "baseline/lifecycle_state.rs"]
mod lifecycle_state;
#[path = "baseline/otel_unbound_tracker.rs"]
mod otel_unbound_tracker;
#[path = "baseline/per_observation.rs"]
mod per_observation;
#[path = "baseline/prometheus_client_tracker.rs"]
mod prometheus_client_tracker;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use vllm_otel_metrics::catalog::DEFAULT_MAX_MODEL_LEN;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::{Instruments, LabelSet};
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

/// Everything the variants record into; every label set already exists.
struct Setup {
    canonical: Canonical,
    /// The scrape side, as the CLI keeps it (recording never touches it).
    _bridge: PrometheusBridge,
    /// The label set's handles, resolved once (as the baseline's are).
    label_set: LabelSet,
    /// What the label sets belong to, kept as a frontend keeps them.
    _instruments: [Instruments; 2],
    /// The same with a second reader (as with `--otlp-endpoint`); readers
    /// collect on their own schedule, so recording should not notice.
    label_set_two_readers: LabelSet,
    pc_handles: prometheus_client_tracker::Handles,
    unbound: otel_unbound_tracker::Metrics,
    unbound_attributes: otel_unbound_tracker::Attributes,
    sdk_bound: otel_unbound_tracker::BoundHandles,
    floor_atomics: floor::Instruments<floor::AtomicHistogram>,
    floor_mutex: floor::Instruments<floor::MutexHistogram>,
}

impl Setup {
    fn new() -> Self {
        let (bridge, reader) = PrometheusBridge::builder().build();
        let pc = prometheus_client_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN);
        let unbound = otel_unbound_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN);
        let unbound_attributes = otel_unbound_tracker::Attributes::new(MODEL, ENGINE);
        let instruments = Instruments::builder().with_reader(reader).build();
        let instruments_two_readers = {
            let (_, first) = PrometheusBridge::builder().build();
            let (_, second) = PrometheusBridge::builder().build();
            Instruments::builder()
                .with_reader(first)
                .with_reader(second)
                .build()
        };
        let setup = Setup {
            canonical: canonical(),
            _bridge: bridge,
            label_set: instruments.label_set(MODEL, ENGINE),
            label_set_two_readers: instruments_two_readers.label_set(MODEL, ENGINE),
            _instruments: [instruments, instruments_two_readers],
            pc_handles: prometheus_client_tracker::Handles::resolve(
                &pc,
                &prometheus_client_tracker::LabelSet::new(MODEL, ENGINE),
            ),
            sdk_bound: otel_unbound_tracker::BoundHandles::new(&unbound, &unbound_attributes),
            unbound,
            unbound_attributes,
            floor_atomics: floor::Instruments::new(DEFAULT_MAX_MODEL_LEN),
            floor_mutex: floor::Instruments::new(DEFAULT_MAX_MODEL_LEN),
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

fn bound_request(label_set: &LabelSet, c: &Canonical) {
    let mut request = RequestMetrics::start_in(label_set, c.params);
    for (batch_timestamp, received_at, output) in &c.steps {
        request.observe_output(*batch_timestamp, *received_at, black_box(output));
    }
    black_box(request.is_terminated());
}

fn otel_bound(s: &Setup) {
    bound_request(&s.label_set, &s.canonical);
}

fn otel_bound_two_readers(s: &Setup) {
    bound_request(&s.label_set_two_readers, &s.canonical);
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

fn otel_unbound(s: &Setup) {
    let request = otel_unbound_tracker::unbound_request(
        &s.unbound,
        &s.unbound_attributes,
        s.canonical.params,
    );
    baseline_request(request, &s.canonical);
}

fn sdk_bound(s: &Setup) {
    let request = lifecycle_state::Request::start(&s.sdk_bound, s.canonical.params);
    baseline_request(request, &s.canonical);
}

fn rules_only(s: &Setup) {
    floor::rules_only(s.canonical.params, &s.canonical.steps);
}

fn floor_atomics(s: &Setup) {
    floor::request(&s.floor_atomics, s.canonical.params, &s.canonical.steps);
}

fn floor_mutex(s: &Setup) {
    floor::request(&s.floor_mutex, s.canonical.params, &s.canonical.steps);
}

struct Variant {
    name: &'static str,
    run: fn(&Setup),
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "otel_bound",
        run: otel_bound,
    },
    Variant {
        name: "prometheus_client",
        run: prometheus_client,
    },
    Variant {
        name: "otel_unbound",
        run: otel_unbound,
    },
];

/// Reference points, timed alongside but not part of the summary line.
const REFERENCES: [Variant; 5] = [
    Variant {
        name: "sdk_bound",
        run: sdk_bound,
    },
    Variant {
        name: "otel_bound_two_readers",
        run: otel_bound_two_readers,
    },
    Variant {
        name: "floor_atomics",
        run: floor_atomics,
    },
    Variant {
        name: "floor_mutex",
        run: floor_mutex,
    },
    Variant {
        name: "rules_only",
        run: rules_only,
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

/// The baseline records what the crate records: same series, same totals.
fn check_equivalence() {
    let c = canonical();
    let (bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder().with_reader(reader).build();
    let pc = prometheus_client_tracker::Metrics::new(DEFAULT_MAX_MODEL_LEN);
    let handles = prometheus_client_tracker::Handles::resolve(
        &pc,
        &prometheus_client_tracker::LabelSet::new(MODEL, ENGINE),
    );
    for _ in 0..3 {
        let mut a = RequestMetrics::start(&instruments, MODEL, ENGINE, c.params);
        let mut b = lifecycle_state::Request::start(&handles, c.params);
        for (ts, received_at, output) in &c.steps {
            a.observe_output(*ts, *received_at, output);
            b.observe_output(*ts, *received_at, output);
        }
        assert!(a.is_terminated());
    }
    let ours = totals(&bridge.encode(Format::Text));
    let baseline = totals(&pc.encode());
    // vLLM's families only (not this crate's self-telemetry), and not the
    // per-batch iteration tokens, which are not part of a request's lifecycle.
    let lifecycle = |map: BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        map.into_iter()
            .filter(|(k, _)| k.starts_with("vllm:") && !k.starts_with("vllm:iteration_tokens"))
            .collect()
    };
    let (ours, baseline) = (lifecycle(ours), lifecycle(baseline));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        baseline.keys().collect::<Vec<_>>(),
        "the baseline records other series than the crate"
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
}

/// Nanoseconds per request of `variant` over `requests` requests.
fn time_ns(setup: &Setup, variant: &Variant, requests: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..requests {
        (variant.run)(setup);
    }
    start.elapsed().as_nanos() as f64 / f64::from(requests)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    check_equivalence();
    let setup = Setup::new();

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
    // ratio back to back in A-B-B-A order, so that both see the same machine
    // state and a drift within the round cancels out; then every other
    // variant, in an order rotating per round.
    let (rounds, per_round) = if bench_mode { (25, 2000) } else { (3, 4) };
    let all: Vec<&Variant> = VARIANTS.iter().chain(&REFERENCES).collect();
    for variant in &all {
        time_ns(&setup, variant, per_round / 4 + 1);
    }
    let mut samples = vec![Vec::with_capacity(rounds); all.len()];
    for round in 0..rounds {
        let half = per_round / 2;
        let [a, b] = [0, 1].map(|i| time_ns(&setup, all[i], half));
        let [b2, a2] = [1, 0].map(|i| time_ns(&setup, all[i], half));
        samples[0].push((a + a2) / 2.0);
        samples[1].push((b + b2) / 2.0);
        let others = all.len() - 2;
        for k in 0..others {
            let index = 2 + (round + k) % others;
            samples[index].push(time_ns(&setup, all[index], per_round));
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let (rounds, ops) = if bench_mode { (11, 200_000) } else { (3, 100) };
    let per_observation = per_observation::measure(rounds, ops)
        .iter()
        .map(|(name, ns)| format!("{name}={ns:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    println!("per-observation: {per_observation} ns/op");
    println!(
        "references: sdk_bound={:.1} otel_bound_two_readers={:.1} floor_atomics={:.1} floor_mutex={:.1} rules_only={:.1} ns/request",
        medians[3], medians[4], medians[5], medians[6], medians[7]
    );
    println!(
        "lifecycle: otel_bound={:.1} prometheus_client={:.1} otel_unbound={:.1} ns/request ratio={:.2}",
        medians[0],
        medians[1],
        medians[2],
        medians[0] / medians[1]
    );
}
