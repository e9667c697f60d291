//! Exemplars end to end, every component real: `simulate --realtime`
//! exports its `llm_request` spans with `--otlp-traces-endpoint` into the
//! project's Collector (the shipped config's traces pipeline), which
//! forwards them to a real Jaeger (the shipped `jaeger.yaml`), and serves
//! `/metrics` to a real Prometheus scraping every second with
//! `--enable-feature=exemplar-storage`. Exemplars are left at their default,
//! which exporting spans turns on.
//!
//! Every exemplar Prometheus stored for `vllm:request_num_preemptions_bucket`
//! and `vllm:time_to_first_token_seconds_bucket` must name a trace Jaeger
//! holds, with an `llm_request` span of that id, of the series' model and
//! engine, whose attribute is the exemplar's value exactly; the value must
//! lie in the series' bucket (`le` and the catalog's bound below it), and
//! the exemplar's time must be the request's end (preemptions) or its first
//! token (TTFT). The run's summary names the most-preempted request's trace:
//! Jaeger must hold it, with the most preemptions of the run's spans.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod process;
    pub mod prometheus_server;
}

use std::collections::HashMap;
use std::process::{Command, Stdio};

use common::collector::Collector;
use common::jaeger::{tag, Jaeger};
use common::process::Guard;
use serde_json::Value;

/// A realtime run of about 25 s (15 s of arrivals, then the drain) whose
/// small KV cache preempts about a quarter of its requests, some twice or
/// more, on two engines (two series per family); it keeps serving
/// `/metrics` for a few seconds after, for the last scrape.
const SIMULATION: &[&str] = &[
    "simulate",
    "--realtime",
    "--duration",
    "15",
    "--seed",
    "3",
    "--engines",
    "2",
    "--rate",
    "20",
    "--kv-blocks",
    "192",
    "--prompt-len",
    "256",
    "--output-len",
    "96",
    "--linger",
    "6",
];

/// A family with exemplars, and the `llm_request` attribute its exemplars'
/// values are.
struct Family {
    bucket_series: &'static str,
    vllm_name: &'static str,
    attribute: &'static str,
    /// Where the exemplar's timestamp is in the request: at its first token
    /// (arrival + value), else at its end.
    at_first_token: bool,
}

const FAMILIES: [Family; 2] = [
    Family {
        bucket_series: "vllm:request_num_preemptions_bucket",
        vllm_name: "vllm:request_num_preemptions",
        attribute: "vllm.request.num_preemptions",
        at_first_token: false,
    },
    Family {
        bucket_series: "vllm:time_to_first_token_seconds_bucket",
        vllm_name: "vllm:time_to_first_token_seconds",
        attribute: "gen_ai.latency.time_to_first_token",
        at_first_token: true,
    },
];

/// Every exemplar must be a request's; the run gives far more.
const AT_LEAST: usize = 20;

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn parse_bound(text: &str) -> f64 {
    match text {
        "+Inf" => f64::INFINITY,
        other => other
            .parse()
            .unwrap_or_else(|e| panic!("le=\"{other}\": {e}")),
    }
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The `most-preempted request: N preemptions, trace T (its llm_request
/// span S)` line of the summary: (N, T, S).
fn most_preempted(line: &str) -> (u64, String, String) {
    let parse = || -> Option<(u64, String, String)> {
        let rest = line.strip_prefix("most-preempted request: ")?;
        let (count, rest) = rest.split_once(" preemptions, trace ")?;
        let (trace, rest) = rest.split_once(" (its llm_request span ")?;
        let span = rest.strip_suffix(')')?;
        Some((count.parse().ok()?, trace.to_owned(), span.to_owned()))
    };
    parse().unwrap_or_else(|| panic!("not a most-preempted line with a trace: {line:?}"))
}

/// Jaeger's traces, each fetched once (`GET /api/traces/<id>`).
struct Traces<'a> {
    jaeger: &'a Jaeger,
    by_id: HashMap<String, Value>,
}

