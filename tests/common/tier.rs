//! The scale-out tier's Collectors, as `scripts/run-tier.sh` runs them: the
//! agent (`otel-collector/agent.yaml`) and gateways
//! (`otel-collector/gateway.yaml`) on free ports.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::collector::collector_binary;
use super::process::Guard;

/// A gateway Collector on fixed ports (so it can be restarted on them).
#[derive(Debug)]
pub struct Gateway {
    /// Its `gateway` external label.
    pub name: &'static str,
    /// The OTLP/gRPC receiver's port.
    pub grpc: u16,
    /// The health check's port.
    pub health: u16,
    /// The Collector's own telemetry port.
    pub telemetry: u16,
    /// The running Collector, if started.
    pub process: Option<Guard>,
}

impl Gateway {
    /// A gateway named `name` on free ports, not started.
    pub fn on_free_ports(name: &'static str) -> Gateway {
        Gateway {
            name,
            grpc: super::http::free_port(),
            health: super::http::free_port(),
            telemetry: super::http::free_port(),
            process: None,
        }
    }

    /// Starts it (again, on the same ports), exporting to `remote_write`;
    /// returns once it is healthy.
    pub fn start(&mut self, dir: &Path, remote_write: &str) {
        self.process = Some(super::process::spawn_logged(
            Command::new(collector_binary())
                .arg("--config")
                .arg(config("gateway.yaml"))
                .arg("--config")
                .arg(format!(
                    "yaml:exporters::prometheus_remote_write::external_labels::gateway: {}",
                    self.name
                ))
                .env("GATEWAY_OTLP_GRPC_PORT", self.grpc.to_string())
                .env("GATEWAY_HEALTH_PORT", self.health.to_string())
                .env("GATEWAY_TELEMETRY_PORT", self.telemetry.to_string())
                .env("REMOTE_WRITE_URL", remote_write),
            &dir.join(format!("gateway-{}.log", self.name)),
            "the gateway",
        ));
        let health = self.health;
        super::process::wait_for(30, &format!("gateway {} to be healthy", self.name), || {
            super::http::http_get(health, "/")
        });
    }

    /// Kills it.
    pub fn stop(&mut self) {
        self.process = None;
    }
}

/// The shipped config `name` of `otel-collector/`.
pub fn config(name: &str) -> PathBuf {
    super::paths::repo().join("otel-collector").join(name)
}

/// The agent, its OTLP/gRPC receiver on `grpc`, exporting to `gateways`;
/// returns once it is healthy.
pub fn start_agent(dir: &Path, grpc: u16, gateways: &[Gateway]) -> Guard {
    let endpoints: Vec<String> = gateways
        .iter()
        .map(|g| format!("127.0.0.1:{}", g.grpc))
        .collect();
    let health = super::http::free_port();
    let agent = super::process::spawn_logged(
        Command::new(collector_binary())
            .arg("--config")
            .arg(config("agent.yaml"))
            .env("AGENT_OTLP_GRPC_PORT", grpc.to_string())
            .env("AGENT_OTLP_HTTP_PORT", super::http::free_port().to_string())
            .env("AGENT_HEALTH_PORT", health.to_string())
            .env("AGENT_TELEMETRY_PORT", super::http::free_port().to_string())
            .env("GATEWAYS", format!("[{}]", endpoints.join(","))),
        &dir.join("agent.log"),
        "the agent",
    );
    super::process::wait_for(30, "the agent to be healthy", || {
        super::http::http_get(health, "/")
    });
    agent
}
