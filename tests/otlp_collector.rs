//! OTLP export end to end, against a real OpenTelemetry Collector built from
//! the official modules (`otel-collector/build.sh`) running the shipped
//! `otel-collector/config.yaml` (its ports set to free ones through the
//! variables it reads), and a real
//! Prometheus server scraping it.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod pki;
    pub mod process;
    pub mod prometheus_server;
}

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Child, Command, Stdio};

use common::collector::Collector;
use common::pki::{make_pki, Pki};

const TRACE: &str = "tests/data/generated-seed11.jsonl";

/// The `vllm:` samples of an exposition, their labels normalized: the
/// bridge's and the Collector's encoders order and spell them differently.
fn normalized_vllm_samples(exposition: &str) -> BTreeMap<String, f64> {
    common::exposition::only_vllm(common::exposition::normalized_samples(exposition, &[]))
}

fn replay_command(endpoint: &str, protocol: &str, names: &str, instance: &str) -> Command {
    let mut command = Command::new(common::process::binary());
    command
        .args(["replay", "--output", "prometheus", "--metrics-addr", "none"])
        .args(["--otlp-endpoint", endpoint])
        .args(["--otlp-protocol", protocol, "--otlp-names", names])
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("service.instance.id={instance}"),
        )
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME");
    command
}

fn assert_same(
    expected: &BTreeMap<String, f64>,
    actual: &BTreeMap<String, f64>,
    what: &str,
    log: &str,
) {
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !actual.contains_key(*k))
        .take(10)
        .collect();
    let extra: Vec<_> = actual
        .keys()
        .filter(|k| !expected.contains_key(*k))
        .take(10)
        .collect();
    let differ: Vec<_> = expected
        .iter()
        .filter(|(k, v)| {
            actual
                .get(*k)
                .is_some_and(|a| !common::exposition::close(*a, **v))
        })
        .take(10)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{what}: {} expected samples, {} at the Collector\nmissing: {missing:#?}\nextra: {extra:#?}\ndiffering: {differ:#?}\ncollector log:\n{log}",
        expected.len(),
        actual.len()
    );
}

/// The bridge's samples of a replay of the test trace (which has invalid
/// lines, so exit status 2) in which no OTLP export failed.
fn clean_replay_samples(output: std::process::Output, what: &str) -> BTreeMap<String, f64> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{what}: the trace has invalid lines; stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("OTLP export"),
        "{what}: no export may fail: {stderr}"
    );
    normalized_vllm_samples(&String::from_utf8(output.stdout).unwrap())
}

/// Waits up to 15 s until the Collector shows exactly `expected` for
/// `instance` (after `view`), else fails with the difference and its log.
fn assert_collector_shows(
    collector: &Collector,
    instance: &str,
    expected: &BTreeMap<String, f64>,
    view: fn(&BTreeMap<String, f64>) -> BTreeMap<String, f64>,
    what: &str,
) {
    let mut last = BTreeMap::new();
    if common::process::wait_for_optional(15, || {
        last = view(&collector.samples_of(instance));
        (last == *expected).then_some(())
    })
    .is_none()
    {
        assert_same(expected, &last, what, &collector.log());
    }
}

/// Replays the trace pushing to the Collector; returns the bridge's samples,
/// then waits until the Collector shows exactly those.
fn push_and_compare(collector: &Collector, protocol: &str, names: &str) -> BTreeMap<String, f64> {
    let instance = format!("{protocol}-{names}").replace('/', "-");
    let output = replay_command(&collector.endpoint(protocol), protocol, names, &instance)
        .arg(common::paths::repo().join(TRACE))
        .output()
        .unwrap();
    let bridge = clean_replay_samples(output, &instance);
    assert!(bridge.len() > 1000, "a rich exposition");
    assert_collector_shows(
        collector,
        &instance,
        &bridge,
        BTreeMap::clone,
        &format!("{protocol} / {names} names"),
    );
    bridge
}

