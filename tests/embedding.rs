//! A host program that owns the `SdkMeterProvider`: it registers the
//! crate's Views, its own reader (the Prometheus bridge here, the SDK's
//! in-memory exporter beside it) and its own instruments and Views, and
//! hands the crate a `Meter`. The crate's families come out exactly as the
//! CLI writes them (the golden exposition, byte for byte), and the host's
//! instrument keeps its own View.

mod common;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{
    Aggregation, InMemoryMetricExporterBuilder, Instrument, PeriodicReader, SdkMeterProvider,
    Stream,
};
use vllm_otel_metrics::catalog;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::ingest::jsonl;
use vllm_otel_metrics::instruments::{views, Instruments, InstrumentsConfig};
use vllm_otel_metrics::tracker::Tracker;

#[test]
fn a_host_provider_records_the_golden_exposition_next_to_its_own_instruments() {
    let (bridge, bridge_reader) = PrometheusBridge::builder().build();
    let in_memory = InMemoryMetricExporterBuilder::new().build();
    let config = InstrumentsConfig::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(bridge_reader)
        .with_reader(PeriodicReader::builder(in_memory.clone()).build())
        .with_view(views(config))
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
        })
        .build();
    let host_meter = provider.meter("host");
    let batch_size = host_meter.u64_histogram("host.batch_size").build();
    batch_size.record(3, &[]);
    batch_size.record(100, &[]);

    let mut tracker = Tracker::new(Instruments::from_meter(&provider.meter("vllm"), config));
    let trace = common::repo().join("tests/data/lifecycle.jsonl");
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
    let golden = std::fs::read_to_string(common::repo().join("tests/data/lifecycle.prom")).unwrap();
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
