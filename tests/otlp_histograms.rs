//! What the histograms aggregate into, per reader: `--custom-histogram-buckets`
//! reaches every reader, and `--otlp-histograms exponential` gives OTLP
//! base-2 exponential latency histograms while the Prometheus bridge keeps
//! vLLM's buckets, byte for byte the golden exposition of the test trace.
//! (The CLI and the real Collector: `tests/otlp_collector.rs` and
//! `tests/native_histograms.rs`.)

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod paths;
}

use std::collections::BTreeMap;

use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};
use vllm_otel_metrics::catalog::{self, Kind};
use vllm_otel_metrics::export::prometheus::{Family, Format, PrometheusBridge, Value};
use vllm_otel_metrics::instruments::{
    BucketOverrides, ExponentialHistograms, Instruments, InstrumentsBuilder, OtlpHistograms,
};
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::tracker::Tracker;

fn replay_trace(instruments: Instruments) {
    let mut tracker = Tracker::new(instruments);
    let trace = common::paths::repo().join("tests/data/lifecycle.jsonl");
    jsonl::replay(
        std::io::BufReader::new(std::fs::File::open(&trace).unwrap()),
        "lifecycle.jsonl",
        &mut tracker,
        &mut Vec::new(),
        jsonl::DEFAULT_MAX_LINE_BYTES,
    )
    .unwrap();
}

/// What an OTLP reader got of one histogram family, summed over its data
/// points: its aggregation, count, sum, and (explicit) its bounds.
#[derive(Debug, PartialEq)]
struct Exported {
    exponential: bool,
    count: u64,
    sum: f64,
    bounds: Vec<f64>,
}

fn exported_histograms(exporter: &InMemoryMetricExporter) -> BTreeMap<String, Exported> {
    let mut by_name = BTreeMap::new();
    let finished = exporter.get_finished_metrics().unwrap();
    let last = finished.last().expect("one export");
    for metric in last.scope_metrics().flat_map(|s| s.metrics()) {
        let AggregatedMetrics::F64(data) = metric.data() else {
            continue;
        };
        let exported = match data {
            MetricData::Histogram(h) => Exported {
                exponential: false,
                count: h.data_points().map(|p| p.count()).sum(),
                sum: h.data_points().map(|p| p.sum()).sum(),
                bounds: h
                    .data_points()
                    .next()
                    .map(|p| p.bounds().collect())
                    .unwrap_or_default(),
            },
            MetricData::ExponentialHistogram(h) => Exported {
                exponential: true,
                count: h.data_points().map(|p| p.count() as u64).sum(),
                sum: h.data_points().map(|p| p.sum()).sum(),
                bounds: Vec::new(),
            },
            _ => continue,
        };
        by_name.insert(metric.name().to_owned(), exported);
    }
    by_name
}

/// The histogram families the trace records (their series exist on
/// `/metrics`); the others are exported by neither reader.
fn recorded<'a>(snapshot: &'a [Family]) -> impl Iterator<Item = &'static catalog::MetricDef> + 'a {
    catalog::all().filter(|def| {
        def.kind == Kind::Histogram
            && snapshot
                .iter()
                .any(|f| f.name == def.vllm_name && !f.series.is_empty())
    })
}

/// Count, sum and bucket bounds of a bridge family, over its series.
fn bridge_histogram(snapshot: &[Family], vllm_name: &str) -> (u64, f64, Vec<f64>) {
    let family = snapshot.iter().find(|f| f.name == vllm_name).unwrap();
    let (mut count, mut sum, mut bounds) = (0, 0.0, Vec::new());
    for series in &family.series {
        if let Value::Histogram {
            buckets,
            sum: s,
            count: c,
        } = &series.value
        {
            count += c;
            sum += s;
            bounds = buckets.iter().map(|(le, _)| *le).collect();
        }
    }
    (count, sum, bounds)
}

fn builder_with(exporter: &InMemoryMetricExporter) -> InstrumentsBuilder {
    Instruments::builder().with_reader(PeriodicReader::builder(exporter.clone()).build())
}