/// Writes `lines` to a replay's standard input in three chunks, several
/// export periods apart (`--otlp-interval-ms 200`), then closes it.
fn feed_in_chunks(child: &mut std::process::Child, lines: &[&str]) {
    let mut stdin = child.stdin.take().unwrap();
    for chunk in lines.chunks(lines.len() / 3 + 1) {
        for line in chunk {
            writeln!(stdin, "{line}").unwrap();
        }
        stdin.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
}

/// The `le` values of `family`'s bucket samples, in order, once each.
fn bucket_bounds(samples: &BTreeMap<String, f64>, family: &str) -> Vec<f64> {
    let prefix = format!("{family}_bucket{{");
    let mut bounds: Vec<f64> = samples
        .keys()
        .filter_map(|k| k.strip_prefix(&prefix))
        .filter_map(|labels| labels.split("le=\"").nth(1)?.split('"').next())
        .filter(|le| *le != "+Inf")
        .map(|le| le.parse().unwrap())
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}

/// A replay reading stdin and pushing every 200 ms, its stdio piped.
fn stdin_replay(
    collector_endpoint: &str,
    protocol: &str,
    instance: &str,
    metrics_port: Option<u16>,
) -> Command {
    let mut command = Command::new(common::process::binary());
    command
        .args(["replay", "-", "--output", "prometheus"])
        .args([
            "--metrics-addr",
            &metrics_port.map_or("none".to_owned(), |p| format!("127.0.0.1:{p}")),
        ])
        .args([
            "--otlp-endpoint",
            collector_endpoint,
            "--otlp-protocol",
            protocol,
        ])
        .args(["--otlp-interval-ms", "200"])
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("service.instance.id={instance}"),
        )
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn spawn_stdin_replay(
    collector_endpoint: &str,
    instance: &str,
    metrics_port: Option<u16>,
) -> Child {
    stdin_replay(collector_endpoint, "grpc", instance, metrics_port)
        .spawn()
        .unwrap()
}

/// The samples of every series that was ever recorded: a series whose
/// samples are all zero (bound at request start, never observed) is dropped
/// with its `_bucket`/`_sum`/`_count` samples.
fn recorded_series(samples: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    // `family{labels without le}` of a sample.
    let series_of = |key: &str| -> String {
        let (name, labels) = key.split_once('{').unwrap_or((key, "}"));
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        let labels: Vec<&str> = labels
            .trim_end_matches('}')
            .split(',')
            .filter(|l| !l.starts_with("le="))
            .collect();
        format!("{family}{{{}}}", labels.join(","))
    };
    let mut recorded = std::collections::BTreeSet::new();
    for (key, value) in samples {
        if *value != 0.0 {
            recorded.insert(series_of(key));
        }
    }
    samples
        .iter()
        .filter(|(key, _)| recorded.contains(&series_of(key)))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The shipped config with the shipped TLS overlay, requiring client
/// certificates from the test CA.
fn tls_collector(pki: &Pki) -> Collector {
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let (cert, key, ca) = (path(&pki.server_cert), path(&pki.server_key), path(&pki.ca));
    Collector::start_on_free_ports(
        &["tls.yaml"],
        &[
            ("OTELCOL_TLS_CERT_FILE", &cert),
            ("OTELCOL_TLS_KEY_FILE", &key),
            ("OTELCOL_TLS_CLIENT_CA_FILE", &ca),
        ],
    )
}

/// The `gen_ai_` samples of an exposition, without the labels in `drop`.
fn semconv_samples(exposition: &str, instance: Option<&str>) -> BTreeMap<String, f64> {
    let marker = instance.map(|i| format!("instance=\"{i}\""));
    let own: String = exposition
        .lines()
        .filter(|l| l.starts_with("gen_ai_"))
        .filter(|l| marker.as_ref().is_none_or(|m| l.contains(m.as_str())))
        .map(|l| format!("{l}\n"))
        .collect();
    common::exposition::normalized_samples(&own, &["job", "instance"])
}

/// Orders `le` values numerically, `+Inf` last.
fn le_order(a: &str, b: &str) -> std::cmp::Ordering {
    let value = |s: &str| s.parse::<f64>().unwrap_or(f64::INFINITY);
    value(a).total_cmp(&value(b))
}

mod needs_collector {
    use super::*;

    #[test]
    fn collector_shows_the_bridge_samples_over_grpc_and_http_in_both_name_modes() {
        let collector = Collector::start();
        for protocol in ["grpc", "http/protobuf"] {
            for names in ["otel", "prometheus"] {
                push_and_compare(&collector, protocol, names);
            }
        }
    }

    /// With `--attribute lora,priority`, OTLP carries the class as
    /// attributes of vLLM's metrics, and the shipped config makes of them
    /// what the bridge's `/metrics` shows: vLLM's families with the class
    /// summed away, and the `vllm_class:` families by class. A simulated
    /// trace (three adapters, two priorities, preemptions) fed in three
    /// chunks over several export periods, cumulative over gRPC and HTTP,
    /// and delta (where an export holds only the classes recorded in its
    /// period); every sample of a recorded series equal (a float `_sum`,
    /// summed over the classes in another order, to rounding).
    #[test]
    fn attributed_classes_arrive_as_on_metrics() {
        let collector = Collector::start();
        let dir = common::paths::tempdir("otlp-attribution");
        let trace = dir.join("trace.jsonl");
        let simulated = Command::new(common::process::binary())
            .args(["simulate", "--seed", "5", "--duration", "40", "--rate", "3"])
            .args(["--lora-adapters", "--priority-fraction", "0.3"])
            .args(["--kv-blocks", "256", "--metrics-addr", "none", "--record"])
            .arg(&trace)
            .output()
            .unwrap();
        assert!(
            simulated.status.success(),
            "{}",
            String::from_utf8_lossy(&simulated.stderr)
        );
        let trace = std::fs::read_to_string(&trace).unwrap();
        let lines: Vec<&str> = trace.lines().collect();
        // Exponential latency histograms keep their class attributes (the
        // Collector cannot add points of different scales): with them, the
        // other families are compared, and the Collector must take them.
        let latency = |key: &str| {
            vllm_otel_metrics::catalog::all().any(|def| {
                vllm_otel_metrics::catalog::is_latency_histogram(def)
                    && [def.vllm_name, def.by_class_name.unwrap_or("")]
                        .iter()
                        .any(|name| key.starts_with(&format!("{name}_")))
            })
        };
        for (protocol, temporality, histograms) in [
            ("grpc", "cumulative", "explicit"),
            ("http/protobuf", "cumulative", "explicit"),
            ("grpc", "delta", "explicit"),
            ("grpc", "cumulative", "exponential"),
        ] {
            let instance = format!(
                "attributed-{}-{temporality}-{histograms}",
                protocol.replace('/', "-")
            );
            let mut child = stdin_replay(&collector.endpoint(protocol), protocol, &instance, None)
                .args(["--otlp-temporality", temporality])
                .args(["--otlp-histograms", histograms])
                .args([
                    "--attribute",
                    "lora,priority",
                    "--adapter-min-requests",
                    "1",
                ])
                .spawn()
                .unwrap();
            let compared = |samples: BTreeMap<String, f64>| -> BTreeMap<String, f64> {
                let samples = recorded_series(&samples);
                match histograms {
                    "exponential" => samples.into_iter().filter(|(k, _)| !latency(k)).collect(),
                    _ => samples,
                }
            };
            feed_in_chunks(&mut child, &lines);
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            let log = || collector.log();
            assert!(
                output.status.success() && !stderr.contains("OTLP export"),
                "{instance}: {stderr}\ncollector log:\n{}",
                log()
            );
            let exposition = String::from_utf8(output.stdout).unwrap();
            let bridge = compared(common::collector::as_exported(&exposition));
            let classed = bridge
                .keys()
                .filter(|k| k.starts_with("vllm_class:") && k.contains("lora_name=\"sim-lora-"))
                .count();
            assert!(classed > 100, "{instance}: {classed} samples by class");
            assert!(
                !bridge
                    .keys()
                    .any(|k| k.starts_with("vllm:") && k.contains("lora_name=")),
                "{instance}: vLLM's families without class labels"
            );
            let mut shown = BTreeMap::new();
            let close = |shown: &BTreeMap<String, f64>| {
                shown.len() == bridge.len()
                    && bridge.iter().all(|(k, v)| {
                        shown
                            .get(k)
                            .is_some_and(|s| common::exposition::close(*s, *v))
                    })
            };
            let arrived = common::process::wait_for_optional(20, || {
                shown = compared(collector.samples_of(&instance));
                close(&shown).then_some(())
            });
            if arrived.is_none() {
                assert_same(&bridge, &shown, &instance, &collector.log());
            }
            eprintln!(
                "{instance}: {} samples, {classed} of them by class, as on /metrics",
                bridge.len()
            );
        }
    }

    #[test]
    fn bucket_overrides_reach_the_collector_as_on_metrics() {
        let collector = Collector::start();
        let overrides = r#"{"request_latency": [0.05, 0.2, 1, 4],
                        "vllm:time_to_first_token_seconds": [0.01, 0.1, 1],
                        "request_num_preemptions": [1, 3]}"#;
        let output = replay_command(&collector.endpoint("grpc"), "grpc", "otel", "overrides")
            .args(["--custom-histogram-buckets", overrides])
            .arg(common::paths::repo().join(TRACE))
            .output()
            .unwrap();
        let bridge = clean_replay_samples(output, "overrides");
        let expected = [
            (
                "vllm:e2e_request_latency_seconds",
                vec![0.05, 0.2, 1.0, 4.0],
            ),
            (
                "vllm:request_decode_time_seconds",
                vec![0.05, 0.2, 1.0, 4.0],
            ),
            ("vllm:time_to_first_token_seconds", vec![0.01, 0.1, 1.0]),
            ("vllm:request_num_preemptions", vec![1.0, 3.0]),
            (
                "vllm:inter_token_latency_seconds",
                common::exposition::catalog_bounds("vllm:inter_token_latency_seconds"),
            ),
        ];
        for (family, bounds) in &expected {
            assert_eq!(
                &bucket_bounds(&bridge, family),
                bounds,
                "/metrics: {family}"
            );
        }
        assert_collector_shows(
            &collector,
            "overrides",
            &bridge,
            BTreeMap::clone,
            "the overridden buckets",
        );
    }

    /// Delta exports (several while the trace streams in, compressed: zstd over
    /// gRPC, gzip over HTTP) add up at the Collector to exactly the bridge's
    /// cumulative samples. The SDK exports a delta series only in an interval
    /// in which it was recorded, so the series bound at request start but never
    /// recorded (zero in the bridge) never reach the Collector; every other
    /// series must agree sample for sample.
    #[test]
    fn compressed_delta_exports_add_up_to_the_bridge_samples() {
        let collector = Collector::start();
        let trace = std::fs::read_to_string(common::paths::repo().join(TRACE)).unwrap();
        let lines: Vec<&str> = trace.lines().collect();
        for (protocol, compression) in [("grpc", "zstd"), ("http/protobuf", "gzip")] {
            let instance = format!("delta-{}", protocol.replace('/', "-"));
            let mut child = stdin_replay(&collector.endpoint(protocol), protocol, &instance, None)
                .args(["--otlp-temporality", "delta"])
                .env("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
                .spawn()
                .unwrap();
            feed_in_chunks(&mut child, &lines);
            let all = clean_replay_samples(child.wait_with_output().unwrap(), &instance);
            let bridge = recorded_series(&all);
            assert!(
                bridge.len() > 1000 && bridge.len() < all.len(),
                "{} of {} samples recorded",
                bridge.len(),
                all.len()
            );
            assert_collector_shows(
                &collector,
                &instance,
                &bridge,
                recorded_series,
                &format!("delta over {protocol}"),
            );
        }
    }

    #[test]
    fn counts_arrive_complete_when_the_collector_starts_late() {
        let (grpc, http, prom) = (
            common::http::free_port(),
            common::http::free_port(),
            common::http::free_port(),
        );
        let trace = std::fs::read_to_string(common::paths::repo().join(TRACE)).unwrap();
        let lines: Vec<&str> = trace.lines().collect();
        let mut child = spawn_stdin_replay(&format!("http://127.0.0.1:{grpc}"), "late", None);
        let mut stdin = child.stdin.take().unwrap();
        for line in &lines[..lines.len() / 2] {
            writeln!(stdin, "{line}").unwrap();
        }
        // Exports fail while nothing listens.
        std::thread::sleep(std::time::Duration::from_millis(3000));
        let collector = Collector::start_on(grpc, http, prom);
        for line in &lines[lines.len() / 2..] {
            writeln!(stdin, "{line}").unwrap();
        }
        drop(stdin);
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("OTLP export to"),
            "the outage was reported: {stderr}"
        );
        assert!(
            stderr.contains("recovered after"),
            "the recovery was reported: {stderr}"
        );
        let bridge = normalized_vllm_samples(&String::from_utf8(output.stdout).unwrap());
        assert_collector_shows(
            &collector,
            "late",
            &bridge,
            BTreeMap::clone,
            "after an outage",
        );
    }

    #[test]
    fn sigterm_during_a_long_run_delivers_the_final_counts() {
        let collector = Collector::start();
        let metrics_port = common::http::free_port();
        let mut child =
            spawn_stdin_replay(&collector.endpoint("grpc"), "sigterm", Some(metrics_port));
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(&std::fs::read(common::paths::repo().join(TRACE)).unwrap())
            .unwrap();
        stdin.flush().unwrap();
        // Everything is recorded once the live endpoint shows the replay's final state.
        let (_, expected, _) = common::process::replay(&common::paths::repo().join(TRACE));
        let expected = normalized_vllm_samples(&expected);
        common::process::wait_for(30, "the replay to consume its input", || {
            let live = normalized_vllm_samples(&common::http::http_get(metrics_port, "/metrics")?);
            (live == expected).then_some(())
        });
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let output = child.wait_with_output().unwrap();
        drop(stdin);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(143), "{stderr}");
        assert!(stderr.contains("received SIGTERM"), "{stderr}");
        assert_collector_shows(
            &collector,
            "sigterm",
            &expected,
            BTreeMap::clone,
            "after SIGTERM",
        );
    }

    /// Mutual TLS against the real Collector over both transports: the CA and
    /// the client identity from the flags for one, from the standard variables
    /// for the other. Every sample arrives.
    #[test]
    fn tls_with_client_certificates_over_grpc_and_http() {
        let pki = make_pki();
        let collector = tls_collector(&pki);
        for (protocol, from_variables) in [("grpc", true), ("http/protobuf", false)] {
            let instance = format!("tls-{}", protocol.replace('/', "-"));
            let mut command = replay_command(
                &collector.tls_endpoint(protocol),
                protocol,
                "otel",
                &instance,
            );
            if from_variables {
                command
                    .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &pki.ca)
                    .env("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &pki.client_cert)
                    .env("OTEL_EXPORTER_OTLP_CLIENT_KEY", &pki.client_key);
            } else {
                command
                    .arg("--otlp-certificate")
                    .arg(&pki.ca)
                    .arg("--otlp-client-certificate")
                    .arg(&pki.client_cert)
                    .arg("--otlp-client-key")
                    .arg(&pki.client_key);
            }
            let output = command
                .arg(common::paths::repo().join(TRACE))
                .output()
                .unwrap();
            let bridge = clean_replay_samples(output, &instance);
            assert!(bridge.len() > 1000, "a rich exposition");
            assert_collector_shows(
                &collector,
                &instance,
                &bridge,
                BTreeMap::clone,
                &format!("TLS over {protocol}"),
            );
        }
    }

    /// A final export that fails gives exit status 3 and names the endpoint:
    /// here a TLS Collector that refuses a client without a certificate, and
    /// one whose certificate the system's roots do not trust.
    #[test]
    fn a_failed_final_export_exits_3_naming_the_endpoint() {
        let pki = make_pki();
        let collector = tls_collector(&pki);
        for protocol in ["grpc", "http/protobuf"] {
            let endpoint = collector.tls_endpoint(protocol);
            let without_client_certificate = vec![
                "--otlp-certificate".to_owned(),
                pki.ca.to_str().unwrap().to_owned(),
            ];
            for (case, extra) in [
                ("no client certificate", without_client_certificate),
                ("untrusted server", Vec::new()),
            ] {
                let output = replay_command(&endpoint, protocol, "otel", "refused")
                    .args(["--otlp-timeout-ms", "2000"])
                    .args(&extra)
                    .arg(common::paths::repo().join("tests/data/lifecycle.jsonl"))
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert_eq!(
                    output.status.code(),
                    Some(3),
                    "{protocol}, {case}: {stderr}"
                );
                let expected_endpoint = match protocol {
                    "grpc" => endpoint.clone(),
                    _ => format!("{endpoint}/v1/metrics"),
                };
                assert!(
                    stderr.contains(&format!(
                        "error: final OTLP export to {expected_endpoint} failed: "
                    )),
                    "{protocol}, {case}: {stderr}"
                );
            }
        }
        assert!(
            collector.samples_of("refused").is_empty(),
            "nothing got through"
        );
    }

    /// With `--semconv gen_ai` the three GenAI histograms reach the real
    /// Collector under the conventions' names (never renamed by
    /// `--otlp-names prometheus`), in seconds, with the advised buckets and the
    /// conventions' attributes: exactly the samples the bridge shows with
    /// `--semconv-prometheus` (which the independent reference checks in
    /// `tests/replay.rs`).
    #[test]
    fn semconv_streams_arrive_with_the_conventions_names_units_buckets_and_attributes() {
        // The test trace, every other request a chat request.
        let dir = common::paths::tempdir("semconv");
        let trace = dir.join("trace.jsonl");
        let text = std::fs::read_to_string(common::paths::repo().join(TRACE)).unwrap();
        let mut requests = 0;
        let lines: Vec<String> = text
            .lines()
            .map(|line| {
                if line.starts_with(r#"{"type":"request","#) && line.ends_with('}') {
                    requests += 1;
                    if requests % 2 == 0 {
                        return format!(r#"{},"operation_name":"chat"}}"#, &line[..line.len() - 1]);
                    }
                }
                line.to_owned()
            })
            .collect();
        std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
        let collector = Collector::start();
        let instance = "semconv";
        let output = replay_command(&collector.endpoint("grpc"), "grpc", "prometheus", instance)
            .args(["--semconv", "gen_ai", "--semconv-prometheus"])
            .args([
                "--semconv-server-address",
                "llm.example",
                "--semconv-server-port",
                "8000",
            ])
            .arg(&trace)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        let bridge = semconv_samples(&String::from_utf8(output.stdout).unwrap(), None);
        let mut at_collector = BTreeMap::new();
        common::process::wait_for_optional(15, || {
            let text = common::http::http_get(collector.prometheus, "/metrics").unwrap_or_default();
            at_collector = semconv_samples(&text, Some(instance));
            (at_collector == bridge).then_some(())
        });
        assert_same(&bridge, &at_collector, "semconv streams", &collector.log());

        // The names carry the unit (`s` became `_seconds`); every family is there.
        let families: std::collections::BTreeSet<&str> = bridge
            .keys()
            .map(|k| k.split('{').next().unwrap())
            .collect();
        assert_eq!(
            families.into_iter().collect::<Vec<_>>(),
            [
                "gen_ai_server_request_duration_seconds_bucket",
                "gen_ai_server_request_duration_seconds_count",
                "gen_ai_server_request_duration_seconds_sum",
                "gen_ai_server_time_per_output_token_seconds_bucket",
                "gen_ai_server_time_per_output_token_seconds_count",
                "gen_ai_server_time_per_output_token_seconds_sum",
                "gen_ai_server_time_to_first_token_seconds_bucket",
                "gen_ai_server_time_to_first_token_seconds_count",
                "gen_ai_server_time_to_first_token_seconds_sum",
            ]
        );
        // One successful and one aborted series: the attributes, and the buckets.
        // The `le` values of a family's series with exactly these labels
        // (besides `le`), numerically ordered.
        let common = [
            "gen_ai_operation_name=\"chat\"",
            "gen_ai_provider_name=\"vllm\"",
            "gen_ai_request_model=\"llama-3.1-8b\"",
            "gen_ai_response_model=\"llama-3.1-8b\"",
            "server_address=\"llm.example\"",
            "server_port=\"8000\"",
        ];
        let les = |family: &str, error_type: Option<&str>| -> Vec<String> {
            let mut wanted: Vec<String> = common.iter().map(|l| l.to_string()).collect();
            if let Some(error_type) = error_type {
                wanted.push(format!("error_type=\"{error_type}\""));
            }
            wanted.sort();
            let mut out: Vec<String> = bridge
                .keys()
                .filter_map(|k| k.strip_prefix(&format!("{family}_bucket{{")))
                .filter_map(|rest| {
                    let mut labels: Vec<&str> = rest.trim_end_matches('}').split(',').collect();
                    let le = labels.iter().position(|l| l.starts_with("le="))?;
                    let le = labels.remove(le);
                    (labels == wanted).then(|| le[4..le.len() - 1].to_owned())
                })
                .collect();
            out.sort_by(|a, b| le_order(a, b));
            out
        };
        let duration = "gen_ai_server_request_duration_seconds";
        let duration_buckets = [
            "0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56", "5.12",
            "10.24", "20.48", "40.96", "81.92", "+Inf",
        ];
        assert_eq!(les(duration, None), duration_buckets);
        assert_eq!(les(duration, Some("abort")), duration_buckets);
        // Failures carry no first-token or per-token series.
        let ttft = "gen_ai_server_time_to_first_token_seconds";
        let tpot = "gen_ai_server_time_per_output_token_seconds";
        assert!(!bridge
            .keys()
            .any(|k| (k.starts_with(ttft) || k.starts_with(tpot)) && k.contains("error_type")));
        assert_eq!(
            les(ttft, None),
            [
                "0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5",
                "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "+Inf"
            ]
        );
        assert_eq!(
            les(tpot, None),
            [
                "0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5",
                "0.75", "1.0", "2.5", "+Inf"
            ]
        );

        // The descriptions arrive too. (The exporter writes no `# UNIT` line;
        // the `_seconds` its translator appends for the unit `s` is the unit.)
        let text = common::http::http_get(collector.prometheus, "/metrics").unwrap_or_default();
        for def in vllm_otel_metrics::catalog::semconv::ALL {
            let help = format!("# HELP {} {}", def.vllm_name, def.help);
            assert!(text.lines().any(|l| l == help), "{help}");
        }
        std::fs::remove_dir_all(dir).ok();
    }
}

mod needs_collector_prometheus {
    use super::*;

    #[test]
    fn two_processes_sum_to_twice_one_in_promql() {
        let collector = Collector::start();
        let dir = common::paths::tempdir("prometheus");
        let (_prometheus, port) =
            common::prometheus_server::start_honoring_labels(&dir, collector.prometheus);
        let mut single = BTreeMap::new();
        for instance in ["frontend-a", "frontend-b"] {
            let output = replay_command(&collector.endpoint("grpc"), "grpc", "otel", instance)
                .arg(common::paths::repo().join(TRACE))
                .output()
                .unwrap();
            assert_eq!(output.status.code(), Some(2));
            single = normalized_vllm_samples(&String::from_utf8(output.stdout).unwrap());
        }
        let total = |family: &str| -> f64 {
            single
                .iter()
                .filter(|(k, _)| k.split('{').next() == Some(family))
                .map(|(_, v)| v)
                .sum()
        };
        for family in [
            "vllm:request_num_preemptions_count",
            "vllm:request_num_preemptions_sum",
            "vllm:num_preemptions_total",
            "vllm:generation_tokens_total",
            "vllm:request_success_total",
        ] {
            let expected = 2.0 * total(family);
            assert!(expected > 0.0, "{family} has data");
            let query = format!("sum({family})");
            common::process::wait_for(30, &format!("{query} == {expected}"), || {
                common::prometheus_server::value(port, &query)
                    .filter(|v| (v - expected).abs() < 1e-6)
            });
        }
        // The per-request distribution's first bucket, under vLLM's own `le`
        // spelling (the Collector serves OpenMetrics, which Prometheus stores as is).
        let query = "sum(vllm:request_num_preemptions_bucket{le=\"1.0\"})";
        let expected = 2.0
            * single
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("vllm:request_num_preemptions_bucket{")
                        && k.contains("le=\"1.0\"")
                })
                .map(|(_, v)| v)
                .sum::<f64>();
        common::process::wait_for(30, &format!("{query} == {expected}"), || {
            common::prometheus_server::value(port, query).filter(|v| (v - expected).abs() < 1e-6)
        });
    }
}
