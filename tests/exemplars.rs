//! Exemplars: each bucket of the per-request histograms (and each SLO
//! outcome) links to the latest request that landed there, by the trace and
//! span ids of that request's `llm_request` span; only OpenMetrics carries
//! them, and text 0.0.4 stays byte for byte as without them.
//!
//! The workload is a recorded trace (`tests/data/generated-seed11.jsonl`:
//! two engines, preemptions, aborts) applied through the library's tracker
//! with spans going to the SDK's in-memory exporter; every exemplar is
//! checked against the span it names.

use std::collections::{BTreeMap, HashMap};

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::exemplars::TraceLink;
use vllm_otel_metrics::instruments::spans::RequestSpans;
use vllm_otel_metrics::instruments::{Attribution, Instruments, Slo};
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::tracker::Tracker;

const TRACE: &str = "tests/data/generated-seed11.jsonl";

/// The records of the trace, in order (its few malformed lines, there for
/// the replay's tests, left out); `traceparent` given to every request
/// start when `caller` is set.
fn records(caller: bool) -> Vec<Record> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(TRACE);
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Record>(line).ok())
        .map(|mut record| {
            if let (Record::Request(start), true) = (&mut record, caller) {
                let (trace, span) = caller_ids(&start.request_id);
                start.traceparent = Some(format!("00-{trace:032x}-{span:016x}-01"));
            }
            record
        })
        .collect()
}

/// A caller's trace and span id of a request, from its id.
fn caller_ids(request_id: &str) -> (u128, u64) {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in request_id.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    (
        (u128::from(hash) << 64) | u128::from(!hash),
        hash.rotate_left(17) | 1,
    )
}

/// One run of the trace: the bridge, and the spans made, in the order
/// they ended.
struct Run {
    bridge: PrometheusBridge,
    spans: Vec<SpanData>,
    _instruments: Instruments,
}

fn run(exemplars: bool, spans: bool, caller: bool, slo: Option<&str>) -> Run {
    run_attributed(exemplars, spans, caller, slo, false)
}

/// [`run`], with `attributed` each request given one of two adapters and
/// one of two priorities from its id, and `--attribute lora,priority`.
fn run_attributed(
    exemplars: bool,
    spans: bool,
    caller: bool,
    slo: Option<&str>,
    attributed: bool,
) -> Run {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut builder = Instruments::builder()
        .with_reader(reader)
        .with_exemplars(exemplars);
    if attributed {
        builder = builder.with_attribution(
            Attribution::default()
                .with_lora()
                .with_adapter_min_requests(1)
                .with_priority("0,5".parse().unwrap()),
        );
    }
    if let Some(slo) = slo {
        builder = builder.with_slo(Slo::from_json(slo).unwrap());
    }
    let instruments = builder.build();
    let bridge = bridge.with_exemplars(instruments.exemplars());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let mut tracker = Tracker::new(instruments.clone());
    if spans {
        tracker = tracker.with_spans(RequestSpans::new(&provider));
    }
    for mut record in records(caller) {
        if let (Record::Request(start), true) = (&mut record, attributed) {
            let (trace, _) = caller_ids(&start.request_id);
            start.lora_name = Some(["sql", "chat"][(trace >> 64) as usize % 2].to_owned());
            start.priority = Some([0, 5][(trace >> 70) as usize % 2]);
        }
        // The trace's invalid parts are refused alone, as in the replay.
        tracker.apply(&record);
    }
    drop(tracker);
    Run {
        bridge,
        spans: exporter.get_finished_spans().unwrap(),
        _instruments: instruments,
    }
}

/// One exemplar line of an OpenMetrics exposition.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    family: String,
    /// The labels but `le`, as written.
    labels: String,
    le: Option<f64>,
    /// The bucket's (or counter's) count.
    count: f64,
    link: Option<TraceLink>,
    value: f64,
    timestamp: f64,
}

fn parse_float(text: &str) -> f64 {
    match text {
        "+Inf" => f64::INFINITY,
        other => other.parse().unwrap_or_else(|e| panic!("{other}: {e}")),
    }
}

