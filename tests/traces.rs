//! The `llm_request` spans end to end: a trace whose request starts carry
//! W3C `traceparent`s is replayed with `--otlp-traces-endpoint` into the
//! project's Collector (the shipped config's traces pipeline), which
//! forwards to a real Jaeger (the shipped `jaeger.yaml`). Jaeger's query API
//! must return exactly one span per terminated request, in the caller's
//! trace, under the caller's span, with as many `preempted` events as the
//! request's `vllm.request.num_preemptions`, and the distribution of that
//! attribute must be the `vllm:request_num_preemptions` histogram the same
//! run exposes.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod process;
}

use std::collections::BTreeMap;
use std::process::Command;

use common::collector::Collector;
use common::jaeger::{tag, Jaeger};
use serde_json::Value;

const TRACE: &str = "tests/data/generated-seed11.jsonl";

/// The caller's trace and span id of a request, derived from its id.
fn caller(request_id: &str) -> (String, String) {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in request_id.bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    (
        format!("{hash:016x}{:016x}", !hash),
        format!("{:016x}", hash.rotate_left(17)),
    )
}

/// The trace with a `traceparent` on every request start that parses.
fn traced_trace() -> String {
    let text = std::fs::read_to_string(common::paths::repo().join(TRACE)).unwrap();
    text.lines()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(mut record) if record["type"] == "request" && record["request_id"].is_string() => {
                let (trace, span) = caller(record["request_id"].as_str().unwrap());
                record["traceparent"] = Value::from(format!("00-{trace}-{span}-01"));
                record.to_string()
            }
            _ => line.to_owned(),
        })
        .map(|line| line + "\n")
        .collect()
}

/// Requests that terminated, by `vllm:request_success_total`.
fn terminated_requests(samples: &BTreeMap<String, f64>) -> usize {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with("vllm:request_success_total{"))
        .map(|(_, v)| *v as usize)
        .sum()
}

/// The span of one request, attribute by attribute, against the values its
/// metrics recorded; an abort is not an error; a malformed `traceparent` is
/// counted and the request is still tracked, its span in a new trace.
#[test]
fn a_span_carries_the_values_its_metrics_recorded() {
    use opentelemetry::trace::Status;
    use opentelemetry::Value as Attribute;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use vllm_otel_metrics::catalog::RejectReason;
    use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
    use vllm_otel_metrics::instruments::spans::RequestSpans;
    use vllm_otel_metrics::instruments::Instruments;
    use vllm_otel_metrics::protocol::Record;
    use vllm_otel_metrics::tracker::Tracker;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build())
        .with_spans(RequestSpans::new(&provider));
    let records = [
        r#"{"type":"request","request_id":"a","model_name":"m","engine":1,"arrival_time":1000.0,"prompt_len":64,"max_tokens":16,"n":2,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#,
        r#"{"type":"outputs","engine":1,"timestamp":10.5,"received_at":1000.6,"outputs":[{"request_id":"a","new_token_ids":[1],"events":[{"type":"queued","timestamp":10.0},{"type":"scheduled","timestamp":10.25}],"prefill_stats":{"num_prompt_tokens":64,"num_computed_tokens":48,"num_cached_tokens":16,"num_local_cached_tokens":16}}]}"#,
        r#"{"type":"outputs","engine":1,"timestamp":11.5,"received_at":1001.6,"outputs":[{"request_id":"a","new_token_ids":[2],"events":[{"type":"preempted","timestamp":11.0,"reason":"priority"},{"type":"scheduled","timestamp":11.25}]}]}"#,
        r#"{"type":"outputs","engine":1,"timestamp":12.5,"received_at":1002.6,"outputs":[{"request_id":"a","new_token_ids":[3],"finish_reason":"length"}]}"#,
        r#"{"type":"request","request_id":"b","model_name":"m","engine":1,"arrival_time":1000.0,"prompt_len":8,"traceparent":"not-a-trace"}"#,
        r#"{"type":"abort","request_id":"b","received_at":1003.0}"#,
    ];
    let mut rejections = Vec::new();
    for line in records {
        let record: Record = serde_json::from_str(line).unwrap();
        rejections.extend(tracker.apply(&record));
    }
    assert_eq!(rejections.len(), 1, "{rejections:?}");
    assert_eq!(rejections[0].reason, RejectReason::InvalidTraceparent);
    assert_eq!(
        rejections[0].to_string(),
        "request 'b' has an invalid traceparent ('not-a-trace' is not a W3C trace context); it is tracked, its span starts a new trace"
    );
    let text = bridge.encode(Format::Text);
    assert!(text
        .contains("vllm_otel_metrics_rejected_inputs_total{reason=\"invalid_traceparent\"} 1\n"));
    assert!(text.contains(
        "vllm:request_success_total{model_name=\"m\",engine=\"1\",finished_reason=\"abort\"} 1\n"
    ));

    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 2);
    let a = spans
        .iter()
        .find(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.value == Attribute::from("a"))
        })
        .unwrap();
    assert_eq!(a.name, "llm_request");
    assert_eq!(a.span_kind, opentelemetry::trace::SpanKind::Server);
    assert_eq!(
        a.span_context.trace_id().to_string(),
        "0af7651916cd43dd8448eb211c80319c"
    );
    assert_eq!(a.parent_span_id.to_string(), "b7ad6b7169203331");
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    assert_eq!((secs(a.start_time), secs(a.end_time)), (1000.0, 1002.6));
    let attributes: BTreeMap<String, String> = a
        .attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    let expected: BTreeMap<String, String> = [
        ("gen_ai.request.id", "a"),
        ("gen_ai.response.model", "m"),
        ("gen_ai.request.max_tokens", "16"),
        ("gen_ai.request.n", "2"),
        ("gen_ai.usage.prompt_tokens", "64"),
        ("gen_ai.usage.completion_tokens", "3"),
        ("gen_ai.usage.cached_tokens", "16"),
        ("gen_ai.latency.time_in_queue", "0.25"),
        (
            "gen_ai.latency.time_to_first_token",
            &(1000.6f64 - 1000.0).to_string(),
        ),
        ("gen_ai.latency.e2e", &(1002.6f64 - 1000.0).to_string()),
        ("gen_ai.latency.time_in_model_prefill", "0.25"),
        ("gen_ai.latency.time_in_model_decode", "2"),
        ("gen_ai.latency.time_in_model_inference", "2.25"),
        ("vllm.request.num_preemptions", "1"),
        ("vllm.request.finished_reason", "length"),
        ("vllm.engine", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(attributes, expected);
    assert_eq!(a.events.len(), 1);
    let event = &a.events[0];
    assert_eq!(event.name, "preempted");
    // Engine time 11.0 on the frontend's clock, by way of the batch stamped
    // 11.5 and received at 1001.6.
    assert!(
        (secs(event.timestamp) - 1001.1).abs() < 1e-6,
        "{}",
        secs(event.timestamp)
    );
    assert_eq!(event.attributes[0].value, Attribute::I64(1));
    assert_eq!(
        (event.attributes[1].key.as_str(), &event.attributes[1].value),
        ("vllm.preemption.reason", &Attribute::from("priority"))
    );

    let b = spans
        .iter()
        .find(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.value == Attribute::from("b"))
        })
        .unwrap();
    assert_eq!(b.status, Status::Unset, "an abort is not an error");
    assert_eq!(
        b.parent_span_id.to_string(),
        "0000000000000000",
        "a new trace: no parent"
    );
    assert!(b
        .attributes
        .iter()
        .any(|kv| kv.key.as_str() == "vllm.request.finished_reason"
            && kv.value == Attribute::from("abort")));
    provider.shutdown().unwrap();
}

