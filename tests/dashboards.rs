//! The Grafana dashboards in `otel-collector/grafana/` and the Prometheus
//! rules in `otel-collector/rules.yml`, checked for real.
//!
//! The live test starts a real Prometheus (Debian's `prometheus`) scraping two
//! simulators every second, as two scrape jobs:
//!
//! - `vllm-starved`: a KV cache far too small for the load (256 blocks, 6
//!   requests/s), so requests are preempted again and again;
//! - `vllm-ample`: the same workload with 4096 blocks, never a preemption.
//!
//! Prometheus evaluates the rules every second. After enough scrapes every
//! `expr` of every dashboard must return data (the dashboard's variables
//! `$job`, `$instance`, `$model_name`, `$engine` set to `.*`, `$__rate_interval`
//! to 15s, `$__range` to 1m), every recording rule must return data, all three
//! preemption alerts must fire for `vllm-starved` and none may even be pending
//! for `vllm-ample`.
//!
//! The production rules alert after `for: 10m` on 5-minute windows, which would
//! need more than a quarter of an hour of traffic. Prometheus therefore loads a
//! copy of `rules.yml` in which every `for:` is `5s` and every `[5m]` window is
//! `[30s]`; rule names, expressions and thresholds are unchanged. (The
//! production durations are covered by `promtool test rules` on
//! `otel-collector/rules_test.yml`, run here by `rules_pass_promtool`.)

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{prometheus, Guard};
use serde_json::Value;

const ALERTS: [&str; 3] = [
    "VllmHighPreemptionRate",
    "VllmHighPreemptionsPerRequestP99",
    "VllmManyRequestsPreemptedTwice",
];

const FILTER: [&str; 4] = [
    r#"job=~"$job""#,
    r#"instance=~"$instance""#,
    r#"model_name=~"$model_name""#,
    r#"engine=~"$engine""#,
];

/// The workload both simulators run; only the KV-cache size differs.
const WORKLOAD: [&str; 10] = [
    "--duration",
    "60",
    "--seed",
    "3",
    "--rate",
    "6",
    "--prompt-len",
    "128",
    "--output-len",
    "256",
];

fn rules_path() -> PathBuf {
    common::repo().join("otel-collector/rules.yml")
}

fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = common::repo().join("otel-collector/grafana");
    let mut out: Vec<(PathBuf, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", path.display()));
            (path, json)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no dashboard in {}", dir.display());
    out
}

/// Every `expr` string anywhere in a dashboard (panels, rows, targets).
fn exprs(json: &Value, out: &mut Vec<String>) {
    match json {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| exprs(item, out)),
        _ => {}
    }
}

/// Every panel, rows' nested panels included.
fn panels(json: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in json["panels"].as_array().into_iter().flatten() {
        out.push(panel);
        out.extend(panel["panels"].as_array().into_iter().flatten());
    }
    out
}

/// The dashboard expression as Prometheus gets it from Grafana in this test.
fn substitute(expr: &str) -> String {
    let out = expr
        .replace("$__rate_interval", "15s")
        .replace("$__range", "1m")
        .replace("$job", ".*")
        .replace("$instance", ".*")
        .replace("$model_name", ".*")
        .replace("$engine", ".*");
    assert!(
        !out.contains('$'),
        "unknown variable left in dashboard query: {out}"
    );
    out
}

/// Values of `key:` lines in rules.yml (`record`, `alert`, `runbook_url`, …).
fn rule_values(rules: &str, key: &str) -> Vec<String> {
    let prefix = format!("{key}:");
    rules
        .lines()
        .map(|line| line.trim().trim_start_matches("- "))
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim().trim_matches('"').trim_matches('\'').to_owned())
        .collect()
}

