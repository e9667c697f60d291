//! A real Prometheus server (Debian's `prometheus`) for the live tests, and its
//! HTTP API.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::process::Guard;

/// Starts Prometheus scraping each `(job, port)` every second, evaluating
/// `rule_file` (if any) every second, with `extra` flags; returns it and its
/// port once ready.
pub fn start(
    dir: &Path,
    jobs: &[(&str, u16)],
    rule_file: Option<&Path>,
    extra: &[&str],
) -> (Guard, u16) {
    launch(dir, super::http::free_port(), jobs, false, rule_file, extra)
}

/// Like [`start`], on `port`, chosen beforehand: for a sender (a Collector's
/// remote write) that must be told the address before Prometheus starts.
/// Remote write needs `--web.enable-remote-write-receiver` in `extra`.
pub fn start_on(
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
pub fn start_honoring_labels(dir: &Path, target: u16) -> (Guard, u16) {
    launch(
        dir,
        super::http::free_port(),
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
    super::environments::needs("prometheus");
    let binary = super::environments::require_tool(
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
    let guard = super::process::spawn_logged(
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
    super::process::wait_for(30, "Prometheus to be ready", || {
        super::http::http_get(port, "/-/ready")
    });
    (guard, port)
}

/// Percent-encodes a query parameter.
pub fn url_encode(text: &str) -> String {
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
pub fn query(port: u16, promql: &str) -> Result<Value, String> {
    api(port, &format!("/api/v1/query?query={}", url_encode(promql)))
}

/// An instant query evaluated at `time` (Unix seconds), as [`query`].
pub fn query_at(port: u16, promql: &str, time: u64) -> Result<Value, String> {
    api(
        port,
        &format!("/api/v1/query?query={}&time={time}", url_encode(promql)),
    )
}

fn api(port: u16, path: &str) -> Result<Value, String> {
    let (status, body) = super::http::get(port, path)?;
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
pub fn value(port: u16, promql: &str) -> Option<f64> {
    let data = query(port, promql).ok()?;
    let result = data["result"].as_array()?;
    (result.len() == 1).then(|| result[0]["value"][1].as_str()?.parse().ok())?
}

/// An instant query's `result` array, or why there is none.
pub fn result(port: u16, promql: &str) -> Result<Vec<Value>, String> {
    let data = query(port, promql)?;
    data["result"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("no result array: {data}"))
}

/// The result of `promql`, polled until it is non-empty; fails after `secs`
/// with Prometheus' last answer.
pub fn result_within(port: u16, promql: &str, secs: u64) -> Vec<Value> {
    let mut last = String::new();
    super::process::wait_for_optional(secs, || match result(port, promql) {
        Ok(result) if !result.is_empty() => Some(result),
        Ok(_) => {
            last = "empty result".to_owned();
            None
        }
        Err(e) => {
            last = e;
            None
        }
    })
    .unwrap_or_else(|| panic!("no data after {secs} s for {promql}\nlast answer: {last}"))
}

/// The value of one series of an instant query's result.
pub fn sample_value(series: &Value) -> Option<f64> {
    series["value"][1].as_str()?.parse().ok()
}

/// The value of the series of `result` whose label `job` is `job`.
pub fn value_for_job(result: &[Value], job: &str) -> Option<f64> {
    result
        .iter()
        .find(|series| series["metric"]["job"] == job)
        .and_then(sample_value)
}

/// `(label value, sample value)` of each series of `result`.
pub fn values_by(result: &[Value], label: &str) -> Vec<(String, f64)> {
    result
        .iter()
        .map(|series| {
            (
                series["metric"][label]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                sample_value(series).unwrap_or(f64::NAN),
            )
        })
        .collect()
}
