//! A real OpenTelemetry Collector (built by `otel-collector/build.sh`)
//! running the shipped `otel-collector/config.yaml` on free ports.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use super::process::Guard;

/// The Collector binary; fails with how to build it when missing.
pub fn collector_binary() -> PathBuf {
    super::environments::needs("collector");
    let binary = super::paths::repo().join("otel-collector/bin/otelcol-vllm");
    assert!(
        binary.is_file(),
        "the OpenTelemetry Collector is required: build it with `bash otel-collector/build.sh` (needs Go), or run `bash scripts/test.sh`"
    );
    binary
}

/// A Collector running the shipped config on free ports.
#[derive(Debug)]
pub struct Collector {
    process: Guard,
    /// The OTLP/gRPC receiver's port.
    pub grpc: u16,
    /// The OTLP/HTTP receiver's port.
    pub http: u16,
    /// The port of the Collector's Prometheus exporter (`/metrics`).
    pub prometheus: u16,
    dir: PathBuf,
}

impl Collector {
    /// The shipped config on free ports.
    pub fn start() -> Collector {
        Collector::start_on_free_ports(&[], &[])
    }

    /// On free ports; started again on others when a port chosen free was
    /// taken by another test before the Collector bound it.
    pub fn start_on_free_ports(overlays: &[&str], env: &[(&str, &str)]) -> Collector {
        for _ in 0..3 {
            let (grpc, http, prometheus) = (
                super::http::free_port(),
                super::http::free_port(),
                super::http::free_port(),
            );
            if let Some(collector) = Collector::try_start(grpc, http, prometheus, overlays, env) {
                return collector;
            }
        }
        panic!("the Collector exited at start three times; see its logs above")
    }

    /// The shipped config on the ports given.
    pub fn start_on(grpc: u16, http: u16, prometheus: u16) -> Collector {
        Collector::start_with(grpc, http, prometheus, &[], &[])
    }

    /// The shipped config on free ports, its traces pipeline sending to `jaeger`.
    pub fn start_tracing_to(jaeger: &super::jaeger::Jaeger) -> Collector {
        Collector::start_on_free_ports(
            &[],
            &[(
                "TRACES_ENDPOINT",
                &format!("127.0.0.1:{}", jaeger.otlp_grpc),
            )],
        )
    }

    /// The shipped config, merged with shipped `overlays`
    /// (`otel-collector/<name>`), with extra environment variables.
    pub fn start_with(
        grpc: u16,
        http: u16,
        prometheus: u16,
        overlays: &[&str],
        env: &[(&str, &str)],
    ) -> Collector {
        Collector::try_start(grpc, http, prometheus, overlays, env)
            .expect("the Collector exited at start (a port in use?); see its log")
    }

    /// Starts it and waits for its Prometheus endpoint; `None` when it
    /// exits first (its log, in its directory, says why).
    fn try_start(
        grpc: u16,
        http: u16,
        prometheus: u16,
        overlays: &[&str],
        env: &[(&str, &str)],
    ) -> Option<Collector> {
        let dir = super::paths::tempdir("collector");
        // The shipped config as it is; its ports come from these variables.
        let mut command = Command::new(collector_binary());
        command
            .arg("--config")
            .arg(super::paths::repo().join("otel-collector/config.yaml"));
        for overlay in overlays {
            command
                .arg("--config")
                .arg(super::paths::repo().join("otel-collector").join(overlay));
        }
        let process = super::process::spawn_logged(
            command
                .envs(env.iter().copied())
                .env("OTELCOL_OTLP_GRPC_PORT", grpc.to_string())
                .env("OTELCOL_OTLP_HTTP_PORT", http.to_string())
                .env("OTELCOL_PROMETHEUS_PORT", prometheus.to_string())
                .env(
                    "OTELCOL_TELEMETRY_PORT",
                    super::http::free_port().to_string(),
                ),
            &dir.join("collector.log"),
            "the Collector",
        );
        let mut collector = Collector {
            process,
            grpc,
            http,
            prometheus,
            dir,
        };
        let mut exited = false;
        super::process::wait_for(60, "the Collector's Prometheus endpoint", || {
            if matches!(collector.process.0.try_wait(), Ok(Some(_))) {
                exited = true;
                return Some(());
            }
            super::http::http_get(prometheus, "/metrics").map(|_| ())
        });
        if exited {
            eprintln!(
                "the Collector exited at start; log: {}",
                collector.dir.join("collector.log").display()
            );
            return None;
        }
        Some(collector)
    }

    /// The OTLP endpoint for `protocol` (`grpc`, else HTTP).
    pub fn endpoint(&self, protocol: &str) -> String {
        match protocol {
            "grpc" => format!("http://127.0.0.1:{}", self.grpc),
            _ => format!("http://127.0.0.1:{}", self.http),
        }
    }

    /// The TLS endpoint of a Collector started with the `tls.yaml` overlay.
    pub fn tls_endpoint(&self, protocol: &str) -> String {
        self.endpoint(protocol).replacen("http://", "https://", 1)
    }

    /// What the Collector wrote to its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("collector.log")).unwrap_or_default()
    }

    /// The `vllm:` (and, with attribution, `vllm_class:`) samples of one
    /// pushing process (by `instance`), without job/instance.
    pub fn samples_of(&self, instance: &str) -> BTreeMap<String, f64> {
        let text = super::http::http_get(self.prometheus, "/metrics").unwrap_or_default();
        let marker = format!("instance=\"{instance}\"");
        let own: String = text
            .lines()
            .filter(|l| is_vllm_sample(l) && l.contains(&marker))
            .map(|l| format!("{l}\n"))
            .collect();
        super::exposition::normalized_samples(&own, &["job", "instance"])
    }
}

/// A sample of vLLM's families, or of their series by class
/// (`--attribute`: `vllm_class:`, which the shipped config makes from the
/// class attributes OTLP carries, as the sidecar's `/metrics` does).
fn is_vllm_sample(line: &str) -> bool {
    line.starts_with("vllm:") || line.starts_with("vllm_class:")
}

/// A sidecar's `vllm:` (and `vllm_class:`) samples as the Collector's
/// Prometheus exporter shows them: it prefixes a label name that starts
/// with one `_` with `key` (vLLM's cache configuration has
/// `_block_size_resolved`); the sidecar's `/metrics` keeps vLLM's name.
pub fn as_exported(exposition: &str) -> BTreeMap<String, f64> {
    super::exposition::normalized_samples(
        &exposition
            .lines()
            .filter(|l| is_vllm_sample(l))
            .map(|l| format!("{}\n", l.replace("{_", "{key_").replace(",_", ",key_")))
            .collect::<String>(),
        &[],
    )
}

impl Collector {
    /// Waits up to 20 s for the Collector to show exactly `expected` (see
    /// [`as_exported`]) for `instance`; panics with the first differences.
    pub fn assert_shows(&self, instance: &str, expected: &BTreeMap<String, f64>) {
        let mut pushed = BTreeMap::new();
        let arrived = super::process::wait_for_optional(20, || {
            pushed = self.samples_of(instance);
            (&pushed == expected).then_some(())
        });
        assert!(
            arrived.is_some(),
            "the Collector shows {} samples, the sidecar {}; first differences: {:?}\ncollector log:\n{}",
            pushed.len(),
            expected.len(),
            expected
                .iter()
                .filter(|(k, v)| pushed.get(*k) != Some(v))
                .take(5)
                .collect::<Vec<_>>(),
            self.log()
        );
    }
}
