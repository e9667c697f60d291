//! A running `serve` process on free ports.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use super::process::Guard;

/// A running `serve` on free ports.
#[derive(Debug)]
pub struct Server {
    /// The `serve` process.
    pub process: Guard,
    /// The ingest port (`--ingest-addr`).
    pub ingest: u16,
    /// The `/metrics` port (`--metrics-addr`).
    pub metrics: u16,
}

impl Server {
    /// `serve` with `extra` arguments, ready once both ports answer.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with(extra, |_| {})
    }

    /// [`Server::start`] with `configure` applied to the command first.
    pub fn start_with(extra: &[&str], configure: impl FnOnce(&mut Command)) -> Server {
        let (ingest, metrics) = (super::http::free_port(), super::http::free_port());
        let mut command = Command::new(super::process::binary());
        command
            .args(["serve", "--ingest-addr", &format!("127.0.0.1:{ingest}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        configure(&mut command);
        let process = Guard(command.spawn().expect("serve starts"));
        super::process::wait_for(20, "serve's /metrics", || {
            super::http::http_get(metrics, "/metrics")
        });
        super::process::wait_for(20, "serve's ingest port", || {
            std::net::TcpStream::connect(("127.0.0.1", ingest)).ok()
        });
        Server {
            process,
            ingest,
            metrics,
        }
    }

    /// The ingest target, for `--target`.
    pub fn target(&self) -> String {
        format!("http://127.0.0.1:{}", self.ingest)
    }

    /// The `vllm:` samples of its `/metrics` now.
    pub fn vllm_samples(&self) -> BTreeMap<String, f64> {
        super::exposition::vllm_samples(
            &super::http::http_get(self.metrics, "/metrics").expect("serve answers"),
        )
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        let pid = self.process.0.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        self.process.0.wait().unwrap()
    }

    /// The sample `key` (`name{labels}` as written) of its `/metrics` now.
    pub fn sample(&self, key: &str) -> Option<f64> {
        super::exposition::samples(&super::http::http_get(self.metrics, "/metrics")?)
            .get(key)
            .copied()
    }
}

/// Sends `records` over `serve --ingest-socket`'s socket at `path`, as the
/// plugin does: each an encoded `Record` after its length (u32, little-endian).
#[cfg(all(feature = "grpc", unix))]
pub fn send_over_socket(
    path: &std::path::Path,
    records: &[vllm_otel_metrics::sources::ingest::proto::pb::Record],
) {
    use prost::Message;
    use std::io::Write;
    let mut socket = std::os::unix::net::UnixStream::connect(path).expect("the ingest socket");
    for record in records {
        let body = record.encode_to_vec();
        socket
            .write_all(&(body.len() as u32).to_le_bytes())
            .and_then(|()| socket.write_all(&body))
            .expect("the ingest socket takes a message");
    }
}
