//! One OTLP export of 1,000 `(model_name, engine)` label sets × every family,
//! side by side with a Prometheus scrape of the same state (the baseline).
//!
//! The export goes through the real path: the provider's `force_flush`
//! makes the `PeriodicReader` collect the SDK and `opentelemetry-otlp`'s
//! exporter encode protobuf and POST it (HTTP/protobuf) to a local HTTP
//! server that counts the body bytes and answers 200. Run: `cargo bench --bench otlp_export`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use vllm_otel_metrics::export::otlp::{self, OtlpOptions, Protocol};
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::{
    EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, OutputBatch, PrefillStats,
    RequestStart, SchedulerStats,
};
use vllm_otel_metrics::tracker::Tracker;

const LABEL_SETS: u32 = 1_000;

/// A local OTLP/HTTP sink: counts request body bytes, answers 200.
fn start_sink(runtime: &tokio::runtime::Runtime, last_body: Arc<AtomicU64>) -> u16 {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let last_body = Arc::clone(&last_body);
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let last_body = Arc::clone(&last_body);
                    async move {
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        last_body.store(body.len() as u64, Ordering::Relaxed);
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

/// Records one finished, preempted request per label set, and scheduler stats.
fn populate(tracker: &mut Tracker) {
    for i in 0..LABEL_SETS {
        let model = format!("model-{}", i % 10);
        let engine = i / 10;
        let id = format!("r{i}");
        let rejections = tracker.start_request(&RequestStart {
            request_id: id.clone(),
            model_name: model.clone(),
            engine,
            arrival_time: 1000.0,
            prompt_len: 512,
            max_tokens: Some(128),
            n: 1,
            traceparent: None,
            operation_name: None,
            stop_strings: false,
            lora_name: None,
            priority: None,
        });
        assert_eq!(rejections, vec![]);
        let event = |kind, timestamp| EngineCoreEvent {
            kind,
            timestamp,
            reason: None,
        };
        let first = EngineCoreOutput {
            request_id: id.clone(),
            new_token_ids: vec![1],
            events: vec![
                event(EventType::Queued, 1.0),
                event(EventType::Scheduled, 1.5),
            ],
            prefill_stats: Some(PrefillStats {
                num_prompt_tokens: 512,
                num_computed_tokens: 500,
                num_cached_tokens: 12,
                num_local_cached_tokens: 12,
                num_external_cached_tokens: 0,
            }),
            finish_reason: None,
        };
        let last = EngineCoreOutput {
            request_id: id,
            new_token_ids: vec![2, 3],
            events: vec![event(EventType::Preempted, 2.5)],
            prefill_stats: None,
            finish_reason: Some(FinishReason::ALL[i as usize % 5]),
        };
        for (ts, output) in [(2.0, first), (3.0, last)] {
            tracker.observe_batch(&OutputBatch {
                engine,
                timestamp: ts,
                received_at: 1000.0 + ts,
                outputs: vec![output],
            });
        }
        tracker.record_scheduler_stats(&SchedulerStats {
            model_name: model,
            engine,
            num_running_reqs: 3,
            num_waiting_reqs: 1,
            kv_cache_usage: 0.5,
            prefix_cache_queries: 100,
            prefix_cache_hits: 10,
            ..SchedulerStats::default()
        });
    }
}

fn otlp_export(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let last_body = Arc::new(AtomicU64::new(0));
    let port = start_sink(&runtime, Arc::clone(&last_body));
    let mut options = OtlpOptions::default();
    options.endpoint = Some(format!("http://127.0.0.1:{port}"));
    options.protocol = Some(Protocol::HttpProtobuf);
    options.interval = Some(Duration::from_secs(3600));
    let push = otlp::build(&options, &|_| None, runtime.handle()).unwrap();
    let (reader, health) = (push.reader, push.health);
    let (bridge, bridge_reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder()
        .with_reader(bridge_reader)
        .with_reader(reader)
        .build();
    let mut tracker = Tracker::new(instruments.clone());
    populate(&mut tracker);

    let series = bridge
        .snapshot()
        .iter()
        .map(|f| f.series.len())
        .sum::<usize>();
    let scrape_bytes = bridge.encode(Format::Text).len();
    let mut group = c.benchmark_group("otlp_export_1000_label_sets");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("otlp_http_export", |b| {
        b.iter(|| instruments.force_flush().unwrap())
    });
    group.bench_function("prometheus_text_scrape", |b| {
        b.iter(|| bridge.encode(Format::Text))
    });
    group.finish();
    assert!(
        health.last_error().is_none(),
        "exports failed: {:?}",
        health.last_error()
    );

    // A plain timing of both for the one-line summary (medians of 15).
    let median = |f: &mut dyn FnMut()| {
        let mut times: Vec<f64> = (0..15)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    let export = median(&mut || instruments.force_flush().unwrap());
    let scrape = median(&mut || {
        bridge.encode(Format::Text);
    });
    println!(
        "otlp_export: label_sets={LABEL_SETS} series={series} otlp_body_bytes={} prometheus_text_bytes={scrape_bytes} export_ms={:.1} scrape_ms={:.1} ratio={:.2}",
        last_body.load(Ordering::Relaxed),
        export * 1e3,
        scrape * 1e3,
        export / scrape
    );
    instruments.shutdown().unwrap();
}

fn main() {
    let mut criterion = criterion::Criterion::default().configure_from_args();
    otlp_export(&mut criterion);
    criterion.final_summary();
}
