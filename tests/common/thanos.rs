//! A real Thanos (built by `otel-collector/build-thanos.sh`) as the storage
//! tier, as `scripts/run-tier.sh thanos` runs it: three `thanos receive`
//! ingesters (`receive_replica` r0, r1, r2), a routing receiver that writes
//! each series to all three (replication factor 3, write quorum 2), and
//! `thanos query` over the ingesters, deduplicating on `receive_replica`.
//! Everything on loopback, on free ports.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::process::Guard;

/// The Thanos binary; fails with how to build it when missing.
fn thanos_binary() -> PathBuf {
    super::environments::needs("thanos");
    let binary = super::paths::repo().join("otel-collector/bin/thanos");
    assert!(
        binary.is_file(),
        "Thanos is required: build it with `bash otel-collector/build-thanos.sh` (needs Go), or run `bash scripts/test.sh`"
    );
    binary
}

/// The replica label each ingester adds to what it stores.
pub const REPLICA_LABEL: &str = "receive_replica";

/// One `thanos receive` ingester, on fixed ports (so it can be restarted on
/// them, with its TSDB).
#[derive(Debug)]
pub struct Ingester {
    /// Its `receive_replica` label.
    pub name: String,
    /// Its gRPC port.
    pub grpc: u16,
    http: u16,
    remote_write: u16,
    capnproto: u16,
    process: Option<Guard>,
}

impl Ingester {
    fn on_free_ports(name: String) -> Ingester {
        Ingester {
            name,
            grpc: super::http::free_port(),
            http: super::http::free_port(),
            remote_write: super::http::free_port(),
            capnproto: super::http::free_port(),
            process: None,
        }
    }

    /// Starts it and waits until it is ready. Thanos v0.42.5 can crash at
    /// start (a nil TSDB in its tenant pruning, which it runs at once when
    /// started in a minute of the day divisible by twice the block
    /// duration, e.g. 00:00 or 04:00 UTC, before the TSDB is open): then it
    /// is started again in the next minute, up to three times.
    pub fn start(&mut self, dir: &Path) {
        for attempt in 1..=3 {
            if self.try_start(dir) {
                return;
            }
            eprintln!(
                "ingester {} exited at start (attempt {attempt}); see {}",
                self.name,
                dir.join(format!("ingester-{}.log", self.name)).display()
            );
            let into_minute = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                % 60;
            std::thread::sleep(std::time::Duration::from_secs(61 - into_minute));
        }
        panic!("ingester {} exited at start three times", self.name);
    }

    fn try_start(&mut self, dir: &Path) -> bool {
        let tsdb = dir.join(format!("tsdb-{}", self.name));
        let process = super::process::spawn_logged(
            Command::new(thanos_binary())
                .arg("receive")
                .arg(format!("--tsdb.path={}", tsdb.display()))
                .arg(format!("--grpc-address=127.0.0.1:{}", self.grpc))
                .arg(format!("--http-address=127.0.0.1:{}", self.http))
                .arg(format!(
                    "--remote-write.address=127.0.0.1:{}",
                    self.remote_write
                ))
                .arg(format!(
                    "--receive.capnproto-address=127.0.0.1:{}",
                    self.capnproto
                ))
                .arg(format!("--label={REPLICA_LABEL}=\"{}\"", self.name))
                .arg("--tsdb.retention=1d"),
            &dir.join(format!("ingester-{}.log", self.name)),
            "a Thanos ingester",
        );
        let process = self.process.insert(process);
        let http = self.http;
        let mut exited = false;
        super::process::wait_for(60, &format!("ingester {} to be ready", self.name), || {
            if matches!(process.0.try_wait(), Ok(Some(_))) {
                exited = true;
                return Some(());
            }
            super::http::http_get(http, "/-/ready").map(|_| ())
        });
        if exited {
            self.process = None;
        }
        !exited
    }

