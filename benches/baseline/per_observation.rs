//! The cost of one observation on each path, in isolation: this crate's
//! histogram record and counter add (`metrics::{Histogram, Counter}`), the
//! official OpenTelemetry SDK's bound histogram record and counter add (one
//! and two readers), a
//! `prometheus-client` histogram observe and counter increment, a raw atomic
//! add and a raw mutex-guarded histogram (bucket found by a linear scan or by
//! the binary search the OpenTelemetry SDK uses). Values cycle through the
//! canonical request's inter-token latencies.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{Aggregation, Instrument, ManualReader, SdkMeterProvider, Stream};
use vllm_otel_metrics::catalog::{self, ITL_BUCKETS};
use vllm_otel_metrics::metrics::{Counter, Histogram};

use crate::floor::{MutexHistogram, Observe};

const VALUES: [f64; 4] = [0.018, 0.022, 0.026, 0.030];

fn provider(readers: usize) -> SdkMeterProvider {
    let mut builder = SdkMeterProvider::builder();
    for _ in 0..readers {
        builder = builder.with_reader(ManualReader::builder().build());
    }
    builder
        .with_view(|inst: &Instrument| {
            (inst.name() == catalog::INTER_TOKEN_LATENCY.otel_name).then(|| {
                Stream::builder()
                    .with_aggregation(Aggregation::ExplicitBucketHistogram {
                        boundaries: ITL_BUCKETS.to_vec(),
                        record_min_max: false,
                    })
                    .build()
                    .expect("a valid stream")
            })
        })
        .build()
}

/// Median ns per call of `op(i)` over `rounds` rounds of `ops` calls.
fn ns_per_op(rounds: usize, ops: usize, mut op: impl FnMut(usize)) -> f64 {
    for i in 0..ops {
        op(i);
    }
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for i in 0..ops {
                op(i);
            }
            start.elapsed().as_nanos() as f64 / ops as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// `(name, ns per observation)` of every path.
pub fn measure(rounds: usize, ops: usize) -> Vec<(&'static str, f64)> {
    let attributes = [
        KeyValue::new(catalog::ENGINE_LABELS[0], "m"),
        KeyValue::new(catalog::ENGINE_LABELS[1], "0"),
    ];
    let value = |i: usize| black_box(VALUES[i & 3]);
    let mut results = Vec::new();
    let histogram = Histogram::new(ITL_BUCKETS.to_vec());
    let counter = Counter::default();
    results.push((
        "otel_bound_histogram",
        ns_per_op(rounds, ops, |i| histogram.record(value(i))),
    ));
    results.push((
        "otel_bound_counter",
        ns_per_op(rounds, ops, |_| counter.add(black_box(1))),
    ));
    for (readers, histogram_name, counter_name) in [
        (1, "sdk_bound_histogram", "sdk_bound_counter"),
        (
            2,
            "sdk_bound_histogram_two_readers",
            "sdk_bound_counter_two_readers",
        ),
    ] {
        let provider = provider(readers);
        let meter = provider.meter("per-observation");
        let histogram = meter
            .f64_histogram(catalog::INTER_TOKEN_LATENCY.otel_name)
            .build()
            .bind(&attributes);
        let counter = meter
            .u64_counter(catalog::GENERATION_TOKENS.otel_name)
            .build()
            .bind(&attributes);
        results.push((
            histogram_name,
            ns_per_op(rounds, ops, |i| histogram.record(value(i))),
        ));
        results.push((
            counter_name,
            ns_per_op(rounds, ops, |_| counter.add(black_box(1))),
        ));
    }

    let histogram = prometheus_client::metrics::histogram::Histogram::new(ITL_BUCKETS.to_vec());
    let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
    results.push((
        "prometheus_client_histogram",
        ns_per_op(rounds, ops, |i| histogram.observe(value(i))),
    ));
    results.push((
        "prometheus_client_counter",
        ns_per_op(rounds, ops, |_| {
            counter.inc_by(black_box(1));
        }),
    ));

    let atomic = AtomicU64::new(0);
    results.push((
        "atomic_fetch_add",
        ns_per_op(rounds, ops, |_| {
            atomic.fetch_add(black_box(1), Ordering::Relaxed);
        }),
    ));
    let linear = MutexHistogram::new(ITL_BUCKETS.to_vec());
    results.push((
        "mutex_histogram_linear",
        ns_per_op(rounds, ops, |i| linear.observe(value(i))),
    ));
    let bounds = ITL_BUCKETS.to_vec();
    let state = Mutex::new((vec![0u64; bounds.len() + 1], 0u64, 0f64));
    results.push((
        "mutex_histogram_binary",
        ns_per_op(rounds, ops, |i| {
            let v = value(i);
            let index = bounds.partition_point(|&b| b < v);
            let mut state = state.lock().unwrap();
            state.0[index] += 1;
            state.1 += 1;
            state.2 += v;
        }),
    ));
    results
}
