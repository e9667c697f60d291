//! The plugin's records reach the sidecar and go on from it: over TLS with
//! a token, through a sidecar restart (the plugin never waits for it), and
//! on to a real Collector and Jaeger.
//!
//! The Python environment comes from `scripts/vllm-env.sh` (the test command
//! runs it first and passes its python in `VLLM_OTEL_METRICS_PYTHON`; without
//! it the test runs the script itself, which needs PyPI).

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod pki;
    pub mod plugin;
    pub mod process;
    pub mod serve;
}

use std::path::Path;
use std::process::Command;

use common::plugin::{
    run_oracle, run_script, run_script_with_env, simulated_trace, strings, MAX_MODEL_LEN,
};
use common::process::serial;
use common::serve::Server;
use serde_json::Value;

mod needs_collector_jaeger_vllm {
    use super::*;

    /// What a vLLM user then sees: the sidecar fed by the plugin pushes every
    /// sample it serves to a real Collector, and one `llm_request` span per
    /// finished request, with its preemption count, reaches Jaeger.
    #[test]
    fn plugin_fed_sidecar_reaches_the_collector_and_jaeger() {
        let _serial = serial();
        use common::collector::Collector;
        use common::jaeger::Jaeger;

        let dir = common::paths::tempdir("vllm-plugin-e2e");
        let trace = simulated_trace(&dir);
        let jaeger = Jaeger::start();
        let collector = Collector::start_tracing_to(&jaeger);
        let instance = format!("plugin-{}", std::process::id());
        let service = format!("vllm-plugin-{}", std::process::id());
        let endpoint = collector.endpoint("grpc");
        let server = Server::start_with(
            &[
                "--token-buckets",
                "python",
                "--max-model-len",
                MAX_MODEL_LEN,
                "--otlp-endpoint",
                &endpoint,
                "--otlp-traces-endpoint",
                &endpoint,
                "--otlp-protocol",
                "grpc",
                "--otlp-names",
                "prometheus",
                "--otlp-interval-ms",
                "500",
            ],
            |command| {
                command
                    .env("OTEL_SERVICE_NAME", &service)
                    .env(
                        "OTEL_RESOURCE_ATTRIBUTES",
                        format!("service.instance.id={instance}"),
                    )
                    .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                    .env_remove("OTEL_TRACES_SAMPLER");
            },
        );
        let report = run_oracle(&server, &trace, "sim-model-0", false, &dir);
        assert_eq!(report["differing_samples"].as_array().unwrap().len(), 0);
        let finished = report["finished_requests"].as_u64().unwrap() as usize;

        // The Collector shows exactly the sidecar's vllm: samples.
        let exposition = common::http::http_get(server.metrics, "/metrics").unwrap();
        // The Collector's Prometheus exporter prefixes a label name that starts
        // with one `_` with `key` (vLLM's cache configuration has
        // `_block_size_resolved`); the sidecar's /metrics keeps vLLM's name.
        let served = common::collector::as_exported(&exposition);
        assert!(served.len() > 500, "{} samples", served.len());
        collector.assert_shows(&instance, &served);

        // One span per finished request, carrying the histogram's preemptions.
        let preemptions = jaeger.request_spans_preemptions(&service, finished);
        let histogram_sum: f64 = served
            .iter()
            .filter(|(k, _)| k.starts_with("vllm:request_num_preemptions_sum"))
            .map(|(_, v)| v)
            .sum();
        assert!(preemptions > 0, "the trace preempts");
        assert_eq!(preemptions as f64, histogram_sum);
        eprintln!(
        "{} samples at the Collector, {finished} spans in Jaeger carrying {preemptions} preemptions",
        served.len()
    );
    }
}

mod needs_vllm {
    use super::*;

