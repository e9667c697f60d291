//! The vLLM stat-logger plugin's records (`iteration_stats`, `plugin_drops`)
//! end to end, applied with vLLM's Python logger's rules (docs/SEMANTICS.md,
//! "Plugin path"): through `replay` and through gRPC ingest, each touched
//! family compared whole with samples worked out by hand from the records;
//! invalid records refused and located; `--token-buckets python`; the
//! finished requests' `llm_request` spans; the start-up series of a label
//! set's first record.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod process;
    pub mod serve;
}

use std::collections::BTreeMap;

use vllm_otel_metrics::catalog::{
    Buckets, TokenBuckets, DEFAULT_MAX_MODEL_LEN, PREEMPTION_BUCKETS,
};
use vllm_otel_metrics::export::prometheus::format_float;

/// Two steps of engine 0 and one report of drops. Step 1 is the interface's
/// example; step 2 has no prompt or generated tokens (its iteration tokens
/// are observed anyway, as 0), a request with more cached than prompt
/// tokens (prefill KV computed saturates at 0) and `max_tokens_param` 0
/// (not observed, as Python's `if finished_request.max_tokens_param:`).
const TRACE: &str = r#"{"type":"iteration_stats","model_name":"m","engine":0,"received_at":1700000000.5,"num_generation_tokens":12,"prompt_token_stats":{"computed":100,"local_cache_hit":16,"external_kv_transfer":0,"cached_tokens":16,"total":116},"num_preempted_reqs":1,"max_num_generation_tokens_iter":[30],"n_params_iter":[1],"time_to_first_tokens_iter":[0.25],"inter_token_latencies_iter":[0.02,0.03],"finished_requests":[{"request_id":"r1","finish_reason":"stop","e2e_latency":1.5,"queued_time":0.1,"prefill_time":0.2,"inference_time":1.3,"decode_time":1.1,"mean_time_per_output_token":0.04,"num_prompt_tokens":116,"num_generation_tokens":30,"num_preemptions":1,"num_cached_tokens":16,"max_tokens_param":64}]}
{"type":"plugin_drops","dropped":5}
{"type":"iteration_stats","model_name":"m","engine":0,"received_at":1700000002.0,"inter_token_latencies_iter":[0.05],"finished_requests":[{"request_id":"r2","finish_reason":"length","e2e_latency":0.5,"num_prompt_tokens":8,"num_generation_tokens":1,"num_cached_tokens":12,"max_tokens_param":0}]}
"#;

const M0: &str = r#"model_name="m",engine="0""#;

/// Every sample of family `name` in an exposition (`name`, `name_total`,
/// `name_bucket`, `name_sum`, `name_count`).
fn family(exposition: &str, name: &str) -> BTreeMap<String, f64> {
    common::exposition::samples(exposition)
        .into_iter()
        .filter(|(key, _)| {
            let metric = key.split('{').next().unwrap();
            ["", "_total", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| metric == format!("{name}{suffix}"))
        })
        .collect()
}

/// A counter family of `(m, 0)`: its extra label (`finished_reason="stop"`)
/// or none, and value.
fn counter(name: &str, series: &[(&str, f64)]) -> BTreeMap<String, f64> {
    series
        .iter()
        .map(|(extra, value)| {
            let labels = if extra.is_empty() {
                M0.to_owned()
            } else {
                format!("{M0},{extra}")
            };
            (format!("{name}_total{{{labels}}}"), *value)
        })
        .collect()
}

/// A histogram family of `(m, 0)` with `bounds` that observed `observations`
/// in this order.
fn histogram(name: &str, bounds: &[f64], observations: &[f64]) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    let les = bounds.iter().map(|b| (format_float(*b), *b));
    for (le, bound) in les.chain([("+Inf".to_owned(), f64::INFINITY)]) {
        let below = observations.iter().filter(|o| **o <= bound).count();
        samples.insert(format!("{name}_bucket{{{M0},le=\"{le}\"}}"), below as f64);
    }
    let sum = observations.iter().fold(0.0, |sum, o| sum + o);
    samples.insert(format!("{name}_sum{{{M0}}}"), sum);
    samples.insert(format!("{name}_count{{{M0}}}"), observations.len() as f64);
    samples
}

fn tokens() -> Vec<f64> {
    Buckets::Tokens.boundaries(DEFAULT_MAX_MODEL_LEN)
}

