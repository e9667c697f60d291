//! The scale-out tier's Collectors, as `scripts/run-tier.sh` runs them: the
//! agent (`otel-collector/agent.yaml`) and gateways
//! (`otel-collector/gateway.yaml`) on free ports.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::collector::collector_binary;
use super::Guard;

/// A gateway Collector on fixed ports (so it can be restarted on them).
pub(crate) struct Gateway {
    pub(crate) name: &'static str,
    pub(crate) grpc: u16,
    pub(crate) health: u16,
    pub(crate) telemetry: u16,
    pub(crate) process: Option<Guard>,
}

impl Gateway {
    /// A gateway named `name` on free ports, not started.
    pub(crate) fn on_free_ports(name: &'static str) -> Gateway {
        Gateway {
            name,
            grpc: super::free_port(),
            health: super::free_port(),
            telemetry: super::free_port(),
            process: None,
        }
    }

    pub(crate) fn start(&mut self, dir: &Path, remote_write: &str) {
        self.process = Some(super::spawn_logged(
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
        super::wait_for(30, &format!("gateway {} to be healthy", self.name), || {
            super::http_get(health, "/")
        });
    }

    pub(crate) fn stop(&mut self) {
        self.process = None;
    }
}

pub(crate) fn config(name: &str) -> PathBuf {
    super::repo().join("otel-collector").join(name)
}

pub(crate) fn start_agent(dir: &Path, grpc: u16, gateways: &[Gateway]) -> Guard {
    let endpoints: Vec<String> = gateways
        .iter()
        .map(|g| format!("127.0.0.1:{}", g.grpc))
        .collect();
    let health = super::free_port();
    let agent = super::spawn_logged(
        Command::new(collector_binary())
            .arg("--config")
            .arg(config("agent.yaml"))
            .env("AGENT_OTLP_GRPC_PORT", grpc.to_string())
            .env("AGENT_OTLP_HTTP_PORT", super::free_port().to_string())
            .env("AGENT_HEALTH_PORT", health.to_string())
            .env("AGENT_TELEMETRY_PORT", super::free_port().to_string())
            .env("GATEWAYS", format!("[{}]", endpoints.join(","))),
        &dir.join("agent.log"),
        "the agent",
    );
    super::wait_for(30, "the agent to be healthy", || {
        super::http_get(health, "/")
    });
    agent
}