/// rules.yml with short `for:` and windows, for a live run of about a minute.
fn fast_rules(rules: &str) -> String {
    let mut fors = 0;
    let mut out = String::new();
    for line in rules.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("for:") {
            fors += 1;
            let indent = &line[..line.len() - trimmed.len()];
            out.push_str(&format!("{indent}for: 5s\n"));
        } else {
            out.push_str(&line.replace("[5m]", "[30s]"));
            out.push('\n');
        }
    }
    assert_eq!(fors, ALERTS.len(), "one `for:` per alert in rules.yml");
    assert!(rules.contains("[5m]"), "rules.yml uses 5m windows");
    out
}

/// An instant query through `/api/v1/query`: the `result` array, or why not.
fn query(port: u16, promql: &str) -> Result<Vec<Value>, String> {
    let data = prometheus::query(port, promql)?;
    data["result"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("no result array: {data}"))
}

/// The result of `promql`, polled until it is non-empty (or the deadline).
fn query_data(port: u16, promql: &str, secs: u64) -> Vec<Value> {
    let mut last = String::new();
    common::wait_for_optional(secs, || match query(port, promql) {
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

/// The value of the single series of `result` whose label `job` is `job`.
fn value_for_job(result: &[Value], job: &str) -> Option<f64> {
    result
        .iter()
        .find(|series| series["metric"]["job"] == job)
        .and_then(|series| series["value"][1].as_str()?.parse().ok())
}

/// Alerts as Prometheus lists them: (alertname, job, state).
fn alerts(port: u16) -> Result<Vec<(String, String, String)>, String> {
    let (status, body) = prometheus::get(port, "/api/v1/alerts")?;
    let json: Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {status}: {e}"))?;
    let list = json["data"]["alerts"]
        .as_array()
        .ok_or_else(|| format!("no alerts array: {body}"))?;
    Ok(list
        .iter()
        .map(|alert| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&alert["labels"]["alertname"]),
                text(&alert["labels"]["job"]),
                text(&alert["state"]),
            )
        })
        .collect())
}

fn simulator(dir: &Path, name: &str, kv_blocks: &str, port: u16) -> Guard {
    common::spawn_logged(
        Command::new(common::binary())
            .args(["simulate", "--realtime", "--kv-blocks", kv_blocks])
            .args(WORKLOAD)
            .args(["--output", "none", "--metrics-addr"])
            .arg(format!("127.0.0.1:{port}")),
        &dir.join(format!("{name}.log")),
        "the simulator",
    )
}