/// A backend that accepts connections and never answers holds each span
/// export until its timeout. The batch span processor keeps at most
/// `OTEL_BSP_MAX_QUEUE_SIZE` spans meanwhile and drops the rest, counted on
/// `/metrics` as `otel_sdk_processor_span_processed_total{error_type="queue_full"}`;
/// recording goes on untouched, and the failed export is the exit status.
#[test]
fn spans_for_a_silent_backend_are_dropped_and_counted_while_recording_goes_on() {
    const QUEUE: usize = 8;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let dir = common::paths::tempdir("silent-traces");
    let trace = dir.join("traced.jsonl");
    std::fs::write(&trace, traced_trace()).unwrap();
    let replay = |traced: bool| {
        let mut command = Command::new(common::process::binary());
        command
            .args(["replay", "--output", "prometheus", "--metrics-addr", "none"])
            .arg(&trace)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_TRACES_EXPORTER")
            .env_remove("OTEL_TRACES_SAMPLER")
            .env("OTEL_BSP_MAX_QUEUE_SIZE", QUEUE.to_string())
            .env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1000");
        if traced {
            command.args(["--otlp-traces-endpoint", &endpoint]);
        }
        command.output().unwrap()
    };

    let untraced = replay(false);
    let traced = replay(true);
    let stderr = String::from_utf8_lossy(&traced.stderr);
    assert_eq!(
        traced.status.code(),
        // The exit status of a failed final export (docs/CLI.md).
        Some(3),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "error: final OTLP export to {endpoint}/v1/traces (traces) failed"
        )),
        "{stderr}"
    );
    let vllm = |output: &std::process::Output| {
        common::exposition::vllm_samples(&String::from_utf8_lossy(&output.stdout))
    };
    assert_eq!(vllm(&traced), vllm(&untraced), "recording is untouched");

    let samples = common::exposition::samples(&String::from_utf8_lossy(&traced.stdout));
    let terminated = terminated_requests(&samples);
    let processed = |error_type: Option<&str>| -> usize {
        let wanted = error_type.map(|e| format!("error_type=\"{e}\""));
        let found: Vec<f64> = samples
            .iter()
            .filter(|(k, _)| k.starts_with("otel_sdk_processor_span_processed_total{"))
            .filter(|(k, _)| match &wanted {
                Some(label) => k.contains(label.as_str()),
                None => !k.contains("error_type="),
            })
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(found.len(), 1, "one series for {error_type:?}: {samples:?}");
        found[0] as usize
    };
    let dropped = processed(Some("queue_full"));
    let handed_to_the_exporter = processed(None);
    // The first batch is stuck in the exporter and the queue is full behind
    // it for the whole replay; at most the export at exit takes the queue.
    assert!(
        handed_to_the_exporter <= QUEUE,
        "{handed_to_the_exporter} spans exported before exit"
    );
    assert!(
        dropped >= terminated - 3 * QUEUE && dropped <= terminated,
        "{dropped} of {terminated} spans dropped"
    );
    drop(silent);
}

