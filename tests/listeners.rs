//! The two listeners (`/metrics` and gRPC ingest) under load they must
//! survive: scrapers that never read, idle connections under a low file
//! descriptor limit, TLS with client certificates, and bearer tokens.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod pki;
    pub mod process;
    pub mod serve;
}

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pki::make_pki;
use common::process::Guard;

/// A `/proc/PID/status` field in MiB (`VmRSS`, `VmHWM`).
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kib: f64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib / 1024.0
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// CPU seconds (user + system) the process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// A `replay -` fed `label_sets` finished requests, one per label set, its
/// stdin kept open so that it keeps serving `/metrics` on `port`.
fn serving_replay(
    port: u16,
    label_sets: usize,
    extra: &[&str],
) -> (Guard, std::process::ChildStdin) {
    let mut child: Child = Command::new(common::process::binary())
        .args(["replay", "-", "--output", "none"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut trace = String::new();
    for i in 0..label_sets {
        let (model, engine) = (format!("model-{}", i % 20), i / 20);
        trace.push_str(&format!(
            r#"{{"type":"request","request_id":"r{i}","model_name":"{model}","engine":{engine},"arrival_time":100.0,"prompt_len":512,"max_tokens":64,"n":1}}"#
        ));
        trace.push('\n');
        trace.push_str(&format!(
            r#"{{"type":"outputs","engine":{engine},"timestamp":2.0,"received_at":100.5,"outputs":[{{"request_id":"r{i}","new_token_ids":[1,2],"events":[{{"type":"queued","timestamp":1.0}},{{"type":"scheduled","timestamp":1.5}},{{"type":"preempted","timestamp":1.8}}],"finish_reason":"stop"}}]}}"#
        ));
        trace.push('\n');
    }
    stdin.write_all(trace.as_bytes()).unwrap();
    stdin.flush().unwrap();
    (Guard(child), stdin)
}

/// 20 connections send `GET /metrics` and never read: they share one
/// encoded exposition (RSS grows by about one copy, not twenty), and the
/// write timeout closes them. Before: 20 slow scrapers of a 60 MB
/// exposition raised RSS from 79 MB to 1.25 GB and were never closed.
#[test]
fn slow_scrapers_share_one_exposition_and_are_closed() {
    let port = common::http::free_port();
    let (server, _stdin) = serving_replay(port, 1_000, &["--write-timeout", "3"]);
    let pid = server.0.id();
    let exposition = common::process::wait_for(60, "1,000 label sets applied", || {
        let text = common::http::http_get(port, "/metrics")?;
        text.contains("engine=\"49\"").then_some(text)
    });
    let size_mib = exposition.len() as f64 / (1 << 20) as f64;
    assert!(size_mib > 20.0, "a large exposition: {size_mib:.1} MiB");
    let (rss_before, fds_before) = (status_mib(pid, "VmRSS:"), open_fds(pid));
    let mut scrapers: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            s
        })
        .collect();
    // While they hang: all connected, memory about one exposition more.
    std::thread::sleep(Duration::from_millis(2000));
    let (rss_during, fds_during) = (status_mib(pid, "VmRSS:"), open_fds(pid));
    assert!(
        fds_during >= fds_before + 16,
        "{fds_before} -> {fds_during} fds"
    );
    assert!(
        rss_during - rss_before < 2.0 * size_mib + 20.0,
        "RSS {rss_before:.0} -> {rss_during:.0} MiB for a {size_mib:.1} MiB exposition"
    );
    // After the write timeout the server has closed them.
    common::process::wait_for(20, "the slow scrapers to be closed", || {
        (open_fds(pid) <= fds_before + 1).then_some(())
    });
    let peak = status_mib(pid, "VmHWM:");
    eprintln!(
        "slow scrapers: exposition {size_mib:.1} MiB, RSS {rss_before:.1} -> {rss_during:.1} MiB with 20 hanging, peak {peak:.1} MiB"
    );
    // The server still answers.
    assert!(common::http::http_get(port, "/metrics").is_some());
    scrapers.clear();
}