#[test]
fn dashboards_and_rules_work_on_live_prometheus() {
    let started = Instant::now();
    let dir = common::tempdir("dashboards");
    let rules_text = std::fs::read_to_string(rules_path()).unwrap();
    let rules = dir.join("rules.yml");
    std::fs::write(&rules, fast_rules(&rules_text)).unwrap();

    let starved_port = common::free_port();
    let ample_port = common::free_port();
    let _starved = simulator(&dir, "starved", "256", starved_port);
    let _ample = simulator(&dir, "ample", "4096", ample_port);

    let (_prometheus, port) = prometheus::start(
        &dir,
        &[("vllm-starved", starved_port), ("vllm-ample", ample_port)],
        Some(&rules),
        &[],
    );
    // Both targets scraped, and the rules loaded (a bad rule file would stop
    // Prometheus from starting at all).
    for job in ["vllm-starved", "vllm-ample"] {
        let up = format!("up{{job=\"{job}\"}} == 1");
        query_data(port, &up, 30);
    }

    // 1. The preemption alerts fire for the starved job.
    let mut seen = Vec::new();
    let firing = common::wait_for_optional(75, || {
        seen = alerts(port).unwrap_or_default();
        ALERTS
            .iter()
            .all(|name| {
                seen.iter().any(|(alert, job, state)| {
                    alert == name && job == "vllm-starved" && state == "firing"
                })
            })
            .then_some(())
    });
    assert!(
        firing.is_some(),
        "after {:?} not every alert of {ALERTS:?} fires for vllm-starved; alerts: {seen:?}\n\
         logs and config in {}",
        started.elapsed(),
        dir.display()
    );
    eprintln!(
        "alerts firing for vllm-starved after {:?}",
        started.elapsed()
    );

    // 2. Every dashboard query returns data.
    for (path, json) in dashboards() {
        let mut all = Vec::new();
        exprs(&json, &mut all);
        assert!(
            all.len() >= 10,
            "{}: only {} queries",
            path.display(),
            all.len()
        );
        for expr in all {
            let promql = substitute(&expr);
            query_data(port, &promql, 20);
        }
    }

    // 3. Every recording rule records data, with the values the jobs imply.
    let records = rule_values(&rules_text, "record");
    assert!(records.len() >= 6, "recording rules: {records:?}");
    for record in &records {
        query_data(port, record, 20);
    }
    let p99 = query_data(port, "model_name:vllm_request_num_preemptions:p99_5m", 20);
    let starved_p99 = value_for_job(&p99, "vllm-starved").expect("p99 of vllm-starved");
    assert!(starved_p99 >= 3.0, "starved p99 {starved_p99}");
    let ample_p99 = value_for_job(&p99, "vllm-ample").expect("p99 of vllm-ample");
    assert!(ample_p99 < 1.0, "ample p99 {ample_p99}: first bucket");
    let share = query_data(
        port,
        "model_name:vllm_request_num_preemptions:share_ge2_5m",
        20,
    );
    assert_eq!(value_for_job(&share, "vllm-ample"), Some(0.0), "{share:?}");
    let rate = query_data(port, "model_name_engine:vllm_num_preemptions:rate5m", 20);
    assert_eq!(value_for_job(&rate, "vllm-ample"), Some(0.0), "{rate:?}");

    // 4. Nothing fires, or is even pending, for the ample job.
    let all = alerts(port).expect("alerts");
    let ample: Vec<_> = all.iter().filter(|a| a.1 == "vllm-ample").collect();
    assert!(ample.is_empty(), "alerts for vllm-ample: {ample:?}");
    let series = query(port, r#"ALERTS{job="vllm-ample"}"#).expect("ALERTS query");
    assert!(series.is_empty(), "ALERTS for vllm-ample: {series:?}");

    eprintln!("live check done after {:?}", started.elapsed());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rules_pass_promtool() {
    let promtool = common::require_tool(
        "promtool",
        "install Debian's `prometheus` package (apt-get install -y prometheus), or run `bash scripts/test.sh`",
    );
    let dir = common::repo().join("otel-collector");
    for args in [
        ["check", "rules", "rules.yml"],
        ["test", "rules", "rules_test.yml"],
    ] {
        let output = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool runs");
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.status.success() && report.contains("SUCCESS"),
            "promtool {}:\n{report}",
            args.join(" ")
        );
    }
}

#[test]
fn dashboards_are_filtered_described_and_chained() {
    for (path, json) in dashboards() {
        let name = path.display();
        assert!(
            json["schemaVersion"].as_u64() >= Some(36),
            "{name}: schemaVersion"
        );
        let vars = json["templating"]["list"].as_array().expect("templating");
        let var = |n: &str| {
            vars.iter()
                .find(|v| v["name"] == n)
                .unwrap_or_else(|| panic!("{name}: no variable {n}"))
        };
        assert_eq!(var("datasource")["type"], "datasource", "{name}");
        assert_eq!(var("datasource")["query"], "prometheus", "{name}");
        // Each variable is filtered by the ones before it.
        let chain = ["job", "instance", "model_name", "engine"];
        for (i, n) in chain.iter().enumerate() {
            let v = var(n);
            assert_eq!(v["type"], "query", "{name}: {n}");
            assert_eq!(v["multi"], true, "{name}: {n} multi-select");
            assert_eq!(v["includeAll"], true, "{name}: {n} All");
            assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}: {n}");
            let q = v["query"].as_str().unwrap_or_default();
            assert!(
                q.starts_with("label_values(vllm:request_num_preemptions_count")
                    && q.ends_with(&format!(", {n})")),
                "{name}: {n}: {q}"
            );
            for earlier in &chain[..i] {
                assert!(q.contains(&format!("=~\"${earlier}\"")), "{name}: {n}: {q}");
            }
        }
        assert_eq!(var("traces")["type"], "datasource", "{name}");
        assert_eq!(var("traces")["query"], "tempo", "{name}");
        for panel in panels(&json) {
            if panel["type"] == "row" {
                continue;
            }
            if panel["datasource"]["type"] == "tempo" {
                // A traces panel: TraceQL on the span attribute the
                // histogram's value is also written to, linked from the
                // preemption panels.
                let title = panel["title"].as_str().unwrap_or_default();
                assert_eq!(panel["datasource"]["uid"], "${traces}", "{name}: {title}");
                let target = &panel["targets"][0];
                assert_eq!(target["queryType"], "traceql", "{name}: {title}");
                assert_eq!(
                    target["query"], "{ span.vllm.request.num_preemptions >= 3 }",
                    "{name}: {title}"
                );
                let id = panel["id"].as_u64().unwrap();
                let linked = panels(&json)
                    .iter()
                    .filter(|p| {
                        p["links"].as_array().into_iter().flatten().any(|l| {
                            l["url"]
                                .as_str()
                                .is_some_and(|u| u.contains(&format!("viewPanel={id}")))
                        })
                    })
                    .count();
                assert!(linked >= 3, "{name}: {title}: linked from {linked} panels");
                continue;
            }
            let title = panel["title"].as_str().unwrap_or_default();
            assert!(!title.is_empty(), "{name}: a panel without title");
            let description = panel["description"].as_str().unwrap_or_default();
            assert!(description.len() > 40, "{name}: {title}: description");
            assert!(
                panel["fieldConfig"]["defaults"]["unit"].is_string(),
                "{name}: {title}: unit"
            );
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{name}: {title}"
            );
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{name}: {title}: no query");
            for target in targets {
                let expr = target["expr"].as_str().unwrap_or_default();
                for matcher in FILTER {
                    assert!(
                        expr.contains(matcher),
                        "{name}: {title}: {matcher} in {expr}"
                    );
                }
                if expr.contains(r#"le="1.0""#) {
                    assert!(
                        description.contains(r#"le="1.0""#) && description.contains("0 and 1"),
                        "{name}: {title}: the description must say that le=\"1.0\" holds 0 and 1"
                    );
                }
            }
            if panel["type"] == "heatmap" || panel["type"] == "bargauge" {
                assert_eq!(targets[0]["format"], "heatmap", "{name}: {title}");
            }
        }
    }
}

/// GitHub's anchor for a Markdown heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_section() {
    let rules = std::fs::read_to_string(rules_path()).unwrap();
    let doc = std::fs::read_to_string(common::repo().join("docs/OBSERVABILITY.md")).unwrap();
    let anchors: Vec<String> = doc
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| slug(line.trim_start_matches('#')))
        .collect();
    let alerts = rule_values(&rules, "alert");
    assert_eq!(alerts, ALERTS, "the alerts this file checks");
    let runbooks = rule_values(&rules, "runbook_url");
    assert_eq!(runbooks.len(), alerts.len(), "one runbook_url per alert");
    for (alert, url) in alerts.iter().zip(&runbooks) {
        let (file, anchor) = url.split_once('#').expect("an anchor");
        assert_eq!(file, "docs/OBSERVABILITY.md", "{alert}");
        assert_eq!(anchor, alert.to_lowercase(), "{alert}: anchor");
        assert!(
            anchors.iter().any(|a| a == anchor),
            "{alert}: no heading for #{anchor} in docs/OBSERVABILITY.md"
        );
    }
}