impl Traces<'_> {
    /// The span `span_id` of trace `trace_id` and its process' service
    /// name; fails when Jaeger has no such trace or span.
    fn span(&mut self, trace_id: &str, span_id: &str) -> (Value, String) {
        let jaeger = self.jaeger;
        let trace = self.by_id.entry(trace_id.to_owned()).or_insert_with(|| {
            let path = format!("/api/traces/{trace_id}");
            let body = common::http::http_get(jaeger.query, &path)
                .unwrap_or_else(|| panic!("Jaeger has no trace {trace_id}"));
            let json: Value = serde_json::from_str(&body).unwrap();
            json["data"][0].clone()
        });
        assert_eq!(trace["traceID"], trace_id, "Jaeger's trace {trace_id}");
        let span = trace["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["spanID"] == span_id)
            .unwrap_or_else(|| panic!("trace {trace_id} has no span {span_id}: {trace}"))
            .clone();
        let process = span["processID"].as_str().unwrap();
        let service = trace["processes"][process]["serviceName"]
            .as_str()
            .unwrap()
            .to_owned();
        (span, service)
    }
}

/// Seconds since the epoch of a Jaeger span's start and end.
fn span_times(span: &Value) -> (f64, f64) {
    let start = span["startTime"].as_u64().unwrap();
    let duration = span["duration"].as_u64().unwrap();
    (start as f64 / 1e6, (start + duration) as f64 / 1e6)
}

/// Prometheus' `/api/v1/query_exemplars` for `series` between `start` and
/// `end`: per series, its labels and its exemplars.
fn query_exemplars(port: u16, series: &str, start: f64, end: f64) -> Vec<Value> {
    let path = format!(
        "/api/v1/query_exemplars?query={}&start={start:.3}&end={end:.3}",
        common::prometheus_server::url_encode(series)
    );
    let (status, body) = common::http::get(port, &path).unwrap();
    let json: Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("HTTP {status}, not JSON ({e}): {body}"));
    assert_eq!(json["status"], "success", "HTTP {status}: {body}");
    json["data"].as_array().cloned().unwrap_or_default()
}

/// A sample of Prometheus' own metrics (`/metrics` on its port).
fn prometheus_own(port: u16, name: &str) -> f64 {
    let text = common::http::http_get(port, "/metrics").unwrap_or_default();
    common::exposition::sum_of(&text, name)
}

mod needs_collector_jaeger_prometheus {
    use super::*;