#[test]
fn exponential_latency_goes_to_otlp_and_vllms_buckets_stay_on_metrics() {
    let exporter = InMemoryMetricExporter::default();
    let (bridge, bridge_reader) = PrometheusBridge::builder().build();
    let exponential = ExponentialHistograms {
        max_size: 64,
        max_scale: 10,
    };
    let instruments = builder_with(&exporter)
        .with_otlp_histograms(OtlpHistograms::Exponential(exponential))
        .with_reader(bridge_reader)
        .with_explicit_histogram_reader(bridge.latency_reader())
        .build();
    replay_trace(instruments.clone());
    instruments.force_flush().unwrap();

    // The bridge: exactly the golden exposition of a run without the flag.
    let golden =
        std::fs::read_to_string(common::paths::repo().join("tests/data/lifecycle.prom")).unwrap();
    assert_eq!(bridge.encode(Format::Text), golden);

    // OTLP: the eight latency families exponential, every other histogram
    // explicit with the catalog's buckets; counts and sums are the bridge's.
    let snapshot = bridge.snapshot();
    let exported = exported_histograms(&exporter);
    let histograms: Vec<_> = recorded(&snapshot).collect();
    assert_eq!(exported.len(), histograms.len(), "{:?}", exported.keys());
    for def in histograms {
        let got = exported
            .get(def.otel_name)
            .unwrap_or_else(|| panic!("{} exported", def.otel_name));
        let (count, sum, bounds) = bridge_histogram(&snapshot, def.vllm_name);
        let latency = catalog::is_latency_histogram(def);
        let expected = Exported {
            exponential: latency,
            count,
            sum: got.sum,
            bounds: if latency { Vec::new() } else { bounds },
        };
        assert_eq!(got, &expected, "{}", def.vllm_name);
        assert!(
            (got.sum - sum).abs() <= 1e-9 * sum.abs().max(1.0),
            "{}: sum {} over OTLP, {} on /metrics",
            def.vllm_name,
            got.sum,
            sum
        );
    }
    assert!(
        exported["vllm.time_to_first_token_seconds"].count > 0,
        "the trace has first tokens"
    );
    instruments.shutdown().unwrap();
}

#[test]
fn without_an_explicit_reader_every_reader_gets_exponential_latency() {
    let exporter = InMemoryMetricExporter::default();
    let instruments = builder_with(&exporter)
        .with_otlp_histograms(OtlpHistograms::Exponential(ExponentialHistograms::DEFAULT))
        .build();
    replay_trace(instruments.clone());
    instruments.force_flush().unwrap();
    let exported = exported_histograms(&exporter);
    for def in catalog::all().filter(|def| catalog::is_latency_histogram(def)) {
        assert!(exported[def.otel_name].exponential, "{}", def.otel_name);
    }
    assert!(!exported["vllm.request_num_preemptions"].exponential);
    instruments.shutdown().unwrap();
}

#[test]
fn bucket_overrides_reach_every_reader_and_spare_the_headline_histogram() {
    let overrides = BucketOverrides::parse(
        r#"{"request_latency": [0.5, 2, 8],
            "vllm:request_queue_time_seconds": [0.25, 1],
            "request_tokens": [16, 256]}"#,
    )
    .unwrap();
    let exporter = InMemoryMetricExporter::default();
    let (bridge, bridge_reader) = PrometheusBridge::builder().build();
    let instruments = builder_with(&exporter)
        .with_bucket_overrides(overrides)
        .with_reader(bridge_reader)
        .build();
    replay_trace(instruments.clone());
    instruments.force_flush().unwrap();

    let snapshot = bridge.snapshot();
    let exported = exported_histograms(&exporter);
    let expected_bounds = |def: &catalog::MetricDef| -> Vec<f64> {
        if def.vllm_name == "vllm:request_queue_time_seconds" {
            vec![0.25, 1.0]
        } else if def.bucket_family == "request_latency" {
            vec![0.5, 2.0, 8.0]
        } else if def.bucket_family == "request_tokens" {
            vec![16.0, 256.0]
        } else {
            def.buckets.boundaries(catalog::DEFAULT_MAX_MODEL_LEN)
        }
    };
    for def in recorded(&snapshot) {
        let bounds = expected_bounds(def);
        let (count, _, on_metrics) = bridge_histogram(&snapshot, def.vllm_name);
        assert_eq!(on_metrics, bounds, "/metrics, {}", def.vllm_name);
        let otlp = &exported[def.otel_name];
        assert_eq!(
            (&otlp.bounds, otlp.count),
            (&bounds, count),
            "OTLP, {}",
            def.otel_name
        );
    }
    assert_eq!(
        expected_bounds(&catalog::REQUEST_NUM_PREEMPTIONS),
        catalog::PREEMPTION_BUCKETS
    );
    instruments.shutdown().unwrap();
}
