//! The Grafana dashboards in `otel-collector/grafana/` and the Prometheus
//! rules in `otel-collector/rules.yml`, checked for real.
//!
//! The live test starts a real Prometheus (Debian's `prometheus`) scraping two
//! simulators every second, as two scrape jobs:
//!
//! - `vllm-starved`: a KV cache far too small for the load (256 blocks, 6
//!   requests/s), so requests are preempted again and again; 30 % of its
//!   arrivals are high-priority (`--priority-fraction 0.3`), so it preempts
//!   for both reasons, `kv_full` and `priority`;
//! - `vllm-ample`: the same workload with 4096 blocks, never a preemption.
//!
//! Both judge every finished request against the same latency SLO (`--slo`,
//! [`SLO`]): a TTFT bound the ample job always meets and the starved job
//! meets only before its queue builds up, so the starved job has both met
//! and missed requests and burns its error budget far above both burn-rate
//! thresholds, while the ample job stays below them.
//!
//! Prometheus evaluates the rules every second. After enough scrapes every
//! `expr` of every dashboard must return data (the dashboard's variables
//! `$job`, `$instance`, `$model_name`, `$engine` set to `.*`, `$__rate_interval`
//! to 15s, `$__range` to 1m), every recording rule must return finite data,
//! all five alerts (three on preemption, two on the SLO's burn rate) must
//! fire for `vllm-starved` and none may even be pending for `vllm-ample`;
//! the starved job's preemptions by reason must add up to its preemptions;
//! every finished request is judged once, the starved job's outcomes include
//! `met` and misses, and goodput tokens never exceed generation tokens.
//!
//! The GenAI semantic-conventions dashboard (`otel-collector/grafana/genai/`,
//! a directory of its own: it has its own variables and no vLLM family) is
//! checked through the real OpenTelemetry Collector: two simulators push
//! their `--semconv gen_ai` histograms over OTLP (one over gRPC, one over
//! HTTP), the shipped `otel-collector/config.yaml` renames them for
//! Prometheus, and a real Prometheus scrapes the Collector.
//!
//! The native-histogram dashboard (`otel-collector/grafana/native/`, a
//! directory of its own: its queries read native histograms only) is checked
//! here for its structure; `tests/native_histograms.rs` runs its queries on a
//! live Prometheus holding native histograms.
//!
//! The production rules alert after `for: 10m` on 5-minute windows (the
//! burn-rate alerts after `for: 2m` and `for: 15m` on windows of 5 minutes to
//! 6 hours), which would need hours of traffic. Prometheus therefore loads a
//! copy of `rules.yml` in which every `for:` is `5s` and every window a tenth
//! of its length (`[5m]` is `[30s]`, `[30m]` `[3m]`, `[1h]` `[6m]`, `[6h]`
//! `[36m]`, the last two longer than the run: they hold all of it); rule
//! names, expressions and thresholds are unchanged. (The production durations
//! are covered by `promtool test rules` on `otel-collector/rules_test.yml`,
//! run here by `rules_pass_promtool`.)

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{prometheus, Guard};
use serde_json::Value;
use vllm_otel_metrics::catalog;
use vllm_otel_metrics::catalog::slo::SLO_OUTCOMES;

const ALERTS: [&str; 5] = [
    "VllmHighPreemptionRate",
    "VllmHighPreemptionsPerRequestP99",
    "VllmManyRequestsPreemptedTwice",
    "VllmSloErrorBudgetFastBurn",
    "VllmSloErrorBudgetSlowBurn",
];

/// The windows of `rules.yml` and their stand-ins in the live run: a tenth.
const FAST_WINDOWS: [(&str, &str); 4] = [
    ("[5m]", "[30s]"),
    ("[30m]", "[3m]"),
    ("[1h]", "[6m]"),
    ("[6h]", "[36m]"),
];

/// The SLO both simulators judge their requests against. With [`WORKLOAD`]
/// the ample job's TTFT stays around 0.03 s (p99 0.04 s), under the bound;
/// the starved job's is under it only until its queue builds up (p50 12 s
/// over the whole run): its first requests meet the SLO, most later ones
/// miss `ttft` (about a third met, two thirds missed over the run). TPOT
/// (about 0.015 s) and e2e stay under their bounds on both; the ample job
/// misses only through an abort now and then (1 of 359 over the run).
const SLO: &str = r#"{"ttft": 0.5, "tpot": 0.05, "e2e": 30}"#;

/// The recording rule holding the SLO objective (`vector(0.99)` in
/// rules.yml), read by the burn-rate alerts and the burn-rate panel.
const SLO_OBJECTIVE: &str = "vllm_otel_metrics:slo_objective:ratio";

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

/// The GenAI dashboard's variables, in chain order.
const GENAI_CHAIN: [&str; 4] = [
    "job",
    "instance",
    "gen_ai_request_model",
    "gen_ai_operation_name",
];

const GENAI_FILTER: [&str; 4] = [
    r#"job=~"$job""#,
    r#"instance=~"$instance""#,
    r#"gen_ai_request_model=~"$gen_ai_request_model""#,
    r#"gen_ai_operation_name=~"$gen_ai_operation_name""#,
];