/// Every sample line with its exemplar, if any.
fn sample_lines(exposition: &str) -> Vec<Line> {
    let mut lines = Vec::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let (sample, exemplar) = match line.split_once(" # ") {
            Some((sample, exemplar)) => (sample, Some(exemplar)),
            None => (line, None),
        };
        let (series, count) = sample.rsplit_once(' ').unwrap();
        let (family, labels) = series.split_once('{').unwrap_or((series, "}"));
        let labels = labels.strip_suffix('}').unwrap();
        let mut le = None;
        let mut kept = Vec::new();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            match pair.strip_prefix("le=\"") {
                Some(bound) => le = Some(parse_float(bound.trim_end_matches('"'))),
                None => kept.push(pair),
            }
        }
        let (mut link, mut value, mut timestamp) = (None, f64::NAN, f64::NAN);
        if let Some(exemplar) = exemplar {
            let (ids, rest) = exemplar.split_once("} ").unwrap();
            assert!(ids.len() <= 128 + 20, "{ids}");
            let ids = ids.strip_prefix("{trace_id=\"").unwrap();
            let (trace_id, span_id) = ids.split_once("\",span_id=\"").unwrap();
            let span_id = span_id.strip_suffix('"').unwrap();
            link = Some(TraceLink {
                trace_id: TraceId::from_hex(trace_id).unwrap(),
                span_id: SpanId::from_hex(span_id).unwrap(),
            });
            let (v, t) = rest.split_once(' ').unwrap();
            (value, timestamp) = (parse_float(v), parse_float(t));
        }
        lines.push(Line {
            family: family.to_owned(),
            labels: kept.join(","),
            le,
            count: parse_float(count),
            link,
            value,
            timestamp,
        });
    }
    lines
}