/// What [`TRACE`] records, family by family, worked out from the rules.
fn expected() -> Vec<(&'static str, BTreeMap<String, f64>)> {
    let success = |reason: &str| format!("finished_reason=\"{reason}\"");
    let by_source = |source: &str| format!("source=\"{source}\"");
    vec![
        (
            "vllm:num_preemptions",
            counter("vllm:num_preemptions", &[("", 1.0)]),
        ),
        (
            "vllm:prompt_tokens",
            counter("vllm:prompt_tokens", &[("", 116.0)]),
        ),
        (
            "vllm:prompt_tokens_by_source",
            counter(
                "vllm:prompt_tokens_by_source",
                &[
                    (&by_source("local_compute"), 100.0),
                    (&by_source("local_cache_hit"), 16.0),
                    (&by_source("external_kv_transfer"), 0.0),
                ],
            ),
        ),
        (
            "vllm:prompt_tokens_cached",
            counter("vllm:prompt_tokens_cached", &[("", 16.0)]),
        ),
        (
            "vllm:generation_tokens",
            counter("vllm:generation_tokens", &[("", 12.0)]),
        ),
        (
            "vllm:request_success",
            counter(
                "vllm:request_success",
                &[
                    (&success("stop"), 1.0),
                    (&success("length"), 1.0),
                    (&success("abort"), 0.0),
                    (&success("error"), 0.0),
                    (&success("repetition"), 0.0),
                ],
            ),
        ),
        (
            "vllm:iteration_tokens_total",
            histogram(
                "vllm:iteration_tokens_total",
                &common::exposition::catalog_bounds("vllm:iteration_tokens_total"),
                &[112.0, 0.0],
            ),
        ),
        (
            "vllm:request_prompt_tokens",
            histogram("vllm:request_prompt_tokens", &tokens(), &[116.0, 8.0]),
        ),
        (
            "vllm:request_generation_tokens",
            histogram("vllm:request_generation_tokens", &tokens(), &[30.0, 1.0]),
        ),
        (
            "vllm:request_max_num_generation_tokens",
            histogram("vllm:request_max_num_generation_tokens", &tokens(), &[30.0]),
        ),
        (
            "vllm:request_params_max_tokens",
            histogram("vllm:request_params_max_tokens", &tokens(), &[64.0]),
        ),
        (
            "vllm:request_params_n",
            histogram(
                "vllm:request_params_n",
                &common::exposition::catalog_bounds("vllm:request_params_n"),
                &[1.0],
            ),
        ),
        (
            "vllm:request_num_preemptions",
            histogram(
                "vllm:request_num_preemptions",
                PREEMPTION_BUCKETS,
                &[1.0, 0.0],
            ),
        ),
        (
            "vllm:request_prefill_kv_computed_tokens",
            histogram(
                "vllm:request_prefill_kv_computed_tokens",
                &tokens(),
                &[100.0, 0.0],
            ),
        ),
        (
            "vllm:time_to_first_token_seconds",
            histogram(
                "vllm:time_to_first_token_seconds",
                &common::exposition::catalog_bounds("vllm:time_to_first_token_seconds"),
                &[0.25],
            ),
        ),
        (
            "vllm:inter_token_latency_seconds",
            histogram(
                "vllm:inter_token_latency_seconds",
                &common::exposition::catalog_bounds("vllm:inter_token_latency_seconds"),
                &[0.02, 0.03, 0.05],
            ),
        ),
        (
            "vllm:e2e_request_latency_seconds",
            histogram(
                "vllm:e2e_request_latency_seconds",
                &common::exposition::catalog_bounds("vllm:e2e_request_latency_seconds"),
                &[1.5, 0.5],
            ),
        ),
        (
            "vllm:request_queue_time_seconds",
            histogram(
                "vllm:request_queue_time_seconds",
                &common::exposition::catalog_bounds("vllm:e2e_request_latency_seconds"),
                &[0.1, 0.0],
            ),
        ),
        (
            "vllm:request_prefill_time_seconds",
            histogram(
                "vllm:request_prefill_time_seconds",
                &common::exposition::catalog_bounds("vllm:e2e_request_latency_seconds"),
                &[0.2, 0.0],
            ),
        ),
        (
            "vllm:request_inference_time_seconds",
            histogram(
                "vllm:request_inference_time_seconds",
                &common::exposition::catalog_bounds("vllm:e2e_request_latency_seconds"),
                &[1.3, 0.0],
            ),
        ),
        (
            "vllm:request_decode_time_seconds",
            histogram(
                "vllm:request_decode_time_seconds",
                &common::exposition::catalog_bounds("vllm:e2e_request_latency_seconds"),
                &[1.1, 0.0],
            ),
        ),
        (
            "vllm:request_time_per_output_token_seconds",
            histogram(
                "vllm:request_time_per_output_token_seconds",
                &common::exposition::catalog_bounds("vllm:inter_token_latency_seconds"),
                &[0.04, 0.0],
            ),
        ),
        (
            "vllm_otel_metrics_plugin_dropped_records",
            [(
                "vllm_otel_metrics_plugin_dropped_records_total".to_owned(),
                5.0,
            )]
            .into(),
        ),
    ]
}

