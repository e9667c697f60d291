//! A real Jaeger v2 (built by `otel-collector/build-jaeger.sh`) running the
//! shipped `otel-collector/jaeger.yaml` on free ports.

use std::path::PathBuf;
use std::process::Command;

use super::process::Guard;

/// The Jaeger binary; fails with how to build it when missing.
pub fn jaeger_binary() -> PathBuf {
    super::environments::needs("jaeger");
    let binary = super::paths::repo().join("otel-collector/bin/jaeger");
    assert!(
        binary.is_file(),
        "Jaeger is required: build it with `bash otel-collector/build-jaeger.sh` (needs Go), or run `bash scripts/test.sh`"
    );
    binary
}

/// A span's attribute `key`, from Jaeger's v1 JSON (attributes as `tags`).
pub fn tag<'a>(span: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

/// A Jaeger running the shipped config.
#[derive(Debug)]
pub struct Jaeger {
    _process: Guard,
    /// OTLP/gRPC port spans go to.
    pub otlp_grpc: u16,
    /// The query API's port.
    pub query: u16,
    dir: PathBuf,
}

impl Jaeger {
    /// The shipped config on free ports.
    pub fn start() -> Jaeger {
        let dir = super::paths::tempdir("jaeger");
        let (otlp_grpc, query) = (super::http::free_port(), super::http::free_port());
        let process = super::process::spawn_logged(
            Command::new(jaeger_binary())
                .arg("--config")
                .arg(super::paths::repo().join("otel-collector/jaeger.yaml"))
                .env("JAEGER_OTLP_GRPC_PORT", otlp_grpc.to_string())
                .env(
                    "JAEGER_OTLP_HTTP_PORT",
                    super::http::free_port().to_string(),
                )
                .env("JAEGER_QUERY_HTTP_PORT", query.to_string())
                .env(
                    "JAEGER_QUERY_GRPC_PORT",
                    super::http::free_port().to_string(),
                )
                .env("JAEGER_HEALTH_PORT", super::http::free_port().to_string())
                .env(
                    "JAEGER_TELEMETRY_PORT",
                    super::http::free_port().to_string(),
                ),
            &dir.join("jaeger.log"),
            "Jaeger",
        );
        let jaeger = Jaeger {
            _process: process,
            otlp_grpc,
            query,
            dir,
        };
        super::process::wait_for(30, "Jaeger's query API", || {
            super::http::http_get(query, "/api/services")
        });
        jaeger
    }

    /// Every span Jaeger holds for `service` (v1 JSON: attributes as
    /// `tags`, events as `logs`); `None` while the query API fails.
    pub fn spans(&self, service: &str) -> Option<Vec<serde_json::Value>> {
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros();
        let path = format!("/api/traces?service={service}&limit=100000&start=1&end={end}");
        let json: serde_json::Value =
            serde_json::from_str(&super::http::http_get(self.query, &path)?).ok()?;
        Some(
            json["data"]
                .as_array()?
                .iter()
                .flat_map(|t| t["spans"].as_array().cloned().unwrap_or_default())
                .collect(),
        )
    }

    /// Waits up to 30 s for `count` spans of `service` and checks that
    /// there are exactly that many; `context` (a Collector's log, say) goes
    /// into the failure message with Jaeger's own log.
    pub fn exactly_spans(
        &self,
        service: &str,
        count: usize,
        context: &dyn Fn() -> String,
    ) -> Vec<serde_json::Value> {
        let mut spans = Vec::new();
        let arrived = super::process::wait_for_optional(30, || {
            spans = self.spans(service)?;
            (spans.len() >= count).then_some(())
        });
        assert!(
            arrived.is_some(),
            "{} spans in Jaeger for {count} terminated requests\n{}\njaeger log:\n{}",
            spans.len(),
            context(),
            self.log()
        );
        assert_eq!(
            spans.len(),
            count,
            "exactly one span per terminated request"
        );
        spans
    }

    /// What Jaeger wrote to its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("jaeger.log")).unwrap_or_default()
    }
}

