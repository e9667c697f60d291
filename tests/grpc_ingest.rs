//! `serve`: engines stream records over gRPC; `/metrics` must show exactly
//! what `replay` of the same records shows. Clients: the Python example and
//! `replay --target`; a real Collector checks the flush at SIGTERM.

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
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::collector::Collector;
use common::exposition::vllm_samples;
use common::serve::Server;

fn replayed(trace: &Path) -> BTreeMap<String, f64> {
    let (_, stdout, _) = common::process::replay(trace);
    vllm_samples(&stdout)
}

fn python_with_grpc() -> std::path::PathBuf {
    let python = common::environments::require_tool(
        "python3",
        "install Python 3 (apt-get install -y python3)",
    );
    let probe = Command::new(&python)
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .unwrap();
    assert!(
        probe.status.success(),
        "Python packages grpcio and grpcio-tools are required: pip install -r examples/python/requirements.txt"
    );
    python
}

#[test]
fn python_client_stream_equals_replay() {
    let python = python_with_grpc();
    let server = Server::start(&[]);
    let trace = common::paths::repo().join("tests/data/generated-seed11.jsonl");
    let output = Command::new(python)
        .arg(common::paths::repo().join("examples/python/stream_trace.py"))
        .arg(&trace)
        .args(["--target", &format!("127.0.0.1:{}", server.ingest)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The trace has malformed lines (rejected by the client) and unknown ids.
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("0 rejected by the server, 6 line(s) rejected here"),
        "{stdout}"
    );
    assert!(stderr.contains("generated-seed11.jsonl:463:"), "{stderr}");
    let expected = replayed(&trace);
    assert!(expected.len() > 1000);
    assert_eq!(server.vllm_samples(), expected);
}

/// Splits a trace by engine (aborts follow their request's engine).
fn split_by_engine(trace: &Path, dir: &Path) -> Vec<std::path::PathBuf> {
    let mut engine_of: BTreeMap<String, u64> = BTreeMap::new();
    let mut parts: BTreeMap<u64, String> = BTreeMap::new();
    for line in std::fs::read_to_string(trace).unwrap().lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let engine = match value["type"].as_str().unwrap() {
            "request" => {
                let engine = value["engine"].as_u64().unwrap();
                engine_of.insert(value["request_id"].as_str().unwrap().to_owned(), engine);
                engine
            }
            "abort" => engine_of[value["request_id"].as_str().unwrap()],
            _ => value["engine"].as_u64().unwrap(),
        };
        let part = parts.entry(engine).or_default();
        part.push_str(line);
        part.push('\n');
    }
    parts
        .into_iter()
        .map(|(engine, text)| {
            let path = dir.join(format!("engine-{engine}.jsonl"));
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect()
}

#[test]
fn concurrent_streams_from_several_engines() {
    let dir = common::paths::tempdir("ingest");
    let trace = dir.join("fleet.jsonl");
    let (code, _, stderr) = common::process::run(&[
        "simulate",
        "--engines",
        "3",
        "--models",
        "2",
        "--duration",
        "20",
        "--seed",
        "4",
        "--record",
        trace.to_str().unwrap(),
        "--metrics-addr",
        "none",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let parts = split_by_engine(&trace, &dir);
    assert_eq!(parts.len(), 3);
    let server = Server::start(&[]);
    let clients: Vec<Child> = parts
        .iter()
        .map(|part| {
            Command::new(common::process::binary())
                .args([
                    "replay",
                    part.to_str().unwrap(),
                    "--metrics-addr",
                    "none",
                    "--target",
                    &server.target(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for client in clients {
        let output = client.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains("remote ingest: ") && stderr.contains(", 0 rejected"),
            "{stderr}"
        );
    }
    assert_eq!(server.vllm_samples(), replayed(&trace));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn inflight_limit_and_ttl_terminate_requests_as_abort() {
    let server = Server::start(&["--max-inflight-requests", "3", "--request-ttl", "1"]);
    let dir = common::paths::tempdir("evict");
    let trace = dir.join("starts.jsonl");
    let starts: String = (1..=5)
        .map(|i| format!("{{\"type\":\"request\",\"request_id\":\"r{i}\",\"model_name\":\"m\",\"engine\":0,\"arrival_time\":100.0,\"prompt_len\":4}}\n"))
        .collect();
    std::fs::write(&trace, starts).unwrap();
    let (code, _, stderr) = common::process::replay_to(&trace, &server.target(), &[]);
    assert_eq!(code, 0, "{stderr}");
    let evicted = |reason: &str| {
        server.sample(&format!(
            "vllm_otel_metrics_evicted_requests_total{{reason=\"{reason}\"}}"
        ))
    };
    let aborted =
        r#"vllm:request_success_total{model_name="m",engine="0",finished_reason="abort"}"#;
    assert_eq!(
        evicted("inflight_limit"),
        Some(2.0),
        "the two oldest went at once"
    );
    common::process::wait_for(10, "the idle requests to expire", || {
        (evicted("ttl") == Some(3.0)).then_some(())
    });
    assert_eq!(server.sample(aborted), Some(5.0));
    assert_eq!(
        server.sample(r#"vllm:request_num_preemptions_count{model_name="m",engine="0"}"#),
        Some(5.0)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn malformed_records_and_garbage_frames_leave_the_server_serving() {
    let python = python_with_grpc();
    let server = Server::start(&[]);
    let output = Command::new(python)
        .arg(common::paths::repo().join("tests/helpers/grpc_misfits.py"))
        .arg(format!("127.0.0.1:{}", server.ingest))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let misfits = &lines[0]["misfits"];
    // Record 4's one output is rejected alone: the record is applied.
    assert_eq!(misfits["applied"], 3, "{misfits}");
    assert_eq!(misfits["rejected"], 2, "{misfits}");
    assert_eq!(misfits["by_reason"]["invalid_record"], 3);
    let first: Vec<&str> = misfits["first"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(
        first,
        [
            "record 2: empty record (no field of the oneof set)",
            "record 3: invalid abort record: received_at is not a finite number (NaN)",
            "record 4: request a: unknown event type 7",
        ]
    );
    // A message that does not decode is counted at its position; the
    // stream goes on (gRPC's framing says where the next message begins).
    assert_eq!(
        lines[1]["garbage"],
        serde_json::json!({
            "applied": 2,
            "rejected": 1,
            "by_reason": {"invalid_record": 1},
            "first": ["record 2: cannot decode the message (malformed protobuf in a Record)"],
        })
    );
    assert_eq!(
        lines[2]["after"]["applied"], 2,
        "the server still serves: {}",
        lines[2]
    );
    // A batch message: its records are applied in order and counted one by
    // one; the batch nested in it is refused at its own position.
    assert_eq!(
        lines[3]["batch"],
        serde_json::json!({
            "applied": 3,
            "rejected": 1,
            "by_reason": {"invalid_record": 1},
            "first": ["record 2: a batch inside a batch"],
        })
    );
    // a, b (finished after the garbage message), c and d finished (e is
    // still in flight).
    assert_eq!(
        server.sample(
            r#"vllm:request_success_total{model_name="m",engine="0",finished_reason="stop"}"#
        ),
        Some(4.0)
    );
    assert_eq!(
        server.sample(r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#),
        // The three misfits, the garbage message, the nested batch.
        Some(5.0)
    );
}

mod needs_collector {
    use super::*;

    #[test]
    fn sigterm_drains_and_flushes_otlp() {
        let collector = Collector::start();
        let endpoint = collector.endpoint("grpc");
        let mut server = Server::start_with(
            &[
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                "grpc",
                "--otlp-interval-ms",
                "60000",
            ],
            |command| {
                command.env(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "service.instance.id=serve-sigterm",
                );
            },
        );
        let trace = common::paths::repo().join("tests/data/generated-seed12.jsonl");
        let (code, _, stderr) = common::process::replay_to(&trace, &server.target(), &[]);
        assert_eq!(code, 0, "{stderr}");
        let expected = replayed(&trace);
        assert_eq!(server.vllm_samples(), expected);
        // Nothing was exported yet (60 s interval): SIGTERM must do it.
        assert!(collector.samples_of("serve-sigterm").is_empty());
        let status = server.sigterm();
        let mut stderr = String::new();
        std::io::Read::read_to_string(server.process.0.stderr.as_mut().unwrap(), &mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("received SIGTERM"), "{stderr}");
        let expected = common::exposition::normalized_samples(
            &expected
                .iter()
                .map(|(k, v)| format!("{k} {v}\n"))
                .collect::<String>(),
            &[],
        );
        let mut last = BTreeMap::new();
        let arrived = common::process::wait_for_optional(15, || {
            last = collector.samples_of("serve-sigterm");
            (last == expected).then_some(())
        });
        assert!(
            arrived.is_some(),
            "the Collector has {} of {} samples; log:\n{}",
            last.len(),
            expected.len(),
            collector.log()
        );
    }
}