    /// `record()` never waits for the sidecar: killed, it drops and counts;
    /// restarted, the stream resumes and the drop count reaches `/metrics`.
    #[test]
    fn plugin_outlives_a_sidecar_restart() {
        let _serial = serial();
        let dir = common::paths::tempdir("vllm-plugin-restart");
        let log = dir.join("serve.log");
        let report = run_script(
            "restart.py",
            &[
                common::process::binary().to_str().unwrap(),
                "--queue",
                "50",
                "--log",
                log.to_str().unwrap(),
            ],
            &dir,
        );
        eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
        // Idle after a burst: the last record still arrives (the thread polls
        // every 50 ms; 2 s leaves room for a loaded machine).
        assert!(report["idle_arrival_seconds"].as_f64().unwrap() < 2.0);
        // Blocking would mean waiting for a connection (2 s) or a full queue
        // (forever); a call that never waits stays far below that even on a
        // loaded machine (its median is under a microsecond).
        assert!(report["down_record_max_seconds"].as_f64().unwrap() < 0.5);
        // 300 records while down, 50 fit in the queue: the rest are dropped,
        // bar the few the broken stream took before its failure was seen.
        let dropped = report["dropped_while_down"].as_u64().unwrap();
        assert!((240..=250).contains(&dropped), "dropped {dropped}");
        assert_eq!(report["queued_while_down"], 50);
        assert_eq!(
            report["sidecar_dropped"].as_f64(),
            report["dropped_total"].as_f64()
        );
        // After the restart: the 50 queued and the 100 new records arrive, but
        // for those dropped while the thread was still backing off.
        let dropped_after = report["dropped_total"].as_u64().unwrap() - dropped;
        assert_eq!(
            report["sidecar_generated_after_restart"].as_f64(),
            Some((50 + 100 - dropped_after) as f64)
        );
    }

    /// With `serve --tls-cert … --auth-token-file …`, the plugin's https target,
    /// CA file and token file get its records through; a wrong token gets
    /// nothing through and is named in the log, which never shows a token.
    #[test]
    fn plugin_streams_over_tls_with_a_token() {
        let _serial = serial();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let pki = common::pki::make_pki();
        let dir = common::paths::tempdir("vllm-plugin-tls");
        let (token, wrong) = (dir.join("token"), dir.join("wrong"));
        std::fs::write(&token, "plugin-s3cret\n").unwrap();
        std::fs::write(&wrong, "not-the-token\n").unwrap();
        let (ingest, metrics) = (common::http::free_port(), common::http::free_port());
        let path = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
        let _server = common::process::Guard(
            Command::new(common::process::binary())
                .args(["serve", "--ingest-addr", &format!("127.0.0.1:{ingest}")])
                .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
                .args(["--tls-cert", &path(&pki.server_cert)])
                .args(["--tls-key", &path(&pki.server_key)])
                .args([
                    "--auth-token-file",
                    &path(&token),
                    "--token-buckets",
                    "python",
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("serve starts"),
        );
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
        let client = reqwest::blocking::Client::builder()
            .tls_certs_only([ca])
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap();
        let url = format!("https://127.0.0.1:{metrics}/metrics");
        let generated = || -> Option<f64> {
            let text = client
                .get(&url)
                .bearer_auth("plugin-s3cret")
                .send()
                .ok()?
                .text()
                .ok()?;
            common::exposition::samples(&text)
                .get(r#"vllm:generation_tokens_total{model_name="m",engine="0"}"#)
                .copied()
        };
        common::process::wait_for(20, "serve's TLS /metrics", || client.get(&url).send().ok());
        let target = format!("https://localhost:{ingest}");
        let env = |token_file: &Path| {
            [
                ("VLLM_OTEL_METRICS_TARGET", target.clone()),
                ("VLLM_OTEL_METRICS_CA_FILE", path(&pki.ca)),
                ("VLLM_OTEL_METRICS_TOKEN_FILE", path(token_file)),
            ]
        };
        let run = |token_file: &Path, steps: &str| {
            let env = env(token_file);
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            run_script_with_env(
                "secure.py",
                &["--steps", steps, "--seconds", "3"],
                &dir,
                &env,
            )
        };

        let report = run(&token, "10");
        assert_eq!(
            (&report["pending"], &report["dropped"]),
            (&Value::from(0), &Value::from(0)),
            "{report}"
        );
        assert_eq!(generated(), Some(10.0));

        let report = run(&wrong, "5");
        assert_eq!(
            generated(),
            Some(10.0),
            "nothing got through with a wrong token"
        );
        let log = strings(&report["log"]).join("\n");
        assert!(log.contains("UNAUTHENTICATED"), "{log}");
        assert!(
            !log.contains("not-the-token") && !log.contains("plugin-s3cret"),
            "{log}"
        );
    }
}