fn seconds(time: std::time::SystemTime) -> f64 {
    let since = time.duration_since(std::time::UNIX_EPOCH).unwrap();
    since.as_secs_f64()
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn as_f64(value: &Value) -> f64 {
    match value {
        Value::F64(v) => *v,
        Value::I64(v) => *v as f64,
        other => panic!("not a number: {other:?}"),
    }
}

/// The label block a span's request was recorded under.
fn labels_of(span: &SpanData) -> String {
    let model = attribute(span, "gen_ai.response.model").unwrap();
    let engine = attribute(span, "vllm.engine").unwrap();
    format!("model_name=\"{model}\",engine=\"{engine}\"")
}

/// The families checked, and the span attribute each one's value is.
const CHECKED: [(&str, &str); 5] = [
    (
        "vllm:request_num_preemptions",
        "vllm.request.num_preemptions",
    ),
    (
        "vllm:time_to_first_token_seconds",
        "gen_ai.latency.time_to_first_token",
    ),
    ("vllm:e2e_request_latency_seconds", "gen_ai.latency.e2e"),
    (
        "vllm:request_queue_time_seconds",
        "gen_ai.latency.time_in_queue",
    ),
    (
        "vllm:request_inference_time_seconds",
        "gen_ai.latency.time_in_model_inference",
    ),
];

#[test]
fn every_bucket_links_the_latest_request_that_landed_in_it() {
    let run = run(true, true, true, None);
    let by_link: HashMap<TraceLink, (usize, &SpanData)> = run
        .spans
        .iter()
        .enumerate()
        .map(|(at, span)| {
            let link = TraceLink {
                trace_id: span.span_context.trace_id(),
                span_id: span.span_context.span_id(),
            };
            (link, (at, span))
        })
        .collect();
    let lines = sample_lines(&run.bridge.encode(Format::OpenMetrics));
    let mut checked = 0;
    for (family, key) in CHECKED {
        let bucket_family = format!("{family}_bucket");
        let mut previous: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for line in lines.iter().filter(|l| l.family == bucket_family) {
            let le = line.le.unwrap();
            let (lower, below) = previous
                .insert(line.labels.clone(), (le, line.count))
                .unwrap_or((f64::NEG_INFINITY, 0.0));
            let (lower, below) = if lower < le {
                (lower, below)
            } else {
                (f64::NEG_INFINITY, 0.0)
            };
            // The requests whose value lies in this bucket, in end order.
            let landed: Vec<(usize, &SpanData)> = run
                .spans
                .iter()
                .enumerate()
                .filter(|(_, span)| labels_of(span) == line.labels)
                .filter(|(_, span)| {
                    // A request without a token has no TTFT observation.
                    key != "gen_ai.latency.time_to_first_token"
                        || as_f64(&attribute(span, "gen_ai.usage.completion_tokens").unwrap()) > 0.0
                })
                .filter(|(_, span)| {
                    let v = as_f64(&attribute(span, key).unwrap());
                    v > lower && v <= le
                })
                .collect();
            // A request still running when the trace ends has its first
            // token counted, and no span yet: its exemplar comes at its end.
            let counted = line.count - below;
            if key == "gen_ai.latency.time_to_first_token" {
                assert!(landed.len() as f64 <= counted, "{family} {line:?}");
            } else {
                assert_eq!(
                    landed.len() as f64,
                    counted,
                    "{family} {} le={le}: the bucket counts what the spans report",
                    line.labels
                );
            }
            let Some(link) = line.link else {
                assert!(
                    landed.is_empty(),
                    "{family} {} le={le}: no exemplar",
                    line.labels
                );
                continue;
            };
            let (at, span) = by_link[&link];
            assert_eq!(
                as_f64(&attribute(span, key).unwrap()),
                line.value,
                "{family}"
            );
            assert!(line.value > lower && line.value <= le, "{line:?}");
            // The latest observation: by its time in milliseconds (the first
            // token for TTFT, the end for the rest), the first to end among
            // those of one millisecond (Prometheus takes no second exemplar
            // at the same time).
            let observed = |span: &SpanData| match key {
                "gen_ai.latency.time_to_first_token" => {
                    seconds(span.start_time) + as_f64(&attribute(span, key).unwrap())
                }
                _ => seconds(span.end_time),
            };
            let millis = |span: &SpanData| (observed(span) * 1000.0) as i64;
            let latest = landed
                .iter()
                .max_by(|a, b| millis(a.1).cmp(&millis(b.1)).then(b.0.cmp(&a.0)))
                .unwrap();
            assert_eq!(latest.0, at, "{line:?}: not the latest");
            assert!((line.timestamp - observed(span)).abs() < 1e-6, "{line:?}");
            checked += 1;
        }
    }
    eprintln!("{checked} exemplars checked against their spans");
    // Both engines, five families: every bucket some request landed in.
    assert!(checked >= 40, "{checked} exemplars checked");
}

/// With attribution, each `vllm_class:` bucket has its class's latest
/// request, and vLLM's family's bucket, which sums the classes, the latest
/// of its classes' exemplars.
#[test]
fn with_classes_vllm_buckets_link_the_latest_request_of_any_class() {
    let on = run_attributed(true, true, false, None, true);
    let lines = sample_lines(&on.bridge.encode(Format::OpenMetrics));
    let class_labels = |labels: &str| {
        labels
            .split(',')
            .filter(|p| !p.starts_with("lora_name=") && !p.starts_with("priority="))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (mut checked, mut classes_seen) = (0, std::collections::BTreeSet::new());
    for (family, _) in CHECKED {
        let twin = family.replacen("vllm:", "vllm_class:", 1);
        let bucket = |f: &str| format!("{f}_bucket");
        for line in lines.iter().filter(|l| l.family == bucket(family)) {
            let of_classes: Vec<&Line> = lines
                .iter()
                .filter(|l| {
                    l.family == bucket(&twin)
                        && l.le == line.le
                        && class_labels(&l.labels) == line.labels
                })
                .collect();
            assert!(
                !of_classes.is_empty(),
                "{family} {}: no classes",
                line.labels
            );
            let count: f64 = of_classes.iter().map(|l| l.count).sum();
            assert_eq!(
                count, line.count,
                "{family} {} le {:?}",
                line.labels, line.le
            );
            // The latest millisecond's (as Prometheus keeps exemplar
            // times); of two in one millisecond, either.
            let millis = |l: &&&Line| (l.timestamp * 1000.0).round() as i64;
            let linked: Vec<&&Line> = of_classes.iter().filter(|l| l.link.is_some()).collect();
            let latest = linked.iter().map(millis).max();
            let candidates: Vec<Option<TraceLink>> = linked
                .iter()
                .filter(|l| Some(millis(l)) == latest)
                .map(|l| l.link)
                .collect();
            match latest {
                None => assert_eq!(line.link, None, "{family} {}", line.labels),
                Some(_) => assert!(
                    candidates.contains(&line.link),
                    "{family} {} le {:?}: {:?} not among {candidates:?}",
                    line.labels,
                    line.le,
                    line.link
                ),
            }
            if line.link.is_some() {
                checked += 1;
                classes_seen.extend(of_classes.iter().map(|l| l.labels.clone()));
            }
        }
    }
    eprintln!("{checked} summed buckets' exemplars checked");
    assert!(checked >= 40, "{checked} exemplars checked");
    assert!(classes_seen.len() >= 8, "classes: {classes_seen:?}");
}

#[test]
fn text_stays_byte_for_byte_and_openmetrics_only_gains_exemplars() {
    let on = run(true, true, true, None);
    let off = run(false, true, true, None);
    assert_eq!(
        on.bridge.encode(Format::Text),
        off.bridge.encode(Format::Text)
    );
    let with = on.bridge.encode(Format::OpenMetrics);
    let stripped: String = with
        .lines()
        .map(|line| line.split_once(" # {").map_or(line, |(sample, _)| sample))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(with, stripped);
    assert_eq!(stripped, off.bridge.encode(Format::OpenMetrics));
    // The snapshot carries them too, and encodes to the same text.
    let snapshot = on.bridge.snapshot();
    assert_eq!(
        vllm_otel_metrics::export::prometheus::encode(&snapshot, Format::OpenMetrics),
        on.bridge.encode(Format::OpenMetrics)
    );
}

#[test]
fn without_spans_exemplars_link_the_callers_span() {
    let run = run(true, false, true, None);
    assert!(run.spans.is_empty());
    let callers: HashMap<(u128, u64), ()> = records(true)
        .iter()
        .filter_map(|r| match r {
            Record::Request(start) => Some((caller_ids(&start.request_id), ())),
            _ => None,
        })
        .collect();
    let lines = sample_lines(&run.bridge.encode(Format::OpenMetrics));
    let links: Vec<TraceLink> = lines.iter().filter_map(|l| l.link).collect();
    assert!(links.len() >= 40, "{}", links.len());
    for link in links {
        let ids = (
            u128::from_be_bytes(link.trace_id.to_bytes()),
            u64::from_be_bytes(link.span_id.to_bytes()),
        );
        assert!(callers.contains_key(&ids), "{link:?} is no caller's span");
    }
    // No caller, no span: nothing to link.
    let unlinked = self::run(true, false, false, None);
    let text = unlinked.bridge.encode(Format::OpenMetrics);
    assert!(!text.contains("trace_id"), "{text}");
}

#[test]
fn each_slo_outcome_links_its_latest_request() {
    let run = run(true, true, false, Some(r#"{"ttft": 0.5, "e2e": 20}"#));
    let lines = sample_lines(&run.bridge.encode(Format::OpenMetrics));
    let outcomes: Vec<&Line> = lines
        .iter()
        .filter(|l| l.family == "vllm_otel_metrics_slo_requests_total" && l.count > 0.0)
        .collect();
    assert!(outcomes.len() >= 3, "{outcomes:?}");
    for line in outcomes {
        let link = line.link.unwrap_or_else(|| panic!("{line:?}: no exemplar"));
        assert_eq!(line.value, 1.0);
        let outcome = line
            .labels
            .rsplit_once("outcome=\"")
            .unwrap()
            .1
            .trim_end_matches('"');
        let labels = line.labels.rsplit_once(",outcome=").unwrap().0;
        // The latest to end, by the millisecond; the first of those.
        let millis = |span: &SpanData| (seconds(span.end_time) * 1000.0) as i64;
        let latest = run
            .spans
            .iter()
            .filter(|span| labels_of(span) == labels)
            .filter(|span| {
                attribute(span, "vllm_otel_metrics.slo.outcome").map(|v| v.to_string())
                    == Some(outcome.to_owned())
            })
            .rev()
            .max_by_key(|span| millis(span))
            .unwrap();
        assert_eq!(latest.span_context.trace_id(), link.trace_id, "{line:?}");
        assert_eq!(latest.span_context.span_id(), link.span_id, "{line:?}");
    }
}

/// The OpenTelemetry SDK 0.33 keeps no exemplars, so OTLP carries none
/// (docs/SEMANTICS.md, "Exemplars"). When an upgrade makes it keep them for
/// a measurement made inside a sampled span, this fails: wire the
/// exemplars to OTLP then.
#[test]
fn the_sdk_still_keeps_no_exemplars_for_otlp() {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let histogram = provider.meter("probe").f64_histogram("probe").build();
    let sampled = SpanContext::new(
        TraceId::from(7u128),
        SpanId::from(9u64),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    );
    let context = opentelemetry::Context::new().with_remote_span_context(sampled);
    {
        let _attached = context.attach();
        histogram.record(1.5, &[]);
    }
    provider.force_flush().unwrap();
    let metrics = exporter.get_finished_metrics().unwrap();
    let metric = metrics[0]
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .next()
        .unwrap();
    let AggregatedMetrics::F64(MetricData::Histogram(histogram)) = metric.data() else {
        panic!("{:?}", metric.data());
    };
    let point = histogram.data_points().next().unwrap();
    assert_eq!(point.count(), 1);
    assert_eq!(
        point.exemplars().count(),
        0,
        "the SDK keeps exemplars now: send this crate's to OTLP too (docs/SEMANTICS.md, Exemplars)"
    );
}