/// The GenAI histograms as the Collector's Prometheus exporter names them,
/// with the bucket boundaries the semantic conventions advise (and
/// docs/SEMANTICS.md §3c lists).
const GENAI_BUCKETS: [(&str, &[f64]); 3] = [
    (
        "gen_ai_server_request_duration_seconds",
        &[
            0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
        ],
    ),
    (
        "gen_ai_server_time_to_first_token_seconds",
        &[
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0,
        ],
    ),
    (
        "gen_ai_server_time_per_output_token_seconds",
        &[
            0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
        ],
    ),
];

/// The vLLM dashboards: `otel-collector/grafana/*.json`.
fn dashboards() -> Vec<(PathBuf, Value)> {
    dashboards_in(&common::repo().join("otel-collector/grafana"))
}

/// The GenAI semantic-conventions dashboards: `otel-collector/grafana/genai/*.json`.
fn genai_dashboards() -> Vec<(PathBuf, Value)> {
    dashboards_in(&common::repo().join("otel-collector/grafana/genai"))
}

/// The native-histogram dashboards: `otel-collector/grafana/native/*.json`.
fn native_dashboards() -> Vec<(PathBuf, Value)> {
    dashboards_in(&common::repo().join("otel-collector/grafana/native"))
}

fn dashboards_in(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut out: Vec<(PathBuf, Value)> = std::fs::read_dir(dir)
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

/// Every expr of a dashboard (at least `min` of them).
fn all_exprs(path: &Path, json: &Value, min: usize) -> Vec<String> {
    let mut all = Vec::new();
    common::dashboard_exprs(json, &mut all);
    assert!(
        all.len() >= min,
        "{}: only {} queries",
        path.display(),
        all.len()
    );
    all
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

/// The dashboard expression as Prometheus gets it from Grafana in this test:
/// every variable set to All (`.*`).
fn substitute(expr: &str) -> String {
    substitute_with(expr, &[])
}

/// Like [`substitute`], with some variables set to a value of their own.
fn substitute_with(expr: &str, values: &[(&str, &str)]) -> String {
    let mut vars: Vec<(String, String)> = [
        "job",
        "instance",
        "model_name",
        "engine",
        "gen_ai_request_model",
        "gen_ai_operation_name",
    ]
    .iter()
    .map(|name| {
        let value = values
            .iter()
            .find(|(n, _)| n == name)
            .map_or(".*", |(_, v)| v);
        (format!("${name}"), value.to_owned())
    })
    .chain([
        ("$__rate_interval".to_owned(), "15s".to_owned()),
        ("$__range".to_owned(), "1m".to_owned()),
    ])
    .collect();
    for (name, _) in values {
        assert!(
            vars.iter().any(|(v, _)| v == &format!("${name}")),
            "no dashboard variable {name}"
        );
    }
    // Longest first, so that no variable's name is replaced inside another's.
    vars.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut out = expr.to_owned();
    for (name, value) in &vars {
        out = out.replace(name.as_str(), value);
    }
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
            let mut line = line.to_owned();
            for (window, fast) in FAST_WINDOWS {
                line = line.replace(window, fast);
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    assert_eq!(fors, ALERTS.len(), "one `for:` per alert in rules.yml");
    for (window, _) in FAST_WINDOWS {
        assert!(rules.contains(window), "rules.yml uses {window} windows");
    }
    // Every range in the copy is one of the short ones.
    let mut rest = out.as_str();
    while let Some(at) = rest.find('[') {
        let range = &rest[at..=at + rest[at..].find(']').expect("a closed range")];
        assert!(
            FAST_WINDOWS.iter().any(|(_, fast)| *fast == range),
            "a window fast_rules does not shorten: {range}"
        );
        rest = &rest[at + 1..];
    }
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
        .and_then(sample_value)
}

/// The value of one series of an instant query's result.
fn sample_value(series: &Value) -> Option<f64> {
    series["value"][1].as_str()?.parse().ok()
}

/// `(label value, sample value)` of each series of `result`.
fn values_by(result: &[Value], label: &str) -> Vec<(String, f64)> {
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

fn simulator(dir: &Path, name: &str, kv_blocks: &str, extra: &[&str], port: u16) -> Guard {
    common::spawn_logged(
        Command::new(common::binary())
            .args(["simulate", "--realtime", "--kv-blocks", kv_blocks])
            .args(WORKLOAD)
            .args(["--slo", SLO])
            .args(extra)
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
    // High-priority arrivals preempt low-priority running requests (reason
    // `priority`) on top of the KV-cache shortage (`kv_full`).
    let _starved = simulator(
        &dir,
        "starved",
        "256",
        &["--priority-fraction", "0.3"],
        starved_port,
    );
    let _ample = simulator(&dir, "ample", "4096", &[], ample_port);

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

    // 1. The preemption and burn-rate alerts fire for the starved job.
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
        for expr in all_exprs(&path, &json, 10) {
            let promql = substitute(&expr);
            query_data(port, &promql, 20);
        }
    }

    // 3. Every recording rule records finite data, with the values the jobs
    // imply.
    let records = rule_values(&rules_text, "record");
    assert!(records.len() >= 17, "recording rules: {records:?}");
    for record in &records {
        let result = query_data(port, record, 20);
        assert!(
            result
                .iter()
                .all(|series| sample_value(series).is_some_and(f64::is_finite)),
            "{record}: {result:?}"
        );
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

    // 4. The SLO: see slo_checks.
    slo_checks(port);

    // 5. Preemptions by reason: the starved job preempts for both reasons
    // it has, the reasons add up to the preemptions, and the ample job has
    // none of either.
    let by_reason = r#"sum by (reason) (vllm:num_preemptions_by_reason_total{job="vllm-starved"})"#;
    let mut reasons = Vec::new();
    let both = common::wait_for_optional(30, || {
        reasons = values_by(&query(port, by_reason).unwrap_or_default(), "reason");
        ["kv_full", "priority"]
            .iter()
            .all(|want| reasons.iter().any(|(r, v)| r == want && *v > 0.0))
            .then_some(())
    });
    assert!(
        both.is_some(),
        "vllm-starved must preempt for kv_full and priority: {reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .all(|(r, _)| ["kv_full", "priority", "prefix_cache_reset"].contains(&r.as_str())),
        "unknown reason: {reasons:?}"
    );
    eprintln!("vllm-starved preemptions by reason: {reasons:?}");
    // Both sides in one expression: one evaluation instant, one scrape.
    let difference = "sum by (job) (vllm:num_preemptions_total) \
                      - sum by (job) (vllm:num_preemptions_by_reason_total)";
    for _ in 0..5 {
        let result = query_data(port, difference, 20);
        let jobs = values_by(&result, "job");
        assert!(
            jobs.iter().any(|(job, _)| job == "vllm-starved"),
            "no difference for vllm-starved: {jobs:?}"
        );
        assert!(
            jobs.iter().all(|(_, v)| *v == 0.0),
            "preemptions minus preemptions by reason, per job: {jobs:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let ample_total = query_data(port, r#"vllm:num_preemptions_total{job="vllm-ample"}"#, 20);
    assert!(
        ample_total.iter().all(|s| sample_value(s) == Some(0.0)),
        "vllm-ample preempted: {ample_total:?}"
    );
    let ample_reasons = query(
        port,
        r#"vllm:num_preemptions_by_reason_total{job="vllm-ample"}"#,
    )
    .expect("by-reason query");
    assert!(
        ample_reasons.is_empty(),
        "vllm-ample has preemptions by reason: {ample_reasons:?}"
    );

    // 6. Nothing fires, or is even pending, for the ample job.
    let all = alerts(port).expect("alerts");
    let ample: Vec<_> = all.iter().filter(|a| a.1 == "vllm-ample").collect();
    assert!(ample.is_empty(), "alerts for vllm-ample: {ample:?}");
    let series = query(port, r#"ALERTS{job="vllm-ample"}"#).expect("ALERTS query");
    assert!(series.is_empty(), "ALERTS for vllm-ample: {series:?}");

    eprintln!("live check done after {:?}", started.elapsed());
    std::fs::remove_dir_all(&dir).ok();
}

/// The SLO families and rules of the live run: every outcome of both jobs
/// exists, the starved job has met and missed requests and the ample one
/// met ones, every finished request is judged once, goodput tokens are
/// generation tokens of some of the requests, and the miss ratios put the
/// starved job above both burn-rate thresholds and the ample one below.
fn slo_checks(port: u16) {
    let objective = query_data(port, SLO_OBJECTIVE, 20);
    assert_eq!(objective.len(), 1, "one objective: {objective:?}");
    let objective = sample_value(&objective[0]).expect("objective");
    assert!(objective > 0.0 && objective < 1.0, "objective {objective}");
    let budget = 1.0 - objective;

    for job in ["vllm-starved", "vllm-ample"] {
        let per_outcome =
            format!(r#"sum by (outcome) (vllm_otel_metrics_slo_requests_total{{job="{job}"}})"#);
        let outcomes = values_by(&query_data(port, &per_outcome, 20), "outcome");
        let mut names: Vec<&str> = outcomes.iter().map(|(o, _)| o.as_str()).collect();
        names.sort_unstable();
        let mut want = SLO_OUTCOMES.to_vec();
        want.sort_unstable();
        assert_eq!(names, want, "{job}: outcome series");
        let met = outcomes
            .iter()
            .find(|(o, _)| o == "met")
            .map_or(0.0, |o| o.1);
        let missed: f64 = outcomes
            .iter()
            .filter(|(o, _)| o != "met")
            .map(|o| o.1)
            .sum();
        assert!(met > 0.0, "{job}: no request met the SLO: {outcomes:?}");
        if job == "vllm-starved" {
            assert!(
                missed > 0.0,
                "{job}: no request missed the SLO: {outcomes:?}"
            );
        }
        eprintln!("{job} SLO outcomes: {outcomes:?}");
    }

    // The long windows (36 and 6 minutes here) hold the whole run.
    for (record, threshold) in [
        ("model_name:vllm_otel_metrics_slo_miss:ratio_rate6h", 6.0),
        ("model_name:vllm_otel_metrics_slo_miss:ratio_rate1h", 14.4),
    ] {
        let result = query_data(port, record, 20);
        let starved = value_for_job(&result, "vllm-starved").expect("vllm-starved");
        let ample = value_for_job(&result, "vllm-ample").expect("vllm-ample");
        assert!(
            starved / budget > threshold,
            "{record}: vllm-starved burns {} (threshold {threshold})",
            starved / budget
        );
        assert!(
            ample / budget < 6.0,
            "{record}: vllm-ample burns {} (slow threshold 6)",
            ample / budget
        );
    }
    let attainment = query_data(
        port,
        "model_name:vllm_otel_metrics_slo_attainment:ratio_rate5m",
        20,
    );
    assert!(
        attainment
            .iter()
            .filter_map(sample_value)
            .all(|v| (0.0..=1.0).contains(&v)),
        "attainment: {attainment:?}"
    );

    // Both sides in one expression: one evaluation instant, one scrape;
    // polled, as a scrape may fall between one request's recordings.
    let judged = "sum by (job) (vllm_otel_metrics_slo_requests_total) \
                  - sum by (job) (vllm:e2e_request_latency_seconds_count)";
    let mut last = Vec::new();
    let once = common::wait_for_optional(20, || {
        last = values_by(&query(port, judged).unwrap_or_default(), "job");
        (last.len() == 2 && last.iter().all(|(_, v)| *v == 0.0)).then_some(())
    });
    assert!(
        once.is_some(),
        "judged requests minus finished requests, per job: {last:?}"
    );
    let beyond = "sum by (job) (vllm_otel_metrics_slo_goodput_tokens_total) \
                  > sum by (job) (vllm:request_generation_tokens_sum)";
    let beyond = query(port, beyond).expect("goodput query");
    assert!(
        beyond.is_empty(),
        "goodput tokens above generation tokens: {beyond:?}"
    );
    let goodput = query_data(
        port,
        "sum by (job) (vllm_otel_metrics_slo_goodput_tokens_total) > 0",
        20,
    );
    assert_eq!(goodput.len(), 2, "goodput tokens of both jobs: {goodput:?}");
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
        assert_variable_chain(
            &name,
            &json,
            &["job", "instance", "model_name", "engine"],
            "vllm:request_num_preemptions_count",
        );
        let traces = variable(&name, &json, "traces");
        assert_eq!(traces["type"], "datasource", "{name}");
        assert_eq!(traces["query"], "tempo", "{name}");
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
            let (title, description, targets) = described_panel(&name, panel);
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
        assert_layout(&path, &json);
        if json["uid"] == "vllm-preemptions" {
            // The reasons, stacked, beside the engine-wide rate they add up to.
            let find = |title: &str| {
                panels(&json)
                    .into_iter()
                    .find(|p| p["title"] == title)
                    .unwrap_or_else(|| panic!("{name}: no panel {title:?}"))
            };
            let by_reason = find("Preemptions by reason");
            let rate = find("Preemption rate per engine");
            let expr = by_reason["targets"][0]["expr"].as_str().unwrap_or_default();
            assert!(
                expr.starts_with("sum by (reason) (rate(vllm:num_preemptions_by_reason_total{"),
                "{name}: by reason: {expr}"
            );
            assert_eq!(
                by_reason["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"], "normal",
                "{name}: by reason stacked"
            );
            assert_eq!(
                by_reason["fieldConfig"]["defaults"]["unit"],
                rate["fieldConfig"]["defaults"]["unit"],
                "{name}: by reason and the rate in the same unit"
            );
            assert_eq!(
                by_reason["gridPos"]["y"], rate["gridPos"]["y"],
                "{name}: by reason beside the rate"
            );
            assert_slo_panels(&name, &find);
        }
    }
}

/// The SLO panels of "vLLM preemptions": what they read, and that their
/// lines are the objective and the thresholds of rules.yml.
fn assert_slo_panels<'a>(name: &impl std::fmt::Display, find: &dyn Fn(&str) -> &'a Value) {
    let rules = std::fs::read_to_string(rules_path()).unwrap();
    let exprs = |panel: &Value| -> Vec<String> {
        panel["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .map(|t| t["expr"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let steps = |panel: &Value| -> Vec<f64> {
        panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            .as_array()
            .expect("threshold steps")
            .iter()
            .filter_map(|step| step["value"].as_f64())
            .collect()
    };
    let requests = "rate(vllm_otel_metrics_slo_requests_total{";
    let met = format!(r#"sum by (model_name) ({requests}outcome="met", job=~"#);
    let all = format!(r#"sum by (model_name) ({requests}job=~"#);

    // Attainment: met / all per model; its line is the objective.
    let attainment = find("SLO attainment");
    let e = exprs(attainment);
    assert!(
        e.len() == 1 && e[0].starts_with(&met) && e[0].contains(&format!(" / {all}")),
        "{name}: attainment: {e:?}"
    );
    assert_eq!(attainment["fieldConfig"]["defaults"]["unit"], "percentunit");
    let objective: f64 = rules
        .lines()
        .skip_while(|l| !l.contains(&format!("record: {SLO_OBJECTIVE}")))
        .find_map(|l| l.trim().strip_prefix("expr: vector(")?.strip_suffix(')'))
        .unwrap_or_else(|| panic!("rules.yml: no {SLO_OBJECTIVE} = vector(…)"))
        .parse()
        .expect("the objective");
    assert_eq!(steps(attainment), [objective], "{name}: attainment's line");

    // Outcomes, stacked, one colour per outcome.
    let outcomes = find("Requests by SLO outcome");
    let e = exprs(outcomes);
    assert!(
        e.len() == 1 && e[0].starts_with(&format!("sum by (outcome) ({requests}job=~")),
        "{name}: outcomes: {e:?}"
    );
    assert_eq!(
        outcomes["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"], "normal",
        "{name}: outcomes stacked"
    );
    let colored: Vec<&str> = outcomes["fieldConfig"]["overrides"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["matcher"]["options"].as_str())
        .collect();
    for outcome in SLO_OUTCOMES {
        assert!(
            colored.contains(&outcome),
            "{name}: no colour for {outcome}"
        );
    }

    // Burn rates at the alerts' four windows, against rules.yml's objective;
    // its lines are the alerts' thresholds.
    let burn = find("SLO error-budget burn rate");
    let e = exprs(burn);
    let windows: Vec<&str> = FAST_WINDOWS.iter().map(|(w, _)| *w).collect();
    assert_eq!(e.len(), windows.len(), "{name}: burn rates: {e:?}");
    for (expr, window) in e.iter().zip(&windows) {
        let miss = format!(r#"sum by (model_name) ({requests}outcome!="met", job=~"#);
        assert!(
            expr.starts_with(&miss)
                && expr.contains(&format!("{window})) / {all}"))
                && expr.ends_with(&format!(
                    "{window})) / on () group_left () (1 - {SLO_OBJECTIVE})"
                )),
            "{name}: burn rate over {window}: {expr}"
        );
    }
    for threshold in [6.0, 14.4] {
        assert!(
            steps(burn).contains(&threshold),
            "{name}: burn-rate line at {threshold}"
        );
        assert!(
            rules.contains(&format!(") > {threshold}\n")),
            "rules.yml: no burn-rate threshold {threshold}"
        );
    }

    // Goodput in requests and in tokens, each beside everything finished.
    let e = exprs(find("Goodput: requests meeting the SLO"));
    assert!(
        e.len() == 2 && e[0].starts_with(&met) && e[1].starts_with(&all),
        "{name}: goodput requests: {e:?}"
    );
    let e = exprs(find("Goodput: tokens of requests meeting the SLO"));
    assert!(
        e.len() == 2
            && e[0].starts_with(
                "sum by (model_name) (rate(vllm_otel_metrics_slo_goodput_tokens_total{job=~"
            )
            && e[1].starts_with("sum by (model_name) (rate(vllm:request_generation_tokens_sum{"),
        "{name}: goodput tokens: {e:?}"
    );
}

/// Panel ids unique, every panel inside the 24 grid columns, no two overlapping.
fn assert_layout(path: &Path, json: &Value) {
    let name = path.display();
    let all = panels(json);
    let mut ids: Vec<u64> = all.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), all.len(), "{name}: a panel without id");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "{name}: panel ids not unique");
    let rect = |p: &Value| {
        let g = &p["gridPos"];
        let n = |k: &str| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{name}: {}: gridPos.{k}", p["title"]))
        };
        (n("x"), n("y"), n("w"), n("h"))
    };
    for (i, a) in all.iter().enumerate() {
        let (ax, ay, aw, ah) = rect(a);
        assert!(
            aw > 0 && ah > 0 && ax + aw <= 24,
            "{name}: {}: gridPos",
            a["title"]
        );
        for b in &all[i + 1..] {
            let (bx, by, bw, bh) = rect(b);
            let apart = ax + aw <= bx || bx + bw <= ax || ay + ah <= by || by + bh <= ay;
            assert!(apart, "{name}: {} overlaps {}", a["title"], b["title"]);
        }
    }
}

/// The selectors `(metric name, matchers)` of every `gen_ai_server_*` series
/// in `expr`; panics on one without matchers.
/// Every query of the dashboard's described panels, each reading its own
/// datasource and naming series with `prefix` only, every one of them
/// matched by all of `filter`; `check` sees each series' name and query.
fn filtered_exprs(
    name: &impl std::fmt::Display,
    json: &Value,
    prefix: &str,
    filter: &[&str],
    check: impl Fn(&str, &str),
) -> Vec<String> {
    let mut all = Vec::new();
    for panel in panels(json) {
        if panel["type"] == "row" {
            continue;
        }
        let (title, _, targets) = described_panel(name, panel);
        for target in targets {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "{name}: {title}"
            );
            let expr = target["expr"].as_str().unwrap_or_default();
            let selectors = selectors(expr, prefix);
            assert!(
                !selectors.is_empty(),
                "{name}: {title}: no {prefix} series in {expr}"
            );
            for (metric, matchers) in &selectors {
                check(metric, expr);
                for matcher in filter {
                    assert!(
                        matchers.contains(matcher),
                        "{name}: {title}: {matcher} on {metric} in {expr}"
                    );
                }
            }
            all.push(expr.to_owned());
        }
    }
    all
}

/// The selectors `(metric name, matchers)` of every series whose name
/// starts with `prefix` in `expr`; panics on one without matchers.
fn selectors(expr: &str, prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(prefix) {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let metric = &tail[..end];
        let body = tail[end..]
            .strip_prefix('{')
            .and_then(|b| b.split_once('}'))
            .map(|(matchers, _)| matchers)
            .unwrap_or_else(|| panic!("{metric} without matchers in {expr}"));
        out.push((metric.to_owned(), body.to_owned()));
        rest = &tail[end..];
    }
    out
}

#[test]
fn genai_dashboard_is_filtered_described_and_chained() {
    let vllm_uids: Vec<Value> = dashboards().iter().map(|(_, j)| j["uid"].clone()).collect();
    for (path, json) in genai_dashboards() {
        let name = path.display();
        assert!(json["uid"].is_string(), "{name}: uid");
        assert!(!vllm_uids.contains(&json["uid"]), "{name}: uid taken");
        assert_variable_chain(
            &name,
            &json,
            &GENAI_CHAIN,
            "gen_ai_server_request_duration_seconds_count",
        );
        // Semantic-convention series only, each filtered by all four variables.
        let all = filtered_exprs(&name, &json, "gen_ai_server_", &GENAI_FILTER, |_, expr| {
            assert!(!expr.contains("vllm:"), "{name}: vLLM family in {expr}");
        });
        assert_layout(&path, &json);
        // The panels the dashboard promises.
        let has = |what: &str, check: &dyn Fn(&str) -> bool| {
            assert!(all.iter().any(|e| check(e)), "{name}: no query for {what}");
        };
        let quantile = |q: &str, metric: &str| {
            let q = format!("histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{");
            move |e: &str| e.starts_with(&q)
        };
        for q in ["0.5", "0.9", "0.99"] {
            has(
                &format!("request duration p{q}"),
                &quantile(q, "gen_ai_server_request_duration_seconds"),
            );
        }
        for q in ["0.5", "0.99"] {
            has(
                &format!("TTFT p{q}"),
                &quantile(q, "gen_ai_server_time_to_first_token_seconds"),
            );
            has(
                &format!("TPOT p{q}"),
                &quantile(q, "gen_ai_server_time_per_output_token_seconds"),
            );
        }
        has("request rate by operation", &|e| {
            e.starts_with(
                "sum by (gen_ai_operation_name) (rate(gen_ai_server_request_duration_seconds_count{",
            )
        });
        has("error share by error_type", &|e| {
            e.starts_with("sum by (error_type) (rate(gen_ai_server_request_duration_seconds_count{")
                && e.contains(r#"error_type!="""#)
        });
        has("mean request duration", &|e| {
            e.contains("rate(gen_ai_server_request_duration_seconds_sum{")
                && e.contains(") / sum")
                && e.contains("rate(gen_ai_server_request_duration_seconds_count{")
        });
    }
}

/// Checks what every dashboard needs of its variables: a recent schema, a
/// Prometheus data source variable, and `chain`, each a multi-select query
/// variable with an All of `.*` on the data source, taking its values from
/// `family` filtered by every variable before it.
fn assert_variable_chain(
    name: &impl std::fmt::Display,
    json: &Value,
    chain: &[&str],
    family: &str,
) {
    assert!(
        json["schemaVersion"].as_u64() >= Some(36),
        "{name}: schemaVersion"
    );
    let var = |n: &str| variable(name, json, n);
    assert_eq!(var("datasource")["type"], "datasource", "{name}");
    assert_eq!(var("datasource")["query"], "prometheus", "{name}");
    // Each variable is filtered by the ones before it.
    for (i, n) in chain.iter().enumerate() {
        let v = var(n);
        assert_eq!(v["type"], "query", "{name}: {n}");
        assert_eq!(v["multi"], true, "{name}: {n} multi-select");
        assert_eq!(v["includeAll"], true, "{name}: {n} All");
        assert_eq!(v["allValue"], ".*", "{name}: {n} All is .*");
        assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}: {n}");
        let q = v["query"].as_str().unwrap_or_default();
        assert!(
            q.starts_with(&format!("label_values({family}")) && q.ends_with(&format!(", {n})")),
            "{name}: {n}: {q}"
        );
        for earlier in &chain[..i] {
            assert!(
                q.contains(&format!("{earlier}=~\"${earlier}\"")),
                "{name}: {n}: {q}"
            );
        }
    }
}

/// The dashboard's variable called `n`.
fn variable<'a>(name: &impl std::fmt::Display, json: &'a Value, n: &str) -> &'a Value {
    json["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .find(|v| v["name"] == n)
        .unwrap_or_else(|| panic!("{name}: no variable {n}"))
}

/// A data panel's title, description and queries, after checking what
/// every data panel needs: a title, a description that explains it, a unit,
/// the dashboard's data source and at least one query.
fn described_panel<'a>(
    name: &impl std::fmt::Display,
    panel: &'a Value,
) -> (&'a str, &'a str, &'a Vec<Value>) {
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
    (title, description, targets)
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

#[test]
fn native_dashboard_is_filtered_described_and_chained() {
    let taken: Vec<Value> = dashboards()
        .into_iter()
        .chain(genai_dashboards())
        .map(|(_, j)| j["uid"].clone())
        .collect();
    let native: Vec<&str> = catalog::all()
        .filter(|def| catalog::is_latency_histogram(def))
        .map(|def| def.vllm_name)
        .collect();
    for (path, json) in native_dashboards() {
        let name = path.display();
        assert!(json["uid"].is_string(), "{name}: uid");
        assert!(!taken.contains(&json["uid"]), "{name}: uid taken");
        assert_variable_chain(
            &name,
            &json,
            &["job", "instance", "model_name", "engine"],
            "vllm:e2e_request_latency_seconds",
        );
        // Native histograms only (no _bucket, _sum or _count series), each
        // filtered by all four variables.
        let all = filtered_exprs(&name, &json, "vllm:", &FILTER, |metric, expr| {
            assert!(
                native.contains(&metric),
                "{name}: {metric} in {expr} is not a native histogram (one of {native:?})"
            );
        });
        assert_layout(&path, &json);
        // The panels the dashboard promises: per model, the p99 of every
        // native family and the p50 and p90 of TTFT and e2e, the rate of
        // terminated requests and the mean e2e latency.
        let has = |what: &str, check: &dyn Fn(&str) -> bool| {
            assert!(all.iter().any(|e| check(e)), "{name}: no query for {what}");
        };
        let quantile = |q: &str, metric: &str| {
            let q = format!("histogram_quantile({q}, sum by (model_name) (rate({metric}{{");
            move |e: &str| e.starts_with(&q)
        };
        for family in &native {
            has(&format!("{family} p99"), &quantile("0.99", family));
        }
        for family in [
            "vllm:time_to_first_token_seconds",
            "vllm:e2e_request_latency_seconds",
        ] {
            for q in ["0.5", "0.9"] {
                has(&format!("{family} p{q}"), &quantile(q, family));
            }
        }
        has("terminated requests per second", &|e| {
            e.starts_with(
                "sum by (model_name) (histogram_count(rate(vllm:e2e_request_latency_seconds{",
            )
        });
        has("mean e2e latency", &|e| {
            e.contains("histogram_sum(rate(vllm:e2e_request_latency_seconds{")
                && e.contains(") / sum")
                && e.contains("histogram_count(rate(vllm:e2e_request_latency_seconds{")
        });
    }
}

/// A simulator pushing its `--semconv gen_ai` histograms to `endpoint` every
/// second, as service (Prometheus `job`) `name`.
fn genai_simulator(
    dir: &Path,
    name: &str,
    protocol: &str,
    endpoint: &str,
    extra: &[&str],
) -> Guard {
    common::spawn_logged(
        Command::new(common::binary())
            .env("OTEL_SERVICE_NAME", name)
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .args(["simulate", "--realtime", "--semconv", "gen_ai"])
            .args(["--duration", "120", "--seed", "5", "--rate", "6"])
            .args(["--prompt-len", "128", "--output-len", "256"])
            .args(extra)
            .args(["--otlp-protocol", protocol, "--otlp-endpoint", endpoint])
            .args(["--otlp-interval-ms", "1000"])
            .args(["--output", "none", "--metrics-addr", "none"]),
        &dir.join(format!("{name}.log")),
        "the simulator",
    )
}

/// The labels of a series without `le`, as one comparable string.
fn series_key(metric: &Value) -> String {
    let mut pairs: Vec<String> = metric
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "le")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    pairs.sort();
    pairs.join(",")
}

#[test]
fn genai_dashboard_works_through_the_collector() {
    let started = Instant::now();
    let dir = common::tempdir("genai-dashboard");
    let collector = common::collector::Collector::start();
    // One service with client aborts (error.type="abort"), pushing over gRPC;
    // one without, pushing over HTTP, with server.address and server.port.
    let _aborting = genai_simulator(
        &dir,
        "genai-aborting",
        "grpc",
        &collector.endpoint("grpc"),
        &["--abort-rate", "0.5"],
    );
    let _clean = genai_simulator(
        &dir,
        "genai-clean",
        "http/protobuf",
        &collector.endpoint("http/protobuf"),
        &[
            "--abort-rate",
            "0",
            "--semconv-server-address",
            "api.example",
            "--semconv-server-port",
            "8000",
        ],
    );
    // The Collector serves every process's series with its own job (service.name)
    // and instance (service.instance.id), as otel-collector/prometheus.yml scrapes it.
    let (_prometheus, port) = prometheus::start_honoring_labels(&dir, collector.prometheus);
    eprintln!("logs in {}", dir.display());
    query_data(port, r#"up{job="target"} == 1"#, 30);
    let aborts = r#"gen_ai_server_request_duration_seconds_count{job="genai-aborting", error_type="abort"} > 0"#;
    query_data(port, aborts, 60);
    eprintln!(
        "first abort through the Collector after {:?}",
        started.elapsed()
    );

    // 1. Every dashboard query returns data, and every variable finds its values.
    let (path, json) = genai_dashboards().remove(0);
    for expr in all_exprs(&path, &json, 10) {
        query_data(port, &substitute(&expr), 30);
    }
    let vars = json["templating"]["list"].as_array().expect("templating");
    let expected: [&[&str]; 4] = [
        &["genai-aborting", "genai-clean"],
        &[],
        &["sim-model-0"],
        &["text_completion"],
    ];
    for (name, want) in GENAI_CHAIN.iter().zip(expected) {
        let query = vars.iter().find(|v| v["name"] == *name).expect("variable")["query"]
            .as_str()
            .unwrap()
            .to_owned();
        // label_values(SELECTOR, LABEL) as Grafana asks Prometheus for it.
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(&format!(", {name})")))
            .unwrap_or_else(|| panic!("{name}: {query}"));
        let promql = format!("count by ({name}) ({})", substitute(selector));
        let mut found: Vec<String> = values_by(&query_data(port, &promql, 20), name)
            .into_iter()
            .map(|(value, _)| value)
            .collect();
        found.sort();
        if *name == "instance" {
            assert_eq!(found.len(), 2, "one instance per process: {found:?}");
        } else {
            assert_eq!(found, want, "values of variable {name}");
        }
    }

    // 2. The error share: 0 (not nothing) for the service without failures,
    // abort's share for the other, and nothing else.
    let share_expr = all_exprs(&path, &json, 10)
        .into_iter()
        .find(|e| e.starts_with("sum by (error_type)"))
        .expect("the error share query");
    let clean = query_data(
        port,
        &substitute_with(&share_expr, &[("job", "genai-clean")]),
        20,
    );
    assert_eq!(
        values_by(&clean, "error_type"),
        [("none".to_owned(), 0.0)],
        "error share of genai-clean"
    );
    let mut shares = Vec::new();
    let aborting_share = substitute_with(&share_expr, &[("job", "genai-aborting")]);
    let seen = common::wait_for_optional(30, || {
        shares = values_by(
            &query(port, &aborting_share).unwrap_or_default(),
            "error_type",
        );
        matches!(shares.as_slice(), [(t, v)] if t == "abort" && *v > 0.0 && *v < 1.0).then_some(())
    });
    assert!(seen.is_some(), "error share of genai-aborting: {shares:?}");
    eprintln!("genai-aborting error share: {shares:?}");

    // 3. Attributes as the semantic conventions name them, error.type only
    // on failed requests' durations.
    let durations = query_data(port, "gen_ai_server_request_duration_seconds_count", 20);
    for series in &durations {
        let m = &series["metric"];
        let text = |k: &str| m[k].as_str().unwrap_or_default().to_owned();
        assert_eq!(text("gen_ai_provider_name"), "vllm", "{m}");
        assert_eq!(text("gen_ai_operation_name"), "text_completion", "{m}");
        assert_eq!(text("gen_ai_request_model"), "sim-model-0", "{m}");
        assert_eq!(
            text("gen_ai_response_model"),
            text("gen_ai_request_model"),
            "{m}"
        );
        match text("job").as_str() {
            "genai-clean" => {
                assert_eq!(text("error_type"), "", "{m}");
                assert_eq!(text("server_address"), "api.example", "{m}");
                assert_eq!(text("server_port"), "8000", "{m}");
            }
            "genai-aborting" => {
                assert!(["", "abort"].contains(&text("error_type").as_str()), "{m}");
                assert!(m.get("server_address").is_none(), "{m}");
            }
            other => panic!("unexpected job {other}: {m}"),
        }
    }
    for family in [
        "gen_ai_server_time_to_first_token_seconds_count",
        "gen_ai_server_time_per_output_token_seconds_count",
    ] {
        query_data(port, family, 20);
        let failed = query(port, &format!(r#"{family}{{error_type!=""}}"#)).expect(family);
        assert!(failed.is_empty(), "{family} with error_type: {failed:?}");
    }

    // 4. The advised bucket boundaries arrive unchanged, on every series.
    for (family, bounds) in GENAI_BUCKETS {
        let buckets = query_data(port, &format!("{family}_bucket"), 20);
        let mut per_series: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
        for series in &buckets {
            let le = series["metric"]["le"].as_str().expect("le");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse()
                    .unwrap_or_else(|e| panic!("{family}: le {le:?}: {e}"))
            };
            per_series
                .entry(series_key(&series["metric"]))
                .or_default()
                .push(le);
        }
        let mut want = bounds.to_vec();
        want.push(f64::INFINITY);
        assert!(!per_series.is_empty(), "{family}: no series");
        for (key, mut les) in per_series {
            les.sort_by(f64::total_cmp);
            assert_eq!(les, want, "{family}{{{key}}}: bucket boundaries");
        }
    }

    // 5. The same requests as vLLM's own families in the same export: every
    // terminated request once, every abort once (the two sides in one
    // expression, from one scrape; polled, as an export may fall between
    // one request's two recordings).
    let checks = [
        (
            "sum by (job) (gen_ai_server_request_duration_seconds_count) \
             - sum by (job) (vllm:e2e_request_latency_seconds_count)",
            2,
        ),
        (
            r#"sum by (job) (gen_ai_server_request_duration_seconds_count{error_type="abort"})
             - sum by (job) (vllm:request_success_total{finished_reason="abort"})"#,
            1,
        ),
    ];
    for (promql, jobs) in checks {
        let mut last = Vec::new();
        let equal = common::wait_for_optional(20, || {
            last = values_by(&query(port, promql).unwrap_or_default(), "job");
            (last.len() == jobs && last.iter().all(|(_, v)| *v == 0.0)).then_some(())
        });
        assert!(equal.is_some(), "{promql}: {last:?}");
    }

    eprintln!("GenAI dashboard checked after {:?}", started.elapsed());
    std::fs::remove_dir_all(&dir).ok();
}