/// Every family [`expected`] names is exactly as expected in `exposition`.
fn assert_expected_families(exposition: &str) {
    for (name, expected) in expected() {
        assert_eq!(family(exposition, name), expected, "{name}");
    }
}

fn write_trace(tag: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = common::paths::tempdir(tag);
    let path = dir.join("plugin.jsonl");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn replay_applies_the_python_logger_rules() {
    let (dir, trace) = write_trace("iteration", TRACE);
    let (code, stdout, stderr) = common::process::replay(&trace);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_expected_families(&stdout);
    // Nothing of the engine tier: the plugin's records are per-request ones.
    assert_eq!(
        family(&stdout, "vllm:num_requests_running"),
        BTreeMap::new()
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn grpc_ingest_applies_the_same_rules_and_names_bad_records() {
    use vllm_otel_metrics::protocol::Record;
    use vllm_otel_metrics::sources::ingest::proto::{pb, record_to_proto};

    let server = common::serve::Server::start(&[]);
    let mut wire: Vec<pb::Record> = TRACE
        .lines()
        .map(|line| record_to_proto(&serde_json::from_str::<Record>(line).unwrap()))
        .collect();
    // A finished request without a finish reason, then an infinite time
    // to first token, under a model of their own: each bad part is left out
    // alone, the rest of its step recorded.
    wire.push(pb::Record {
        record: Some(pb::record::Record::IterationStats(pb::IterationStats {
            model_name: "other".into(),
            num_generation_tokens: 1000,
            finished_requests: vec![pb::FinishedRequest {
                request_id: "r3".into(),
                ..Default::default()
            }],
            ..Default::default()
        })),
    });
    wire.push(pb::Record {
        record: Some(pb::record::Record::IterationStats(pb::IterationStats {
            model_name: "other".into(),
            num_generation_tokens: 1000,
            time_to_first_tokens_iter: vec![0.5, f64::INFINITY],
            ..Default::default()
        })),
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let target = server.target();
    let summary = runtime
        .block_on(async move {
            let mut client = pb::ingest_client::IngestClient::connect(target).await?;
            let summary = client.stream(tokio_stream::iter(wire)).await?;
            Ok::<_, Box<dyn std::error::Error>>(summary.into_inner())
        })
        .unwrap();
    assert_eq!(
        summary,
        pb::IngestSummary {
            records_applied: 5,
            records_rejected: 0,
            rejected_by_reason: [("invalid_record".to_owned(), 2)].into(),
            first_rejections: vec![
                "record 4: finished_requests[0] (request 'r3'): no finish reason (FINISH_REASON_UNSPECIFIED)".to_owned(),
                "record 5: invalid iteration_value record: time_to_first_tokens_iter[1] is not a finite number (inf)".to_owned(),
            ],
            outputs_applied: 0,
        }
    );
    let exposition = common::http::http_get(server.metrics, "/metrics").unwrap();
    // The trace's own label set is recorded exactly as by replay.
    let of_m: Vec<&str> = exposition
        .lines()
        .filter(|line| !line.contains(r#"model_name="other""#))
        .collect();
    assert_expected_families(&of_m.join("\n"));
    let other = r#"{model_name="other",engine="0"}"#;
    let samples = common::exposition::samples(&exposition);
    assert_eq!(
        (
            samples[&format!("vllm:generation_tokens_total{other}")],
            samples[&format!("vllm:time_to_first_token_seconds_count{other}")],
            samples[&format!("vllm:time_to_first_token_seconds_sum{other}")],
            samples.get(&format!("vllm:e2e_request_latency_seconds_count{other}")),
        ),
        (2000.0, 1.0, 0.5, Some(&0.0)),
        "the good parts of the two steps"
    );
    assert_eq!(
        family(&exposition, "vllm_otel_metrics_rejected_inputs")[r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#],
        2.0
    );
}

#[test]
fn invalid_plugin_records_are_located_and_change_nothing() {
    let long_list = format!(
        r#"{{"type":"iteration_stats","model_name":"m","engine":0,"n_params_iter":[{}]}}"#,
        vec!["1"; 65_537].join(",")
    );
    let long_model = format!(
        r#"{{"type":"iteration_stats","model_name":"{}","engine":0}}"#,
        "m".repeat(300)
    );
    let lines = [
        r#"{"type":"iteration_stats","model_name":"m","engine":0,"num_generation_tokens":3}"#,
        r#"{"type":"iteration_stats","model_name":"m","engine":0,"num_generation_tokens":3,"inter_token_latencies_iter":[0.1,1e999]}"#,
        r#"{"type":"iteration_stats","model_name":"m","engine":0,"num_generation_tokens":3,"finished_requests":[{"request_id":"r1"}]}"#,
        r#"{"type":"iteration_stats","model_name":"m","engine":0,"received_at":-1}"#,
        &long_model,
        &long_list,
        r#"{"type":"iteration_stats","model_name":"m","engine":0,"finished_requests":[{"request_id":"r1","finish_reason":"stop"},{"request_id":"r2","finish_reason":"stop","e2e_latency":null,"decode_time":"slow"}]}"#,
        r#"{"type":"plugin_drops","dropped":-1}"#,
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (dir, trace) = write_trace("iteration-invalid", &text);
    let (code, stdout, stderr) = common::process::replay(&trace);
    let file = trace.to_str().unwrap();
    let expected_stderr = [
        "2: invalid JSON: number out of range (column 119)",
        "3: invalid record: missing field `finish_reason` (column 120)",
        "4: invalid iteration_stats record: received_at is negative (-1)",
        "5: invalid iteration_stats record: model_name is 300 bytes, more than the limit of 256 ('mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm… (300 bytes)')",
        "6: invalid iteration_stats record: n_params_iter has 65537 entries, more than 65536 (MAX_ITERATION_ENTRIES)",
        "7: invalid record: invalid type: string \"slow\", expected f64 (column 199)",
        "8: invalid record: invalid value: integer `-1`, expected u64 (column 35)",
    ]
    .iter()
    .map(|line| format!("{file}:{line}\n"))
    .chain([format!("{file}: 7 invalid line(s) skipped\n")])
    .collect::<String>();
    assert_eq!((code, stderr), (2, expected_stderr));
    // Only line 1 applied.
    assert_eq!(
        family(&stdout, "vllm:generation_tokens"),
        counter("vllm:generation_tokens", &[("", 3.0)])
    );
    assert_eq!(
        family(&stdout, "vllm:iteration_tokens_total"),
        histogram(
            "vllm:iteration_tokens_total",
            &common::exposition::catalog_bounds("vllm:iteration_tokens_total"),
            &[3.0]
        )
    );
    assert_eq!(
        family(&stdout, "vllm:request_success"),
        counter(
            "vllm:request_success",
            &[
                ("finished_reason=\"stop\"", 0.0),
                ("finished_reason=\"length\"", 0.0),
                ("finished_reason=\"abort\"", 0.0),
                ("finished_reason=\"error\"", 0.0),
                ("finished_reason=\"repetition\"", 0.0),
            ]
        )
    );
    assert_eq!(
        family(&stdout, "vllm_otel_metrics_rejected_inputs")[r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#],
        7.0
    );
    assert_eq!(
        family(&stdout, "vllm_otel_metrics_plugin_dropped_records"),
        [(
            "vllm_otel_metrics_plugin_dropped_records_total".to_owned(),
            0.0
        )]
        .into()
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `--token-buckets python` ends the token buckets at the last 1-2-5 value
/// not above `--max-model-len`; `rust` (the default) appends the model
/// length. The other histograms do not change.
#[test]
fn token_buckets_python_stop_at_the_last_1_2_5_value() {
    let record = r#"{"type":"iteration_stats","model_name":"m","engine":0,"n_params_iter":[2],"finished_requests":[{"request_id":"r","finish_reason":"stop","num_prompt_tokens":60,"num_generation_tokens":50}]}"#;
    let (dir, trace) = write_trace("token-buckets", &format!("{record}\n"));
    let replay = |style: &str| {
        let (code, stdout, stderr) = common::process::replay_with(
            &trace,
            &["--max-model-len", "60", "--token-buckets", style],
        );
        assert_eq!((code, stderr.as_str()), (0, ""), "{style}");
        stdout
    };
    let python = replay("python");
    let rust = replay("rust");
    let python_bounds = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0];
    let rust_bounds = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 60.0];
    assert_eq!(
        Buckets::Tokens.boundaries_with(60, TokenBuckets::Python),
        python_bounds
    );
    for (exposition, bounds) in [(&python, &python_bounds[..]), (&rust, &rust_bounds[..])] {
        assert_eq!(
            family(exposition, "vllm:request_prompt_tokens"),
            histogram("vllm:request_prompt_tokens", bounds, &[60.0])
        );
        assert_eq!(
            family(exposition, "vllm:request_generation_tokens"),
            histogram("vllm:request_generation_tokens", bounds, &[50.0])
        );
        assert_eq!(
            family(exposition, "vllm:request_params_n"),
            histogram(
                "vllm:request_params_n",
                &common::exposition::catalog_bounds("vllm:request_params_n"),
                &[2.0]
            )
        );
    }
    // Exactly at the boundary, and just above the last one.
    assert_eq!(
        family(&python, "vllm:request_prompt_tokens")
            [&format!(r#"vllm:request_prompt_tokens_bucket{{{M0},le="50.0"}}"#)],
        0.0
    );
    assert_eq!(
        family(&rust, "vllm:request_prompt_tokens")
            [&format!(r#"vllm:request_prompt_tokens_bucket{{{M0},le="60.0"}}"#)],
        1.0
    );
    let (code, _, stderr) = common::process::run(&["replay", "-", "--token-buckets", "go"]);
    assert_eq!(code, 2, "{stderr}");
    std::fs::remove_dir_all(dir).ok();
}

/// The first `iteration_stats` record of a label set creates what vLLM's
/// Python logger creates for an engine at start-up: every counter series
/// it touches at 0 (`request_success` of every reason included) and every
/// histogram series empty; only `iteration_tokens_total` has its one
/// observation.
#[test]
fn the_first_record_of_a_label_set_creates_its_series() {
    use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
    use vllm_otel_metrics::instruments::Instruments;
    use vllm_otel_metrics::protocol::Record;
    use vllm_otel_metrics::tracker::Tracker;

    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
    let record: Record =
        serde_json::from_str(r#"{"type":"iteration_stats","model_name":"m","engine":0}"#).unwrap();
    assert_eq!(tracker.apply(&record), Vec::new());
    let exposition = bridge.encode(Format::Text);
    let zero = |name| counter(name, &[("", 0.0)]);
    assert_eq!(
        family(&exposition, "vllm:request_success"),
        counter(
            "vllm:request_success",
            &[
                ("finished_reason=\"stop\"", 0.0),
                ("finished_reason=\"length\"", 0.0),
                ("finished_reason=\"abort\"", 0.0),
                ("finished_reason=\"error\"", 0.0),
                ("finished_reason=\"repetition\"", 0.0),
            ]
        )
    );
    assert_eq!(
        family(&exposition, "vllm:prompt_tokens_by_source"),
        counter(
            "vllm:prompt_tokens_by_source",
            &[
                ("source=\"local_compute\"", 0.0),
                ("source=\"local_cache_hit\"", 0.0),
                ("source=\"external_kv_transfer\"", 0.0),
            ]
        )
    );
    for name in [
        "vllm:num_preemptions",
        "vllm:prompt_tokens",
        "vllm:prompt_tokens_cached",
        "vllm:generation_tokens",
    ] {
        assert_eq!(family(&exposition, name), zero(name), "{name}");
    }
    assert_eq!(
        family(&exposition, "vllm:iteration_tokens_total"),
        histogram(
            "vllm:iteration_tokens_total",
            &common::exposition::catalog_bounds("vllm:iteration_tokens_total"),
            &[0.0]
        )
    );
    for (name, bounds) in [
        ("vllm:request_prompt_tokens", tokens()),
        ("vllm:request_params_max_tokens", tokens()),
        ("vllm:request_num_preemptions", PREEMPTION_BUCKETS.to_vec()),
        (
            "vllm:time_to_first_token_seconds",
            common::exposition::catalog_bounds("vllm:time_to_first_token_seconds"),
        ),
        (
            "vllm:request_decode_time_seconds",
            common::exposition::catalog_bounds("vllm:e2e_request_latency_seconds"),
        ),
    ] {
        assert_eq!(
            family(&exposition, name),
            histogram(name, &bounds, &[]),
            "{name}"
        );
    }
}

/// Each finished request becomes one `llm_request` span: from
/// `received_at − e2e_latency` to `received_at`, in a new trace, with the
/// attributes its values give, and no events.
/// A tracker whose spans go to an in-memory exporter.
fn traced_tracker() -> (
    opentelemetry_sdk::trace::InMemorySpanExporter,
    vllm_otel_metrics::tracker::Tracker,
) {
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use vllm_otel_metrics::instruments::spans::RequestSpans;
    use vllm_otel_metrics::instruments::Instruments;
    use vllm_otel_metrics::tracker::Tracker;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracker =
        Tracker::new(Instruments::builder().build()).with_spans(RequestSpans::new(&provider));
    (exporter, tracker)
}

#[test]
fn each_finished_request_becomes_one_span() {
    use opentelemetry::trace::{SpanId, SpanKind, Status};
    use opentelemetry::KeyValue;
    use std::time::{Duration, UNIX_EPOCH};
    use vllm_otel_metrics::protocol::Record;

    let (exporter, mut tracker) = traced_tracker();
    for line in TRACE.lines() {
        let record: Record = serde_json::from_str(line).unwrap();
        assert_eq!(tracker.apply(&record), Vec::new());
    }
    let without_id = r#"{"type":"iteration_stats","model_name":"m","engine":3,"received_at":1700000010.0,"finished_requests":[{"finish_reason":"abort","e2e_latency":2.0}]}"#;
    assert_eq!(
        tracker.apply(&serde_json::from_str(without_id).unwrap()),
        Vec::new()
    );
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 3);
    let at = |secs: f64| UNIX_EPOCH + Duration::from_secs_f64(secs);
    let expected = [
        (
            at(1_700_000_000.5 - 1.5),
            at(1_700_000_000.5),
            vec![
                KeyValue::new("gen_ai.request.id", "r1"),
                KeyValue::new("gen_ai.response.model", "m"),
                KeyValue::new("gen_ai.usage.prompt_tokens", 116_i64),
                KeyValue::new("gen_ai.usage.completion_tokens", 30_i64),
                KeyValue::new("gen_ai.usage.cached_tokens", 16_i64),
                KeyValue::new("gen_ai.latency.time_in_queue", 0.1),
                KeyValue::new("gen_ai.latency.e2e", 1.5),
                KeyValue::new("gen_ai.latency.time_in_model_prefill", 0.2),
                KeyValue::new("gen_ai.latency.time_in_model_decode", 1.1),
                KeyValue::new("gen_ai.latency.time_in_model_inference", 1.3),
                KeyValue::new("vllm.request.num_preemptions", 1_i64),
                KeyValue::new("vllm.request.finished_reason", "stop"),
                KeyValue::new("vllm.engine", 0_i64),
                KeyValue::new("gen_ai.request.max_tokens", 64_i64),
            ],
        ),
        (
            at(1_700_000_002.0 - 0.5),
            at(1_700_000_002.0),
            vec![
                KeyValue::new("gen_ai.request.id", "r2"),
                KeyValue::new("gen_ai.response.model", "m"),
                KeyValue::new("gen_ai.usage.prompt_tokens", 8_i64),
                KeyValue::new("gen_ai.usage.completion_tokens", 1_i64),
                KeyValue::new("gen_ai.usage.cached_tokens", 12_i64),
                KeyValue::new("gen_ai.latency.time_in_queue", 0.0),
                KeyValue::new("gen_ai.latency.e2e", 0.5),
                KeyValue::new("gen_ai.latency.time_in_model_prefill", 0.0),
                KeyValue::new("gen_ai.latency.time_in_model_decode", 0.0),
                KeyValue::new("gen_ai.latency.time_in_model_inference", 0.0),
                KeyValue::new("vllm.request.num_preemptions", 0_i64),
                KeyValue::new("vllm.request.finished_reason", "length"),
                KeyValue::new("vllm.engine", 0_i64),
                KeyValue::new("gen_ai.request.max_tokens", 0_i64),
            ],
        ),
        (
            at(1_700_000_008.0),
            at(1_700_000_010.0),
            vec![
                KeyValue::new("gen_ai.response.model", "m"),
                KeyValue::new("gen_ai.usage.prompt_tokens", 0_i64),
                KeyValue::new("gen_ai.usage.completion_tokens", 0_i64),
                KeyValue::new("gen_ai.usage.cached_tokens", 0_i64),
                KeyValue::new("gen_ai.latency.time_in_queue", 0.0),
                KeyValue::new("gen_ai.latency.e2e", 2.0),
                KeyValue::new("gen_ai.latency.time_in_model_prefill", 0.0),
                KeyValue::new("gen_ai.latency.time_in_model_decode", 0.0),
                KeyValue::new("gen_ai.latency.time_in_model_inference", 0.0),
                KeyValue::new("vllm.request.num_preemptions", 0_i64),
                KeyValue::new("vllm.request.finished_reason", "abort"),
                KeyValue::new("vllm.engine", 3_i64),
            ],
        ),
    ];
    for (span, (start, end, attributes)) in spans.iter().zip(expected) {
        assert_eq!(span.name, "llm_request");
        assert_eq!(span.span_kind, SpanKind::Server);
        assert_eq!((span.start_time, span.end_time), (start, end));
        assert_eq!(span.attributes, attributes);
        assert_eq!(span.events.len(), 0, "no preempted events");
        assert_eq!(span.parent_span_id, SpanId::INVALID, "a new trace");
        assert_eq!(span.status, Status::Unset);
    }
    let traces: std::collections::BTreeSet<_> = spans
        .iter()
        .map(|s| s.span_context.trace_id().to_string())
        .collect();
    assert_eq!(traces.len(), 3, "one trace each");
}

/// An `engine_config` whose `max_model_len` differs from `--max-model-len`
/// is warned about once per `(model_name, engine)`; an equal one, or none,
/// is not. Nothing else changes.
#[test]
fn a_different_max_model_len_is_warned_about_once_per_engine() {
    let lines = [
        r#"{"type":"engine_config","model_name":"m","engine":0,"max_model_len":4096}"#,
        r#"{"type":"engine_config","model_name":"m","engine":0,"max_model_len":4096}"#,
        r#"{"type":"engine_config","model_name":"m","engine":1,"max_model_len":8192}"#,
        r#"{"type":"engine_config","model_name":"m","engine":2,"max_model_len":131072}"#,
        r#"{"type":"engine_config","model_name":"m","engine":3}"#,
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (dir, trace) = write_trace("max-model-len", &text);
    let (code, stdout, stderr) = common::process::replay(&trace);
    let warning = |engine: u32, len: u32| {
        format!(" WARN engine {engine} of model 'm' has max_model_len {len}, but the token histograms' buckets are built for max_model_len 131072; configure max_model_len {len} (the command line's --max-model-len) for vLLM's buckets\n")
    };
    assert_eq!(
        (code, stderr),
        (0, format!("{}{}", warning(0, 4096), warning(1, 8192)))
    );
    let without: String = lines
        .iter()
        .map(|l| {
            l.replace(r#","max_model_len":4096"#, "")
                .replace(r#","max_model_len":8192"#, "")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let (dir_without, trace_without) = write_trace("max-model-len", &without);
    let (code, stdout_without, stderr) = common::process::replay(&trace_without);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(stdout, stdout_without);
    std::fs::remove_dir_all(dir).ok();
    std::fs::remove_dir_all(dir_without).ok();
}

/// Values vLLM's logger would observe as they are (a negative duration, a
/// time far in the future) are recorded, and their spans never panic.
#[test]
fn extreme_values_are_recorded_and_spans_do_not_panic() {
    use std::time::UNIX_EPOCH;
    use vllm_otel_metrics::protocol::Record;

    let (exporter, mut tracker) = traced_tracker();
    let line = r#"{"type":"iteration_stats","model_name":"m","engine":0,"received_at":1e19,"inter_token_latencies_iter":[-0.5],"finished_requests":[{"request_id":"r","finish_reason":"stop","e2e_latency":-1e300,"queued_time":-2.0}]}"#;
    let record: Record = serde_json::from_str(line).unwrap();
    assert_eq!(tracker.apply(&record), Vec::new());
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), 1);
    // Neither end can be represented: both are the epoch.
    assert_eq!(
        (spans[0].start_time, spans[0].end_time),
        (UNIX_EPOCH, UNIX_EPOCH)
    );
}
