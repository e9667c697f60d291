//! The GenAI semantic-conventions dashboard (`otel-collector/grafana/genai/`,
//! a directory of its own: it has its own variables and no vLLM family),
//! checked through the real OpenTelemetry Collector: two simulators push
//! their `--semconv gen_ai` histograms over OTLP (one over gRPC, one over
//! HTTP), the shipped `otel-collector/config.yaml` renames them for
//! Prometheus, and a real Prometheus scrapes the Collector. Every query must
//! return data, every variable find its values, the attributes and bucket
//! boundaries be the conventions', and the requests the same as vLLM's own
//! families count.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod dashboards;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod process;
    pub mod prometheus_server;
}

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::dashboards::*;
use common::process::Guard;
use common::prometheus_server::{self, result, result_within, values_by};
use serde_json::Value;

/// The GenAI histograms as the Collector's Prometheus exporter names them,
/// with the bucket boundaries the semantic conventions advise (and
/// docs/SEMANTICS.md §3c lists).
const GENAI_BUCKETS: [(&str, &[f64]); 3] = [
    (
        "gen_ai_server_request_duration_seconds",
        &[
            0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
        ],
    ),
    (
        "gen_ai_server_time_to_first_token_seconds",
        &[
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0,
        ],
    ),
    (
        "gen_ai_server_time_per_output_token_seconds",
        &[
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
        ],
    ),
];

/// A simulator pushing its `--semconv gen_ai` histograms to `endpoint` every
/// second, as service (Prometheus `job`) `name`.
fn genai_simulator(
    dir: &Path,
    name: &str,
    protocol: &str,
    endpoint: &str,
    extra: &[&str],
) -> Guard {
    common::process::spawn_logged(
        Command::new(common::process::binary())
            .env("OTEL_SERVICE_NAME", name)
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .args(["simulate", "--realtime", "--semconv", "gen_ai"])
            .args(["--duration", "120", "--seed", "5", "--rate", "6"])
            .args(["--prompt-len", "128", "--output-len", "256"])
            .args(extra)
            .args(["--otlp-protocol", protocol, "--otlp-endpoint", endpoint])
            .args(["--otlp-interval-ms", "1000"])
            .args(["--output", "none", "--metrics-addr", "none"]),
        &dir.join(format!("{name}.log")),
        "the simulator",
    )
}

/// The labels of a series without `le`, as one comparable string.
fn series_key(metric: &Value) -> String {
    let mut pairs: Vec<String> = metric
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "le")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    pairs.sort();
    pairs.join(",")
}

mod needs_collector_prometheus {
    use super::*;