    /// Kills it (SIGKILL, as a crashed node).
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Its own metrics (Prometheus text).
    pub fn metrics(&self) -> Option<String> {
        super::http::http_get(self.http, "/metrics")
    }
}

/// The hashring: ingesters, router, query.
#[derive(Debug)]
pub struct Hashring {
    /// The directory of the logs and TSDBs.
    pub dir: PathBuf,
    /// The three ingesters.
    pub ingesters: Vec<Ingester>,
    _router: Guard,
    /// The router's remote-write URL.
    pub remote_write: String,
    router_http: u16,
    _query: Guard,
    /// The query's HTTP API port (Prometheus' query API).
    pub query: u16,
}

impl Hashring {
    /// Starts three ingesters, the router and the query in `dir`.
    pub fn start(dir: &Path) -> Hashring {
        let mut ingesters: Vec<Ingester> = (0..3)
            .map(|i| Ingester::on_free_ports(format!("r{i}")))
            .collect();
        for ingester in &mut ingesters {
            ingester.start(dir);
        }
        let endpoints: Vec<String> = ingesters
            .iter()
            .map(|i| format!("\"127.0.0.1:{}\"", i.grpc))
            .collect();
        let hashring = dir.join("hashring.json");
        std::fs::write(
            &hashring,
            format!(
                "[{{\"hashring\": \"default\", \"endpoints\": [{}]}}]\n",
                endpoints.join(", ")
            ),
        )
        .unwrap();
        let (router_http, remote_write) = (super::http::free_port(), super::http::free_port());
        let router = super::process::spawn_logged(
            Command::new(thanos_binary())
                .arg("receive")
                .arg(format!("--receive.hashrings-file={}", hashring.display()))
                .arg("--receive.replication-factor=3")
                .arg(format!(
                    "--grpc-address=127.0.0.1:{}",
                    super::http::free_port()
                ))
                .arg(format!("--http-address=127.0.0.1:{router_http}"))
                .arg(format!("--remote-write.address=127.0.0.1:{remote_write}"))
                .arg(format!(
                    "--receive.capnproto-address=127.0.0.1:{}",
                    super::http::free_port()
                ))
                .arg("--label=receive=\"router\"")
                .arg(format!("--tsdb.path={}", dir.join("tsdb-router").display())),
            &dir.join("router.log"),
            "the Thanos router",
        );
        super::process::wait_for(60, "the router to be ready", || {
            super::http::http_get(router_http, "/-/ready")
        });
        let query = super::http::free_port();
        let mut command = Command::new(thanos_binary());
        command
            .arg("query")
            .arg(format!("--http-address=127.0.0.1:{query}"))
            .arg(format!(
                "--grpc-address=127.0.0.1:{}",
                super::http::free_port()
            ))
            .arg(format!("--query.replica-label={REPLICA_LABEL}"));
        for ingester in &ingesters {
            command.arg(format!("--endpoint=127.0.0.1:{}", ingester.grpc));
        }
        let query_process =
            super::process::spawn_logged(&mut command, &dir.join("query.log"), "Thanos query");
        super::process::wait_for(60, "Thanos query to be ready", || {
            super::http::http_get(query, "/-/ready")
        });
        Hashring {
            dir: dir.to_path_buf(),
            ingesters,
            _router: router,
            remote_write: format!("http://127.0.0.1:{remote_write}/api/v1/receive"),
            router_http,
            _query: query_process,
            query,
        }
    }

    /// The router's own metrics (Prometheus text).
    pub fn router_metrics(&self) -> Option<String> {
        super::http::http_get(self.router_http, "/metrics")
    }

    /// Every log of the hashring, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in [
            "router",
            "query",
            "ingester-r0",
            "ingester-r1",
            "ingester-r2",
        ] {
            let log =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            out += &format!("--- {name}.log (last lines)\n");
            for line in tail.into_iter().rev() {
                out += line;
                out += "\n";
            }
        }
        out
    }
}
