//! A host program that owns the `SdkMeterProvider`: `Instruments::install`
//! registers the crate's Views on the host's builder, with its own reader (the Prometheus bridge here, the SDK's
//! in-memory exporter beside it) and its own instruments and Views. The crate's families come out exactly as the
//! CLI writes them (the golden exposition, byte for byte), and the host's
//! instrument keeps its own View.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
    pub mod paths;
}
/// The example whose host code runs here (`serve`; its `main` is the
/// example's).
#[path = "../examples/host_metrics_endpoint.rs"]
pub mod host_metrics_endpoint;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{
    Aggregation, InMemoryMetricExporterBuilder, Instrument, PeriodicReader, SdkMeterProvider,
    Stream,
};
use vllm_otel_metrics::catalog;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::{Instruments, InstrumentsConfig};
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::tracker::Tracker;

#[test]
fn a_host_provider_records_the_golden_exposition_next_to_its_own_instruments() {
    let (bridge, bridge_reader) = PrometheusBridge::builder().build();
    let in_memory = InMemoryMetricExporterBuilder::new().build();
    let config = InstrumentsConfig::default();
    let builder = SdkMeterProvider::builder()
        .with_reader(bridge_reader)
        .with_reader(PeriodicReader::builder(in_memory.clone()).build())
        // The host's own View, for its own histogram.
        .with_view(|instrument: &Instrument| {
            (instrument.name() == "host.batch_size").then(|| {
                Stream::builder()
                    .with_aggregation(Aggregation::ExplicitBucketHistogram {
                        boundaries: vec![8.0, 64.0],
                        record_min_max: false,
                    })
                    .build()
                    .unwrap()
            })
        });
    let (provider, instruments) = Instruments::install(builder, config);
    let host_meter = provider.meter("host");
    let batch_size = host_meter.u64_histogram("host.batch_size").build();
    batch_size.record(3, &[]);
    batch_size.record(100, &[]);

    let mut tracker = Tracker::new(instruments);
    let trace = common::paths::repo().join("tests/data/lifecycle.jsonl");
    let mut errors = Vec::new();
    jsonl::replay(
        std::io::BufReader::new(std::fs::File::open(&trace).unwrap()),
        "lifecycle.jsonl",
        &mut tracker,
        &mut errors,
        jsonl::DEFAULT_MAX_LINE_BYTES,
    )
    .unwrap();

    let exposition = bridge.encode(Format::Text);
    let golden =
        std::fs::read_to_string(common::paths::repo().join("tests/data/lifecycle.prom")).unwrap();
    let (catalog_part, host_part) = exposition
        .split_once("# HELP host_batch_size ")
        .unwrap_or_else(|| panic!("the host's family is exposed too:\n{exposition}"));
    assert_eq!(catalog_part, golden);
    assert_eq!(
        host_part,
        "\n# TYPE host_batch_size histogram\n\
         host_batch_size_bucket{le=\"8.0\"} 1\n\
         host_batch_size_bucket{le=\"64.0\"} 1\n\
         host_batch_size_bucket{le=\"+Inf\"} 2\n\
         host_batch_size_sum 103.0\n\
         host_batch_size_count 2\n"
    );

    // The host's own exporter sees the catalog's buckets on the same data.
    provider.force_flush().unwrap();
    let exported = in_memory.get_finished_metrics().unwrap();
    let metric = exported
        .last()
        .unwrap()
        .scope_metrics()
        .flat_map(|scope| scope.metrics())
        .find(|m| m.name() == catalog::REQUEST_NUM_PREEMPTIONS.otel_name)
        .expect("the headline histogram is exported");
    let AggregatedMetrics::F64(MetricData::Histogram(histogram)) = metric.data() else {
        panic!("{metric:?} is not an f64 histogram");
    };
    for point in histogram.data_points() {
        assert_eq!(
            point.bounds().collect::<Vec<_>>(),
            catalog::PREEMPTION_BUCKETS
        );
    }
    let golden_counts: u64 = golden
        .lines()
        .filter(|l| l.starts_with("vllm:request_num_preemptions_count{"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        histogram.data_points().map(|p| p.count()).sum::<u64>(),
        golden_counts
    );
    provider.shutdown().unwrap();
}

/// `examples/host_metrics_endpoint.rs`, whose host code runs here (a
/// thread serves one scrape): its three requests on its own HTTP server,
/// the preemption histogram and the host's own counter, sample for sample.
#[test]
fn the_host_endpoint_example_serves_its_requests() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let host = std::thread::spawn(move || {
        host_metrics_endpoint::serve(listener, Some(1)).map_err(|e| e.to_string())
    });
    let body = {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    };
    host.join()
        .unwrap()
        .expect("the example serves one scrape and exits");
    let (head, exposition) = body.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let samples = common::exposition::samples(exposition);
    let preemptions: Vec<(String, f64)> = samples
        .iter()
        .filter(|(key, _)| key.starts_with("vllm:request_num_preemptions_"))
        .map(|(key, value)| (key.clone(), *value))
        .collect();
    let labels = r#"model_name="my-model",engine="0""#;
    let mut expected = vec![
        (
            format!("vllm:request_num_preemptions_count{{{labels}}}"),
            3.0,
        ),
        (format!("vllm:request_num_preemptions_sum{{{labels}}}"), 1.0),
    ];
    for (le, count) in [
        ("1.0", 3.0),
        ("2.0", 3.0),
        ("3.0", 3.0),
        ("4.0", 3.0),
        ("5.0", 3.0),
        ("10.0", 3.0),
        ("20.0", 3.0),
        ("+Inf", 3.0),
    ] {
        expected.push((
            format!("vllm:request_num_preemptions_bucket{{{labels},le=\"{le}\"}}"),
            count,
        ));
    }
    let mut got = preemptions;
    got.sort_by(|a, b| a.0.cmp(&b.0));
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, expected);
    assert_eq!(samples["batches_total"], 3.0);
}
