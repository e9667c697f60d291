//! Hardening: each failure an adversarial review found, as a test.
//!
//! Bounded inputs (a long label value or request id, out-of-order
//! timestamps, a byte-order mark, over-long lines), exits (a closed stdout,
//! SIGTERM during `replay --output`, a port that cannot be bound), secrets
//! kept out of stderr, and a stream cut at the drain deadline answered with
//! its summary. Listener bounds and TLS are in `tests/listeners.rs`.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod process;
    pub mod serve;
}

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::collector::Collector;
use common::serve::Server;

fn data(name: &str) -> std::path::PathBuf {
    common::paths::repo().join("tests/data").join(name)
}

/// Timestamps that go backwards within a request are refused with their
/// position, never a negative sum; the exposition then parses as OpenMetrics.
#[test]
fn backwards_timestamps_are_invalid_never_a_negative_sum() {
    let dir = common::paths::tempdir("backwards");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        [
            r#"{"type":"request","request_id":"r","model_name":"m","engine":0,"arrival_time":100.0,"prompt_len":4}"#,
            r#"{"type":"outputs","engine":0,"timestamp":10.0,"received_at":100.5,"outputs":[{"request_id":"r","new_token_ids":[1]}]}"#,
            r#"{"type":"outputs","engine":0,"timestamp":12.0,"received_at":101.0,"outputs":[{"request_id":"r","new_token_ids":[2]}]}"#,
            r#"{"type":"outputs","engine":0,"timestamp":7.0,"received_at":101.5,"outputs":[{"request_id":"r","new_token_ids":[3]}]}"#,
            r#"{"type":"outputs","engine":0,"timestamp":13.0,"received_at":99.0,"outputs":[{"request_id":"r","new_token_ids":[4]}]}"#,
            r#"{"type":"outputs","engine":0,"timestamp":13.0,"received_at":102.0,"outputs":[{"request_id":"r","new_token_ids":[5],"finish_reason":"stop"}]}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let (code, text, stderr) =
        common::process::replay_with_env(&trace, &["--output", "openmetrics"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("t.jsonl:4: invalid output record: timestamp 7 is earlier than the request's previous output at 12"), "{stderr}");
    assert!(stderr.contains("t.jsonl:5: invalid output record: received_at 99 is earlier than the request's arrival_time 100"), "{stderr}");
    let samples = common::exposition::samples(&text.replace("# EOF\n", ""));
    let key = |k: &str| {
        samples[&format!("vllm:inter_token_latency_seconds_{k}{{model_name=\"m\",engine=\"0\"}}")]
    };
    assert_eq!((key("count"), key("sum")), (2.0, 3.0));
    assert!(samples.values().all(|v| *v >= 0.0), "no negative sample");
    assert_eq!(
        samples["vllm_otel_metrics_rejected_inputs_total{reason=\"invalid_record\"}"],
        2.0
    );
    let mut parser = Command::new(common::environments::python_with_prometheus_client())
        .arg(common::paths::repo().join("tests/helpers/parse_exposition.py"))
        .arg("openmetrics")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    parser
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let parsed = parser.wait_with_output().unwrap();
    assert!(
        parsed.status.success(),
        "{}",
        String::from_utf8_lossy(&parsed.stderr)
    );
}

/// A byte-order mark before line 1 is not an invalid line; a line over
/// `--max-line-bytes` is, located, and the lines around it still apply.
#[test]
fn a_bom_is_accepted_and_an_overlong_line_is_refused_alone() {
    let dir = common::paths::tempdir("bom");
    let trace = dir.join("t.jsonl");
    let start = r#"{"type":"request","request_id":"r","model_name":"m","engine":0,"arrival_time":1.0,"prompt_len":4}"#;
    let end = r#"{"type":"abort","request_id":"r","received_at":2.0}"#;
    std::fs::write(&trace, format!("\u{feff}{start}\n{end}\n")).unwrap();
    let (code, with_bom, stderr) = common::process::replay(&trace);
    assert_eq!(code, 0, "{stderr}");
    assert!(with_bom.contains(
        "vllm:request_success_total{model_name=\"m\",engine=\"0\",finished_reason=\"abort\"} 1\n"
    ));

    let long = format!(
        r#"{{"type":"abort","request_id":"{}","received_at":2.0}}"#,
        "x".repeat(5000)
    );
    std::fs::write(&trace, format!("{start}\n{long}\n{end}\n")).unwrap();
    let (code, capped, stderr) =
        common::process::replay_with(&trace, &["--max-line-bytes", "1000"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("t.jsonl:2: line is 5051 bytes, more than the limit of 1000"),
        "{stderr}"
    );
    assert_eq!(
        capped,
        with_bom.replace(
            "vllm_otel_metrics_rejected_inputs_total{reason=\"invalid_record\"} 0\n",
            "vllm_otel_metrics_rejected_inputs_total{reason=\"invalid_record\"} 1\n",
        )
    );
}

/// `replay … | head -1`: a reader that goes away ends the output quietly
/// and the exit status stays the documented one (2: the trace has invalid
/// lines), not 1 with "Broken pipe".
#[test]
fn a_closed_stdout_keeps_the_documented_exit_status() {
    let mut child = Command::new(common::process::binary())
        .args(["replay", "--output", "prometheus", "--metrics-addr", "none"])
        .arg(data("generated-seed11.jsonl"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("# HELP "), "{first}");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(!stderr.to_lowercase().contains("broken pipe"), "{stderr}");
}

/// SIGTERM during `replay - --output prometheus` prints the exposition of
/// what was applied (the whole trace here), then exits 143.
#[test]
fn sigterm_during_replay_prints_what_was_applied() {
    let port = common::http::free_port();
    let mut child = Command::new(common::process::binary())
        .args(["replay", "-", "--output", "prometheus"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(&std::fs::read(data("lifecycle.jsonl")).unwrap())
        .unwrap();
    stdin.flush().unwrap();
    let golden = std::fs::read_to_string(data("lifecycle.prom")).unwrap();
    common::process::wait_for(20, "the trace to be applied", || {
        let live = common::http::http_get(port, "/metrics")?;
        (common::exposition::vllm_samples(&live) == common::exposition::vllm_samples(&golden))
            .then_some(())
    });
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let output = child.wait_with_output().unwrap();
    drop(stdin);
    assert_eq!(
        output.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8(output.stdout).unwrap(), golden);
}

/// A `/metrics` port that is taken is a start-up error naming the address
/// (exit 1), not a warning with the process running on.
#[test]
fn a_taken_metrics_port_is_a_start_up_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let (status, _, stderr) = common::process::run(&[
        "replay",
        data("lifecycle.jsonl").to_str().unwrap(),
        "--metrics-addr",
        &addr.to_string(),
    ]);
    assert_eq!(
        status, 4,
        "a taken address has a status of its own: {stderr}"
    );
    let error = stderr.lines().last().unwrap_or_default();
    assert!(
        error.starts_with(&format!("error: cannot serve /metrics on {addr}: "))
            && error.ends_with(" (choose another --metrics-addr, or none)"),
        "{stderr}"
    );
}

/// Secrets never reach stderr: a malformed header value, credentials in an
/// endpoint (flag or variable) or a target, and a valid header during
/// failing exports.
#[test]
fn secrets_never_reach_stderr() {
    let trace = data("lifecycle.jsonl");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let (code, _, stderr) = common::process::replay_with_env(&trace, args, env);
        (code, stderr)
    };
    let (code, stderr) = run(
        &[
            "--otlp-endpoint",
            "http://127.0.0.1:1",
            "--otlp-header",
            "authorization=Bearer SECRET-A,x",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--otlp-header #1: not one KEY=VALUE header (the value is not shown)"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRET-A"), "{stderr}");

    let (code, stderr) = run(
        &["--otlp-endpoint", "http://user:SECRET-B@127.0.0.1:1"],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--otlp-endpoint http://***@127.0.0.1:1/v1/metrics carries credentials"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRET-B"), "{stderr}");

    let (code, stderr) = run(
        &[],
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://user:SECRET-C@127.0.0.1:1",
        )],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT http://***@127.0.0.1:1 carries credentials"),
        "{stderr}"
    );
    assert!(!stderr.contains("SECRET-C"), "{stderr}");

    let (code, stderr) = run(&["--target", "http://user:SECRET-E@127.0.0.1:1"], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(!stderr.contains("SECRET-E"), "{stderr}");

    for protocol in ["grpc", "http/protobuf"] {
        let (code, stderr) = run(
            &[
                "--otlp-endpoint",
                "http://127.0.0.1:1",
                "--otlp-protocol",
                protocol,
                "--otlp-timeout-ms",
                "500",
                "--otlp-header",
                "authorization=Bearer SECRET-D",
            ],
            &[("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=SECRET-F")],
        );
        assert_eq!(code, 3, "{protocol}: {stderr}");
        assert!(
            stderr.contains("error: final OTLP export to http://127.0.0.1:1"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("SECRET-D") && !stderr.contains("SECRET-F"),
            "{stderr}"
        );
    }
}

/// A stream still open at the drain deadline is answered `UNAVAILABLE`
/// with the summary of what it applied in a trailer, so its client can
/// resume instead of sending everything again.
#[test]
fn a_stream_cut_at_the_drain_deadline_gets_its_summary() {
    use vllm_otel_metrics::protocol::{Record, RequestStart};
    use vllm_otel_metrics::sources::ingest::grpc::SUMMARY_TRAILER;
    use vllm_otel_metrics::sources::ingest::proto::pb;
    use vllm_otel_metrics::sources::ingest::proto::record_to_proto;

    let server = Server::start(&["--drain-timeout", "1"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    let target = server.target();
    let call = runtime.spawn(async move {
        let mut client = pb::ingest_client::IngestClient::connect(target)
            .await
            .unwrap();
        client
            .stream(tokio_stream::wrappers::ReceiverStream::new(receiver))
            .await
    });
    for i in 0..5 {
        let start = Record::Request(RequestStart {
            request_id: format!("r{i}"),
            model_name: "m".into(),
            engine: 0,
            arrival_time: 1.0,
            prompt_len: 4,
            max_tokens: None,
            n: 1,
            traceparent: None,
            operation_name: None,
            stop_strings: false,
            lora_name: None,
            priority: None,
        });
        runtime
            .block_on(sender.send(record_to_proto(&start)))
            .unwrap();
    }
    common::process::wait_for(10, "the five starts to be applied", || {
        let text = common::http::http_get(server.metrics, "/metrics")?;
        text.contains("vllm:request_num_preemptions_count{model_name=\"m\",engine=\"0\"} 0\n")
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(Command::new("kill")
        .args(["-TERM", &server.process.0.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = runtime
        .block_on(call)
        .unwrap()
        .expect_err("the stream is cut, not finished");
    drop(sender);
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .contains("the first 5 record(s) of this stream were read"),
        "{status:?}"
    );
    let summary = status
        .metadata()
        .get_bin(SUMMARY_TRAILER)
        .expect("the summary trailer")
        .to_bytes()
        .unwrap();
    let summary = <pb::IngestSummary as prost::Message>::decode(summary.as_ref()).unwrap();
    assert_eq!((summary.records_applied, summary.records_rejected), (5, 0));
}

mod needs_collector {
    use super::*;

    /// One trace line with a 5 MiB model name (and an output for its request)
    /// among the valid lines of `lifecycle.jsonl`: the line is refused alone,
    /// located and counted; the exposition is the clean trace's; and OTLP keeps
    /// delivering every valid observation to the real Collector (before the
    /// bound the export was 126 MB, the Collector refused it and every later
    /// one: 0 of 38 observations arrived).
    #[test]
    fn a_long_label_is_refused_and_otlp_keeps_delivering() {
        let clean = std::fs::read_to_string(data("lifecycle.jsonl")).unwrap();
        let mut lines: Vec<String> = clean.lines().map(str::to_owned).collect();
        let long = "m".repeat(5 << 20);
        lines.insert(
        1,
        format!(
            r#"{{"type":"request","request_id":"long","model_name":"{long}","engine":0,"arrival_time":1.0,"prompt_len":4}}"#
        ),
    );
        let dir = common::paths::tempdir("long-label");
        let poisoned = dir.join("poisoned.jsonl");
        std::fs::write(&poisoned, lines.join("\n") + "\n").unwrap();

        let collector = Collector::start();
        let (code, exposition, stderr) = common::process::replay_with_env(
            &poisoned,
            &[
                "--output",
                "prometheus",
                "--otlp-endpoint",
                &collector.endpoint("grpc"),
                "--otlp-protocol",
                "grpc",
            ],
            &[("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=long-label")],
        );
        assert_eq!(code, 2, "{}", &stderr[..stderr.len().min(2000)]);
        assert!(
        stderr.contains(&format!(
            "poisoned.jsonl:2: invalid request record: model_name is {} bytes, more than the limit of 256 ('{}… ({} bytes)')",
            5 << 20,
            "m".repeat(64),
            5 << 20
        )),
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
        assert!(stderr.len() < 10_000, "no megabyte of label in stderr");
        assert!(
            !stderr.contains("OTLP export"),
            "no export failed: {stderr}"
        );
        let (_, clean_exposition, _) = common::process::replay(&data("lifecycle.jsonl"));
        assert_eq!(
            common::exposition::vllm_samples(&exposition),
            common::exposition::vllm_samples(&clean_exposition)
        );
        assert!(
            exposition.len() < clean_exposition.len() + 100,
            "scrape size unchanged"
        );
        let expected = common::exposition::normalized_samples(
            &exposition
                .lines()
                .filter(|l| l.starts_with("vllm:"))
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
            &[],
        );
        let mut last = BTreeMap::new();
        let arrived = common::process::wait_for_optional(15, || {
            last = collector.samples_of("long-label");
            (last == expected).then_some(())
        });
        assert!(
            arrived.is_some(),
            "{} samples expected, {} at the Collector, first differences: {:?}",
            expected.len(),
            last.len(),
            expected
                .iter()
                .filter(|(k, v)| last.get(*k) != Some(*v))
                .take(5)
                .collect::<Vec<_>>()
        );
    }
}