/// 300 idle TCP connections to the ingest port of a `serve` limited to 128
/// file descriptors: `/metrics` keeps answering, the process does not spin,
/// and once the idle ones are closed a real client streams. Before: 300
/// idle connections under a 256-descriptor limit made `serve` spin a core
/// and stop answering both listeners until they closed.
#[test]
fn idle_connections_under_a_low_fd_limit_neither_spin_nor_block() {
    let prlimit = common::environments::require_tool(
        "prlimit",
        "install util-linux (apt-get install -y util-linux)",
    );
    let (ingest, metrics) = (common::http::free_port(), common::http::free_port());
    let server = Guard(
        Command::new(prlimit)
            .arg("--nofile=128:128")
            .arg(common::process::binary())
            .args(["serve", "--ingest-addr", &format!("127.0.0.1:{ingest}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--idle-timeout", "2", "--ingest-max-connections", "32"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = server.0.id();
    common::process::wait_for(20, "serve's /metrics", || {
        common::http::http_get(metrics, "/metrics")
    });
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(("127.0.0.1", ingest)).unwrap())
        .collect();
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let answered = common::http::http_get(metrics, "/metrics");
    assert!(
        answered.is_some(),
        "/metrics answers with 300 idle ingest connections"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(2500));
    let cpu = cpu_seconds(pid) - cpu_before;
    assert!(cpu < 1.0, "{cpu:.2} CPU seconds in 3 s: spinning");
    // The idle ones are closed batch by batch; a real stream gets through.
    let (status, _, stderr) = common::process::replay_to(
        &common::paths::repo().join("tests/data/lifecycle.jsonl"),
        &format!("http://127.0.0.1:{ingest}"),
        &[],
    );
    assert_eq!(status, 2, "the trace's own invalid lines only: {stderr}");
    assert!(stderr.contains("remote ingest: "), "{stderr}");
    drop(idle);
}

/// A `serve` with TLS, a bearer token and (for `/metrics`) client
/// certificates: the right clients get through, the others are refused.
#[test]
fn tls_and_tokens_on_ingest_and_metrics() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = make_pki();
    let dir = common::paths::tempdir("tokens");
    let token = dir.join("token");
    std::fs::write(&token, "s3cr3t-token\n").unwrap();
    let (ingest, metrics) = (common::http::free_port(), common::http::free_port());
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let _server = Guard(
        Command::new(common::process::binary())
            .args(["serve", "--ingest-addr", &format!("127.0.0.1:{ingest}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args([
                "--tls-cert",
                &path(&pki.server_cert),
                "--tls-key",
                &path(&pki.server_key),
            ])
            .args(["--auth-token-file", &path(&token)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let client = reqwest::blocking::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{metrics}/metrics");
    common::process::wait_for(20, "serve's TLS /metrics", || client.get(&url).send().ok());
    let status =
        |request: reqwest::blocking::RequestBuilder| request.send().unwrap().status().as_u16();
    assert_eq!(status(client.get(&url)), 401);
    assert_eq!(status(client.get(&url).bearer_auth("wrong")), 401);
    assert_eq!(status(client.get(&url).bearer_auth("s3cr3t-token")), 200);
    assert!(
        common::http::http_get(metrics, "/metrics").is_none(),
        "plain HTTP is not served on a TLS port"
    );

    let ca = path(&pki.ca);
    let replay_to = |extra: &[&str]| {
        common::process::replay_to(
            &common::paths::repo().join("tests/data/lifecycle.jsonl"),
            &format!("https://localhost:{ingest}"),
            &[&["--target-ca", ca.as_str()][..], extra].concat(),
        )
    };
    let (code, _, stderr) = replay_to(&["--target-token-file", &path(&token)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("remote ingest: "), "{stderr}");
    assert!(!stderr.contains("s3cr3t"), "{stderr}");
    let (code, _, stderr) = replay_to(&[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("a bearer token is required"), "{stderr}");
    let served = client
        .get(&url)
        .bearer_auth("s3cr3t-token")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        served.contains("vllm:request_num_preemptions_count{model_name=\"llama\",engine=\"0\"}"),
        "the authorised stream was applied"
    );

    // Mutual TLS on /metrics.
    let port = common::http::free_port();
    let _mtls = Guard(
        Command::new(common::process::binary())
            .args([
                "replay",
                "-",
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
            ])
            .args([
                "--tls-cert",
                &path(&pki.server_cert),
                "--tls-key",
                &path(&pki.server_key),
            ])
            .args(["--tls-client-ca", &path(&pki.ca)])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut identity = std::fs::read(&pki.client_cert).unwrap();
    identity.extend(std::fs::read(&pki.client_key).unwrap());
    let with_certificate = reqwest::blocking::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap()])
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{port}/metrics");
    let text = common::process::wait_for(20, "the mutual-TLS /metrics", || {
        with_certificate.get(&url).send().ok()?.text().ok()
    });
    assert!(
        text.starts_with("# HELP vllm:num_preemptions_total"),
        "{}",
        &text[..100]
    );
    assert!(
        client.get(&url).send().is_err(),
        "no client certificate, no connection"
    );
}

/// `/metrics` serves the process families Prometheus client libraries
/// expose (vLLM's dashboards query `process_start_time_seconds`).
#[test]
fn metrics_serves_the_process_families() {
    let port = common::http::free_port();
    let (server, _stdin) = serving_replay(port, 1, &[]);
    let text =
        common::process::wait_for(20, "/metrics", || common::http::http_get(port, "/metrics"));
    let samples = common::exposition::samples(&text);
    let started = samples["process_start_time_seconds"];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 60.0..=now + 1.0).contains(&started),
        "{started} vs {now}"
    );
    assert!(samples["process_resident_memory_bytes"] > 1e6);
    assert!(samples["process_open_fds"] >= 3.0);
    assert!(samples["process_max_fds"] >= samples["process_open_fds"]);
    assert!(samples.contains_key("process_cpu_seconds_total"));
    assert!(samples.contains_key("process_virtual_memory_bytes"));
    assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
    let mut rest = String::new();
    let _ = TcpStream::connect(("127.0.0.1", port)).map(|mut s| {
        let _ = write!(
            s,
            "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let _ = s.read_to_string(&mut rest);
    });
    assert!(rest.starts_with("HTTP/1.1 404"), "{rest}");
    drop(server);
}

/// The TCP ports `pid` listens on, from its socket descriptors and the
/// kernel's tables of listening sockets.
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Field 3 is the state (0A: LISTEN), 9 the socket's inode.
            if fields.get(3) == Some(&"0A") && fields.get(9).is_some_and(|i| inodes.contains(*i)) {
                let port = fields[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports.sort_unstable();
    ports
}

/// `serve --ingest-addr INGEST` with `extra`, `/metrics` on a free port,
/// not waited for (its start-up lines are read first).
fn serve_on(ingest: &str, extra: &[&str]) -> common::serve::Server {
    let metrics = common::http::free_port();
    common::serve::Server {
        process: Guard(
            Command::new(common::process::binary())
                .args(["serve", "--ingest-addr", ingest])
                .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        ),
        ingest: 0,
        metrics,
    }
}

/// The `warning:` lines `serve` wrote among its first lines, up to the
/// one that says it accepts ingest (or that it does not).
fn start_up_lines(server: &mut common::serve::Server) -> Vec<String> {
    let stderr = server.process.0.stderr.take().unwrap();
    let lines = common::process::lines_of(stderr);
    common::process::wait_for(10, "serve's start-up lines", || {
        let lines = lines.lock().unwrap();
        lines
            .iter()
            .any(|line| line.starts_with("accepting gRPC") || line.starts_with("no gRPC"))
            .then(|| lines.clone())
    });
    // The warning follows the line it is about.
    std::thread::sleep(Duration::from_millis(300));
    let lines = lines.lock().unwrap().clone();
    lines
}

/// `serve --ingest-addr none`: no TCP ingest listener (only `/metrics`
/// listens), records over `--ingest-socket` applied, and no warning.
#[test]
fn ingest_addr_none_opens_no_tcp_listener() {
    let dir = common::paths::tempdir("ingest-addr-none");
    let socket = dir.join("ingest.sock");
    let mut server = serve_on("none", &["--ingest-socket", socket.to_str().unwrap()]);
    let metrics = server.metrics;
    let lines = start_up_lines(&mut server);
    common::process::wait_for(20, "serve's /metrics", || {
        common::http::http_get(metrics, "/metrics")
    });
    assert!(
        lines
            .iter()
            .any(|line| line == "no gRPC ingest listener (--ingest-addr none)"),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|line| line.contains("warning")),
        "{lines:?}"
    );
    assert_eq!(listening_ports(server.process.0.id()), [metrics]);
    use vllm_otel_metrics::sources::ingest::proto::pb;
    common::serve::send_over_socket(
        &socket,
        &[pb::Record {
            record: Some(pb::record::Record::Abort(pb::Abort {
                request_id: "over-the-socket".into(),
                received_at: Some(1.0),
            })),
        }],
    );
    common::process::wait_for(20, "the record sent over the socket", || {
        server
            .sample(r#"vllm_otel_metrics_rejected_inputs_total{reason="unknown_request"}"#)
            .filter(|n| *n == 1.0)
    });
}

/// TCP ingest without a token warns once at start, saying who can write
/// to it and how to close it: any local user on loopback, anyone who can
/// reach it elsewhere. With a token, no warning.
#[test]
fn tcp_ingest_without_a_token_warns_once() {
    let warnings = |extra: &[&str], ingest: &str| {
        let mut server = serve_on(ingest, extra);
        let lines = start_up_lines(&mut server);
        let pid = server.process.0.id();
        let ports = listening_ports(pid);
        (
            lines
                .into_iter()
                .filter(|line| line.to_lowercase().contains("warn"))
                .collect::<Vec<_>>(),
            ports,
        )
    };
    let port = common::http::free_port();
    let (loopback, ports) = warnings(&[], &format!("127.0.0.1:{port}"));
    assert!(ports.contains(&port), "{ports:?}");
    assert_eq!(loopback.len(), 1, "{loopback:?}");
    let warning = &loopback[0];
    for expected in [
        &format!("warning: gRPC ingest on 127.0.0.1:{port} requires no token"),
        "any local user",
        "--ingest-auth-token-file",
        "--ingest-addr none --ingest-socket PATH",
    ] {
        assert!(warning.contains(expected), "{expected:?} in {warning}");
    }

    let port = common::http::free_port();
    let (everywhere, _) = warnings(&[], &format!("0.0.0.0:{port}"));
    assert_eq!(everywhere.len(), 1, "{everywhere:?}");
    assert!(
        everywhere[0].contains(&format!(
            "anyone who can reach 0.0.0.0:{port} can write records"
        )),
        "{everywhere:?}"
    );

    let dir = common::paths::tempdir("warn-token");
    let token = dir.join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    for flag in ["--ingest-auth-token-file", "--auth-token-file"] {
        let port = common::http::free_port();
        let (with_token, _) = warnings(
            &[flag, token.to_str().unwrap()],
            &format!("127.0.0.1:{port}"),
        );
        assert!(with_token.is_empty(), "{flag}: {with_token:?}");
    }
}