    #[test]
    fn genai_dashboard_works_through_the_collector() {
        let started = Instant::now();
        let dir = common::paths::tempdir("genai-dashboard");
        let collector = common::collector::Collector::start();
        // One service with client aborts (error.type="abort"), pushing over gRPC;
        // one without, pushing over HTTP, with server.address and server.port.
        let _aborting = genai_simulator(
            &dir,
            "genai-aborting",
            "grpc",
            &collector.endpoint("grpc"),
            &["--abort-rate", "0.5"],
        );
        let _clean = genai_simulator(
            &dir,
            "genai-clean",
            "http/protobuf",
            &collector.endpoint("http/protobuf"),
            &[
                "--abort-rate",
                "0",
                "--semconv-server-address",
                "api.example",
                "--semconv-server-port",
                "8000",
            ],
        );
        // The Collector serves every process's series with its own job (service.name)
        // and instance (service.instance.id), as otel-collector/prometheus.yml scrapes it.
        let (_prometheus, port) =
            prometheus_server::start_honoring_labels(&dir, collector.prometheus);
        eprintln!("logs in {}", dir.display());
        result_within(port, r#"up{job="target"} == 1"#, 30);
        let aborts = r#"gen_ai_server_request_duration_seconds_count{job="genai-aborting", error_type="abort"} > 0"#;
        result_within(port, aborts, 60);
        eprintln!(
            "first abort through the Collector after {:?}",
            started.elapsed()
        );

        // 1. Every dashboard query returns data, and every variable finds its values.
        let (path, json) = genai_dashboards().remove(0);
        for expr in all_exprs(&path, &json, 10) {
            result_within(port, &substitute(&expr, &LIVE_RANGES), 30);
        }
        let selectors = label_value_selectors(&json);
        let names: Vec<&str> = selectors.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, GENAI_CHAIN, "the variables, in chain order");
        let expected: [&[&str]; 4] = [
            &["genai-aborting", "genai-clean"],
            &[],
            &["sim-model-0"],
            &["text_completion"],
        ];
        for ((name, selector), want) in selectors.iter().zip(expected) {
            let promql = format!("count by ({name}) ({})", substitute(selector, &LIVE_RANGES));
            let mut found: Vec<String> = values_by(&result_within(port, &promql, 20), name)
                .into_iter()
                .map(|(value, _)| value)
                .collect();
            found.sort();
            if name == "instance" {
                assert_eq!(found.len(), 2, "one instance per process: {found:?}");
            } else {
                assert_eq!(found, want, "values of variable {name}");
            }
        }

        // 2. The error share: 0 (not nothing) for the service without failures,
        // abort's share for the other, and nothing else.
        let share_expr = all_exprs(&path, &json, 10)
            .into_iter()
            .find(|e| e.starts_with("sum by (error_type)"))
            .expect("the error share query");
        let clean = result_within(
            port,
            &substitute(
                &share_expr,
                &[LIVE_RANGES[0], LIVE_RANGES[1], ("job", "genai-clean")],
            ),
            20,
        );
        assert_eq!(
            values_by(&clean, "error_type"),
            [("none".to_owned(), 0.0)],
            "error share of genai-clean"
        );
        let mut shares = Vec::new();
        let aborting_share = substitute(
            &share_expr,
            &[LIVE_RANGES[0], LIVE_RANGES[1], ("job", "genai-aborting")],
        );
        let seen = common::process::wait_for_optional(30, || {
            shares = values_by(
                &result(port, &aborting_share).unwrap_or_default(),
                "error_type",
            );
            matches!(shares.as_slice(), [(t, v)] if t == "abort" && *v > 0.0 && *v < 1.0)
                .then_some(())
        });
        assert!(seen.is_some(), "error share of genai-aborting: {shares:?}");
        eprintln!("genai-aborting error share: {shares:?}");

        // 3. Attributes as the semantic conventions name them, error.type only
        // on failed requests' durations.
        let durations = result_within(port, "gen_ai_server_request_duration_seconds_count", 20);
        for series in &durations {
            let m = &series["metric"];
            let text = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
            assert_eq!(text("gen_ai_provider_name"), "vllm", "{m}");
            assert_eq!(text("gen_ai_operation_name"), "text_completion", "{m}");
            assert_eq!(text("gen_ai_request_model"), "sim-model-0", "{m}");
            assert_eq!(
                text("gen_ai_response_model"),
                text("gen_ai_request_model"),
                "{m}"
            );
            match text("job").as_str() {
                "genai-clean" => {
                    assert_eq!(text("error_type"), "", "{m}");
                    assert_eq!(text("server_address"), "api.example", "{m}");
                    assert_eq!(text("server_port"), "8000", "{m}");
                }
                "genai-aborting" => {
                    assert!(["", "abort"].contains(&text("error_type").as_str()), "{m}");
                    assert!(m.get("server_address").is_none(), "{m}");
                }
                other => panic!("unexpected job {other}: {m}"),
            }
        }
        for family in [
            "gen_ai_server_time_to_first_token_seconds_count",
            "gen_ai_server_time_per_output_token_seconds_count",
        ] {
            result_within(port, family, 20);
            let failed = result(port, &format!(r#"{family}{{error_type!=""}}"#)).expect(family);
            assert!(failed.is_empty(), "{family} with error_type: {failed:?}");
        }

        // 4. The advised bucket boundaries arrive unchanged, on every series.
        for (family, bounds) in GENAI_BUCKETS {
            let buckets = result_within(port, &format!("{family}_bucket"), 20);
            let mut per_series: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
            for series in &buckets {
                let le = series["metric"]["le"].as_str().expect("le");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse()
                        .unwrap_or_else(|e| panic!("{family}: le {le:?}: {e}"))
                };
                per_series
                    .entry(series_key(&series["metric"]))
                    .or_default()
                    .push(le);
            }
            let mut want = bounds.to_vec();
            want.push(f64::INFINITY);
            assert!(!per_series.is_empty(), "{family}: no series");
            for (key, mut les) in per_series {
                les.sort_by(f64::total_cmp);
                assert_eq!(les, want, "{family}{{{key}}}: bucket boundaries");
            }
        }

        // 5. The same requests as vLLM's own families in the same export: every
        // terminated request once, every abort once (the two sides in one
        // expression, from one scrape; polled, as an export may fall between
        // one request's two recordings).
        let checks = [
            (
                "sum by (job) (gen_ai_server_request_duration_seconds_count) \
             - sum by (job) (vllm:e2e_request_latency_seconds_count)",
                2,
            ),
            (
                r#"sum by (job) (gen_ai_server_request_duration_seconds_count{error_type="abort"})
             - sum by (job) (vllm:request_success_total{finished_reason="abort"})"#,
                1,
            ),
        ];
        for (promql, jobs) in checks {
            let mut last = Vec::new();
            let equal = common::process::wait_for_optional(20, || {
                last = values_by(&result(port, promql).unwrap_or_default(), "job");
                (last.len() == jobs && last.iter().all(|(_, v)| *v == 0.0)).then_some(())
            });
            assert!(equal.is_some(), "{promql}: {last:?}");
        }

        eprintln!("GenAI dashboard checked after {:?}", started.elapsed());
        std::fs::remove_dir_all(&dir).ok();
    }
}