impl Jaeger {
    /// Checks every exemplar of `vllm:request_num_preemptions` and
    /// `vllm:e2e_request_latency_seconds` in an OpenMetrics exposition of
    /// the sidecar against the span it names: Jaeger holds the trace, with an
    /// `llm_request` span of that id whose attribute is the exemplar's value.
    /// Returns how many were checked (each bucket a request of the run
    /// landed in has one).
    pub fn check_exemplars(&self, openmetrics: &str) -> usize {
        const CHECKED: [(&str, &str); 2] = [
            (
                "vllm:request_num_preemptions_bucket{",
                "vllm.request.num_preemptions",
            ),
            (
                "vllm:e2e_request_latency_seconds_bucket{",
                "gen_ai.latency.e2e",
            ),
        ];
        let mut traces: std::collections::HashMap<String, serde_json::Value> = Default::default();
        // Per series, the cumulative count of its previous bucket.
        let mut below: std::collections::HashMap<String, f64> = Default::default();
        let mut checked = 0;
        for line in openmetrics.lines() {
            let Some((family, key)) = CHECKED.iter().find(|(f, _)| line.starts_with(f)) else {
                continue;
            };
            let (sample, exemplar) = match line.split_once(" # {trace_id=\"") {
                Some((sample, exemplar)) => (sample, Some(exemplar)),
                None => (line, None),
            };
            let (series, count) = sample.rsplit_once(' ').expect(line);
            let count: f64 = count.parse().expect(line);
            let series = series.split("le=").next().unwrap().to_owned();
            let landed = count - below.insert(series.clone(), count).unwrap_or(0.0);
            let landed = if landed < 0.0 { count } else { landed };
            let Some(exemplar) = exemplar else {
                assert_eq!(
                    landed, 0.0,
                    "{landed} requests landed in a bucket without an exemplar: {line}"
                );
                continue;
            };
            let (trace_id, rest) = exemplar.split_once("\",span_id=\"").expect(line);
            let (span_id, rest) = rest.split_once("\"} ").expect(line);
            let value: f64 = rest.split(' ').next().unwrap().parse().expect(line);
            let trace = traces.entry(trace_id.to_owned()).or_insert_with(|| {
                let trace = super::process::wait_for_optional(30, || {
                    let body =
                        super::http::http_get(self.query, &format!("/api/traces/{trace_id}"))?;
                    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
                    json["data"][0]["spans"]
                        .is_array()
                        .then(|| json["data"][0].clone())
                });
                trace.unwrap_or_else(|| panic!("Jaeger has no trace {trace_id} ({line})"))
            });
            let span = trace["spans"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["spanID"] == span_id)
                .unwrap_or_else(|| panic!("trace {trace_id} has no span {span_id} ({line})"));
            assert_eq!(span["operationName"], "llm_request", "{line}");
            let attribute = tag(span, key)
                .and_then(serde_json::Value::as_f64)
                .unwrap_or_else(|| panic!("no {key} on span {span_id}"));
            assert_eq!(attribute, value, "{family}: {line}");
            checked += 1;
        }
        checked
    }

    /// How many of `service`'s spans carry each SLO outcome
    /// (`vllm_otel_metrics.slo.outcome`); every span must carry one.
    pub fn request_spans_outcomes(&self, service: &str) -> std::collections::BTreeMap<String, u64> {
        let mut outcomes = std::collections::BTreeMap::new();
        for span in self.spans(service).expect("Jaeger answers") {
            let outcome = span["tags"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["key"] == "vllm_otel_metrics.slo.outcome")
                .and_then(|t| t["value"].as_str())
                .expect("vllm_otel_metrics.slo.outcome on every span with --slo")
                .to_owned();
            *outcomes.entry(outcome).or_default() += 1;
        }
        outcomes
    }

    /// Waits up to 30 s for `count` spans of `service`, checks that there
    /// are exactly that many, each an `llm_request` carrying
    /// `vllm.request.num_preemptions`, and returns the sum of those counts.
    pub fn request_spans_preemptions(&self, service: &str, count: usize) -> u64 {
        self.exactly_spans(service, count, &String::new)
            .iter()
            .map(|span| {
                assert_eq!(span["operationName"], "llm_request");
                span["tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["key"] == "vllm.request.num_preemptions")
                    .and_then(|t| t["value"].as_u64())
                    .expect("vllm.request.num_preemptions on every span")
            })
            .sum()
    }
}