    #[test]
    fn every_exemplar_prometheus_stores_names_its_requests_llm_request_span_in_jaeger() {
        let began = std::time::Instant::now();
        let jaeger = Jaeger::start();
        let collector = Collector::start_tracing_to(&jaeger);
        let metrics_port = common::http::free_port();
        let dir = common::paths::tempdir("exemplars-live");
        let (_prometheus, prometheus_port) = common::prometheus_server::start(
            &dir,
            &[("simulator", metrics_port)],
            None,
            &["--enable-feature=exemplar-storage"],
        );

        let service = format!("vllm-exemplars-{}", std::process::id());
        let run_start = unix_now();
        let stderr_log = dir.join("simulate.log");
        let mut sim = Guard(
            Command::new(common::process::binary())
                .args(SIMULATION)
                .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
                .args([
                    "--otlp-traces-endpoint",
                    &collector.endpoint("grpc"),
                    "--otlp-protocol",
                    "grpc",
                ])
                .env("OTEL_SERVICE_NAME", &service)
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
                .env_remove("OTEL_TRACES_EXPORTER")
                .env_remove("OTEL_TRACES_SAMPLER")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&stderr_log).unwrap())
                .spawn()
                .expect("the simulator starts"),
        );
        let stdout = common::process::lines_of(sim.0.stdout.take().unwrap());
        let log = || std::fs::read_to_string(&stderr_log).unwrap_or_default();

        // The summary comes when the run is over; /metrics lingers after it.
        let summary_line = common::process::wait_for_optional(90, || {
            let lines = stdout.lock().unwrap();
            lines
                .iter()
                .find(|l| l.starts_with("most-preempted request:"))
                .cloned()
        })
        .unwrap_or_else(|| {
            panic!(
                "no most-preempted line in the summary\nstdout:\n{}\nstderr:\n{}",
                stdout.lock().unwrap().join("\n"),
                log()
            )
        });
        let (most, most_trace, most_span) = most_preempted(&summary_line);
        let text = common::http::http_get(metrics_port, "/metrics")
            .expect("/metrics is served while the run lingers");
        assert!(
            !text.contains("trace_id"),
            "a text 0.0.4 scrape carries no exemplar"
        );
        let terminated = common::exposition::sum_of(&text, "vllm:request_success_total");
        let ended = common::exposition::sum_of(&text, "vllm:request_num_preemptions_count");
        let preemptions = common::exposition::sum_of(&text, "vllm:request_num_preemptions_sum");
        assert!(
            terminated >= 100.0 && preemptions > 0.0 && most >= 2,
            "{terminated} requests, {preemptions} preemptions, at most {most} for one request"
        );
        // The last scrape reads the final state: every request placed.
        let query = |q: &str| common::prometheus_server::value(prometheus_port, q);
        common::process::wait_for(5, "Prometheus to scrape the final state", || {
            query("sum(vllm:request_num_preemptions_count)").filter(|v| *v == ended)
        });
        let status =
            common::process::wait_for(20, "the simulator to exit", || sim.0.try_wait().unwrap());
        assert!(status.success(), "simulate: {status}\n{}", log());
        let run_end = unix_now();

        // Every span the run exported, once it is all in Jaeger.
        let collector_log = || format!("collector log:\n{}", collector.log());
        let spans = jaeger.exactly_spans(&service, terminated as usize, &collector_log);
        let most_in_spans = spans
            .iter()
            .map(|s| {
                tag(s, "vllm.request.num_preemptions")
                    .unwrap()
                    .as_u64()
                    .unwrap()
            })
            .max()
            .unwrap();

        // The summary's request.
        let mut traces = Traces {
            jaeger: &jaeger,
            by_id: HashMap::new(),
        };
        assert!(
            is_hex(&most_trace, 32) && is_hex(&most_span, 16),
            "{summary_line}"
        );
        let (span, in_service) = traces.span(&most_trace, &most_span);
        assert_eq!(span["operationName"], "llm_request", "{summary_line}");
        assert_eq!(in_service, service);
        assert_eq!(
            tag(&span, "vllm.request.num_preemptions").and_then(Value::as_u64),
            Some(most),
            "{summary_line}: Jaeger's span"
        );
        assert_eq!(most, most_in_spans, "no span has more preemptions");

        // Every exemplar Prometheus stored, against its span.
        let (start, end) = (run_start - 5.0, unix_now() + 5.0);
        let mut per_family = Vec::new();
        let mut top_preemption_exemplar = 0.0_f64;
        for family in &FAMILIES {
            let bounds = common::exposition::catalog_bounds(family.vllm_name);
            if family.vllm_name == "vllm:request_num_preemptions" {
                assert_eq!(bounds, [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]);
            }
            let mut matched = 0;
            for series in query_exemplars(prometheus_port, family.bucket_series, start, end) {
                let labels = &series["seriesLabels"];
                assert_eq!(labels["__name__"], family.bucket_series, "{series}");
                let le = parse_bound(labels["le"].as_str().unwrap());
                let at = bounds.iter().position(|b| *b == le).unwrap_or(bounds.len());
                assert!(
                    at < bounds.len() || le == f64::INFINITY,
                    "le={le} is no bound of {}: {bounds:?}",
                    family.vllm_name
                );
                let lower = match at {
                    0 => f64::NEG_INFINITY,
                    _ => bounds[at - 1],
                };
                for exemplar in series["exemplars"].as_array().unwrap() {
                    let context = format!("{} {labels}: {exemplar}", family.bucket_series);
                    let ids = &exemplar["labels"];
                    let trace_id = ids["trace_id"].as_str().unwrap_or_default();
                    let span_id = ids["span_id"].as_str().unwrap_or_default();
                    assert!(is_hex(trace_id, 32) && is_hex(span_id, 16), "{context}");
                    let value: f64 = exemplar["value"].as_str().unwrap().parse().unwrap();
                    let timestamp = exemplar["timestamp"].as_f64().unwrap();
                    assert!(value > lower && value <= le, "{context}: not in its bucket");
                    assert!(
                        timestamp >= run_start && timestamp <= run_end,
                        "{context}: not during the run ({run_start}..{run_end})"
                    );

                    let (span, in_service) = traces.span(trace_id, span_id);
                    assert_eq!(span["operationName"], "llm_request", "{context}");
                    assert_eq!(in_service, service, "{context}");
                    let attribute = tag(&span, family.attribute)
                        .and_then(Value::as_f64)
                        .unwrap_or_else(|| panic!("{context}: no {}", family.attribute));
                    assert_eq!(
                        attribute, value,
                        "{context}: the span's {} is not the exemplar's value",
                        family.attribute
                    );
                    assert_eq!(
                        tag(&span, "gen_ai.response.model").and_then(Value::as_str),
                        labels["model_name"].as_str(),
                        "{context}"
                    );
                    assert_eq!(
                        tag(&span, "vllm.engine")
                            .and_then(Value::as_u64)
                            .map(|e| e.to_string()),
                        labels["engine"].as_str().map(str::to_owned),
                        "{context}"
                    );
                    // Prometheus keeps milliseconds, Jaeger microseconds.
                    let (span_start, span_end) = span_times(&span);
                    let expected = match family.at_first_token {
                        true => span_start + value,
                        false => span_end,
                    };
                    assert!(
                        (timestamp - expected).abs() <= 0.002,
                        "{context}: at {timestamp}, the request's {} at {expected}",
                        if family.at_first_token {
                            "first token"
                        } else {
                            "end"
                        }
                    );
                    if !family.at_first_token {
                        top_preemption_exemplar = top_preemption_exemplar.max(value);
                    }
                    matched += 1;
                }
            }
            per_family.push((family.bucket_series, matched));
        }

        // The most-preempted request's bucket got an exemplar at some scrape.
        let bounds = common::exposition::catalog_bounds("vllm:request_num_preemptions");
        let bucket_of = |v: f64| bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        assert_eq!(
            bucket_of(top_preemption_exemplar),
            bucket_of(most as f64),
            "the highest preemption exemplar ({top_preemption_exemplar}) is in the most-preempted request's bucket ({most})"
        );
        assert!(top_preemption_exemplar <= most as f64);

        let total: usize = per_family.iter().map(|(_, n)| n).sum();
        let out_of_order = prometheus_own(
            prometheus_port,
            "prometheus_target_scrapes_exemplar_out_of_order_total",
        );
        let appended = prometheus_own(
            prometheus_port,
            "prometheus_tsdb_exemplar_exemplars_appended_total",
        );
        eprintln!(
            "exemplars_live: {total} exemplars checked, {total} matched their llm_request span in Jaeger \
             ({per_family:?}); {} traces fetched; {terminated} requests, {preemptions} preemptions, \
             most-preempted {most} (trace {most_trace}); Prometheus appended {appended} exemplars, \
             refused {out_of_order} out of order; {:.1} s",
            traces.by_id.len(),
            began.elapsed().as_secs_f64()
        );
        for (series, matched) in &per_family {
            assert!(*matched > 0, "no exemplar of {series} in Prometheus");
        }
        assert!(
            total >= AT_LEAST,
            "{total} exemplars in Prometheus, fewer than {AT_LEAST}"
        );
        // A series' exemplars never go back in time (a request that ended
        // later but had its first token earlier does not replace a TTFT
        // exemplar), so Prometheus refuses none of them.
        assert_eq!(
            out_of_order, 0.0,
            "exemplars Prometheus refused as out of order"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
