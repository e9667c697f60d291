//! A real Prometheus server (Debian's `prometheus`) for the live tests, and its
//! HTTP API.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::Guard;

/// Starts Prometheus scraping each `(job, port)` every second, evaluating
/// `rule_file` (if any) every second, with `extra` flags; returns it and its
/// port once ready.
pub(crate) fn start(
    dir: &Path,
    jobs: &[(&str, u16)],
    rule_file: Option<&Path>,
    extra: &[&str],
) -> (Guard, u16) {
    launch(dir, super::free_port(), jobs, false, rule_file, extra)
}

/// Like [`start`], on `port`, chosen beforehand: for a sender (a Collector's
/// remote write) that must be told the address before Prometheus starts.
/// Remote write needs `--web.enable-remote-write-receiver` in `extra`.
pub(crate) fn start_on(
    dir: &Path,
    port: u16,
    jobs: &[(&str, u16)],
    rule_file: Option<&Path>,
    extra: &[&str],
) -> (Guard, u16) {
    launch(dir, port, jobs, false, rule_file, extra)
}

/// Starts Prometheus scraping `target` every second as job `target`, keeping
/// the target's own `job` and `instance` labels (`honor_labels`), as for a
/// Collector that serves several processes' series.
pub(crate) fn start_honoring_labels(dir: &Path, target: u16) -> (Guard, u16) {
    launch(
        dir,
        super::free_port(),
        &[("target", target)],
        true,
        None,
        &[],
    )
}

fn launch(
    dir: &Path,
    port: u16,
    jobs: &[(&str, u16)],
    honor_labels: bool,
    rule_file: Option<&Path>,
    extra: &[&str],
) -> (Guard, u16) {
    let binary = super::require_tool(
        "prometheus",
        "install Debian's `prometheus` package (apt-get install -y prometheus), or run `bash scripts/test.sh`",
    );
    let mut config = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n");
    if let Some(rules) = rule_file {
        config.push_str(&format!("rule_files:\n  - {rules:?}\n"));
    }
    if !jobs.is_empty() {
        config.push_str("scrape_configs:\n");
    }
    for (job, target) in jobs {
        config.push_str(&format!("  - job_name: {job}\n"));
        if honor_labels {
            config.push_str("    honor_labels: true\n");
        }
        config.push_str(&format!(
            "    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
        ));
    }
    let config_path = dir.join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let guard = super::spawn_logged(
        Command::new(binary)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra),
        &dir.join("prometheus.log"),
        "prometheus",
    );
    super::wait_for(30, "Prometheus to be ready", || {
        super::http_get(port, "/-/ready")
    });
    (guard, port)
}

/// `GET` over HTTP/1.0 (no chunked encoding): status code and body, whatever
/// the status.
pub(crate) fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect to :{port}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("read from :{port}: {e}"))?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP response: {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// Percent-encodes a query parameter.
pub(crate) fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// An instant query through `/api/v1/query`: the answer's `data` object, or
/// the HTTP status and Prometheus' error.
pub(crate) fn query(port: u16, promql: &str) -> Result<Value, String> {
    let (status, body) = get(port, &format!("/api/v1/query?query={}", url_encode(promql)))?;
    let mut json: Value = serde_json::from_str(&body)
        .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
    if status != 200 || json["status"] != "success" {
        return Err(format!(
            "HTTP {status}, status {}: {} {}",
            json["status"], json["errorType"], json["error"]
        ));
    }
    Ok(json["data"].take())
}

/// The single value of an instant query, if it has exactly one series.
pub(crate) fn value(port: u16, promql: &str) -> Option<f64> {
    let data = query(port, promql).ok()?;
    let result = data["result"].as_array()?;
    (result.len() == 1).then(|| result[0]["value"][1].as_str()?.parse().ok())?
}