mod needs_collector_jaeger {
    use super::*;

    #[test]
    fn one_span_per_terminated_request_reaches_jaeger_with_its_preemptions() {
        let jaeger = Jaeger::start();
        let collector = Collector::start_tracing_to(&jaeger);
        let dir = common::paths::tempdir("traces");
        let trace = dir.join("traced.jsonl");
        std::fs::write(&trace, traced_trace()).unwrap();
        let service = format!("vllm-e2e-{}", std::process::id());
        let output = Command::new(common::process::binary())
            .args(["replay", "--output", "prometheus", "--metrics-addr", "none"])
            .args([
                "--otlp-traces-endpoint",
                &collector.endpoint("grpc"),
                "--otlp-protocol",
                "grpc",
            ])
            .arg(&trace)
            .env("OTEL_SERVICE_NAME", &service)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_TRACES_SAMPLER")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            !stderr.contains("OTLP export"),
            "no export failed: {stderr}"
        );
        let exposition = String::from_utf8(output.stdout).unwrap();
        let samples = common::exposition::samples(&exposition);
        let terminated = terminated_requests(&samples);
        assert!(terminated > 50, "{terminated} terminated requests");

        // Everything the replay pushed, once it is all in Jaeger.
        let collector_log = || format!("collector log:\n{}", collector.log());
        let spans = jaeger.exactly_spans(&service, terminated, &collector_log);

        let mut preemptions: BTreeMap<u64, usize> = BTreeMap::new();
        let mut ids = std::collections::BTreeSet::new();
        let mut events = 0;
        for span in &spans {
            assert_eq!(span["operationName"], "llm_request");
            let id = tag(span, "gen_ai.request.id")
                .and_then(Value::as_str)
                .unwrap();
            // Request ids are unique among live requests only; spans are unique.
            let span_id = span["spanID"].as_str().unwrap().to_owned();
            assert!(ids.insert(span_id), "{id}: a span twice");
            let (trace_id, parent_id) = caller(id);
            assert_eq!(span["traceID"], trace_id, "{id}: the caller's trace");
            let parent = &span["references"][0];
            assert_eq!(
                (&parent["refType"], &parent["spanID"]),
                (&Value::from("CHILD_OF"), &Value::from(parent_id)),
                "{id}"
            );
            let count = tag(span, "vllm.request.num_preemptions")
                .and_then(Value::as_u64)
                .unwrap();
            let preempted = span["logs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|log| {
                    log["fields"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f["key"] == "event" && f["value"] == "preempted")
                })
                .count();
            assert_eq!(
                preempted as u64, count,
                "{id}: one preempted event per preemption"
            );
            events += preempted;
            assert!(tag(span, "vllm.request.finished_reason").is_some(), "{id}");
            assert!(tag(span, "gen_ai.latency.e2e").is_some(), "{id}");
            *preemptions.entry(count).or_default() += 1;
        }

        // The spans' distribution is the histogram's: cumulative counts per bound.
        for le in ["1.0", "2.0", "3.0", "4.0", "5.0", "10.0", "20.0", "+Inf"] {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            let from_spans: usize = preemptions
                .iter()
                .filter(|(count, _)| (**count as f64) <= bound)
                .map(|(_, n)| n)
                .sum();
            let from_metrics = common::exposition::sum_where(
                &exposition,
                "vllm:request_num_preemptions_bucket",
                "le",
                le,
            );
            assert_eq!(from_spans as f64, from_metrics, "le={le}");
        }
        let total_preemptions: f64 = samples
            .iter()
            .filter(|(k, _)| k.starts_with("vllm:request_num_preemptions_sum{"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(events as f64, total_preemptions);
        eprintln!(
        "traces: {} spans for {terminated} terminated requests, {events} preempted events, distribution {preemptions:?}",
        spans.len()
    );

        // The simulator's requests too, with spans in new traces.
        let service = format!("vllm-e2e-sim-{}", std::process::id());
        let output = Command::new(common::process::binary())
            .args([
                "simulate",
                "--duration",
                "20",
                "--output",
                "prometheus",
                "--metrics-addr",
                "none",
            ])
            .args([
                "--otlp-traces-endpoint",
                &collector.endpoint("http/protobuf"),
            ])
            .env("OTEL_SERVICE_NAME", &service)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let simulated = terminated_requests(&common::exposition::samples(
            &String::from_utf8(output.stdout).unwrap(),
        ));
        common::process::wait_for(30, "the simulator's spans in Jaeger", || {
            (jaeger.spans(&service)?.len() == simulated).then_some(())
        });
    }
}
