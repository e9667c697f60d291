//! The cost of one observation on each path, in isolation: the SDK's bound
//! histogram record and counter add on the crate's own instruments and
//! Views, with the bridge's reader alone and with an OTLP reader besides
//! (each reader aggregates every measurement once more), a
//! `prometheus-client` histogram observe and counter increment, and two
//! raw references: an atomic add, and a mutex-guarded histogram whose bucket
//! is found by the binary search the SDK uses (the shape of the SDK's
//! histogram update without its dispatch). Values cycle through the
//! canonical request's inter-token latencies.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use vllm_otel_metrics::catalog::DEFAULT_MAX_MODEL_LEN;

use crate::lifecycle_state::family;

const VALUES: [f64; 4] = [0.018, 0.022, 0.026, 0.030];

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

/// `(name, ns per observation)` of every path; `providers` are the
/// one-reader and two-reader providers of the lifecycle bench.
pub(crate) fn measure(
    rounds: usize,
    ops: usize,
    providers: [&SdkMeterProvider; 2],
) -> Vec<(&'static str, f64)> {
    let attributes = [
        KeyValue::new("model_name", "per-observation"),
        KeyValue::new("engine", "0"),
    ];
    let value = |i: usize| black_box(VALUES[i & 3]);
    let mut results = Vec::new();
    for (provider, histogram_name, counter_name) in [
        (providers[0], "sdk_histogram", "sdk_counter"),
        (
            providers[1],
            "sdk_histogram_two_readers",
            "sdk_counter_two_readers",
        ),
    ] {
        let meter = provider.meter(vllm_otel_metrics::instruments::SCOPE_NAME);
        let histogram = meter
            .f64_histogram(family("vllm:inter_token_latency_seconds").otel_name)
            .with_unit(family("vllm:inter_token_latency_seconds").unit)
            .with_description(family("vllm:inter_token_latency_seconds").help)
            .build()
            .bind(&attributes);
        let counter = meter
            .u64_counter(family("vllm:generation_tokens").otel_name)
            .with_unit(family("vllm:generation_tokens").unit)
            .with_description(family("vllm:generation_tokens").help)
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

    let histogram = prometheus_client::metrics::histogram::Histogram::new(itl_buckets());
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
    let bounds = itl_buckets();
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

/// The inter-token latency histogram's boundaries.
fn itl_buckets() -> Vec<f64> {
    family("vllm:inter_token_latency_seconds")
        .buckets
        .boundaries(DEFAULT_MAX_MODEL_LEN)
}
