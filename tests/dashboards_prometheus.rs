//! The Grafana dashboards in `otel-collector/grafana/` and the Prometheus
//! rules in `otel-collector/rules.yml`, checked for real.
//!
//! The live test starts a real Prometheus (Debian's `prometheus`) scraping two
//! simulators every second, as two scrape jobs:
//!
//! - `vllm-starved`: a KV cache far too small for the load (256 blocks, 6
//!   requests/s), so requests are preempted again and again; 30 % of its
//!   arrivals are high-priority (`--priority-fraction 0.3`), so it preempts
//!   for both reasons, `kv_full` and `priority`; its requests ask for three
//!   LoRA adapters and carry their class (`--attribute lora,priority`), so
//!   every other query runs over classed series, and the low priority class
//!   must show more preemptions per request than the high one;
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
//! The production rules alert after `for: 10m` on 5-minute windows (the
//! burn-rate alerts after `for: 2m` and `for: 15m` on windows of 5 minutes to
//! 6 hours), which would need hours of traffic. Prometheus therefore loads a
//! copy of `rules.yml` in which every `for:` is `5s` and every window a tenth
//! of its length (`[5m]` is `[30s]`, `[30m]` `[3m]`, `[1h]` `[6m]`, `[6h]`
//! `[36m]`, the last two longer than the run: they hold all of it); rule
//! names, expressions and thresholds are unchanged. (The production durations
//! are covered by `promtool test rules` on `otel-collector/rules_test.yml`,
//! run by `tests/promtool.rs`.)

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod dashboards;
    pub mod environments;
    pub mod http;
    pub mod paths;
    pub mod process;
    pub mod prometheus_server;
}

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::dashboards::*;
use common::process::Guard;
use common::prometheus_server::{
    self, result, result_within, sample_value, value_for_job, values_by,
};
use serde_json::Value;
use vllm_otel_metrics::catalog::slo::SLO_OUTCOMES;

/// The SLO both simulators judge their requests against. With [`WORKLOAD`]
/// the ample job's TTFT stays around 0.03 s (p99 0.04 s), under the bound;
/// the starved job's is under it only until its queue builds up (p50 12 s
/// over the whole run): its first requests meet the SLO, most later ones
/// miss `ttft` (about a third met, two thirds missed over the run). TPOT
/// (about 0.015 s) and e2e stay under their bounds on both; the ample job
/// misses only through an abort now and then (1 of 359 over the run).
const SLO: &str = r#"{"ttft": 0.5, "tpot": 0.05, "e2e": 30}"#;

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

/// What the starved job adds to [`WORKLOAD`]: priority scheduling, three
/// LoRA adapters, and attribution by adapter (two labels of their own) and
/// priority class, so that every query of the dashboards' "by class" row
/// has data, and every other query is checked with class labels present.
const STARVED: [&str; 11] = [
    "--priority-fraction",
    "0.3",
    "--lora-adapters",
    "--models",
    "3",
    "--attribute",
    "lora,priority",
    "--max-adapters",
    "2",
    "--adapter-min-requests",
    "3",
];

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

/// Alerts as Prometheus lists them: (alertname, job, state).
fn alerts(port: u16) -> Result<Vec<(String, String, String)>, String> {
    let (status, body) = common::http::get(port, "/api/v1/alerts")?;
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
    common::process::spawn_logged(
        Command::new(common::process::binary())
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

/// The SLO families and rules of the live run: every outcome of both jobs
/// exists, the starved job has met and missed requests and the ample one
/// met ones, every finished request is judged once, goodput tokens are
/// generation tokens of some of the requests, and the miss ratios put the
/// starved job above both burn-rate thresholds and the ample one below.
fn slo_checks(port: u16) {
    let objective = result_within(port, SLO_OBJECTIVE, 20);
    assert_eq!(objective.len(), 1, "one objective: {objective:?}");
    let objective = sample_value(&objective[0]).expect("objective");
    assert!(objective > 0.0 && objective < 1.0, "objective {objective}");
    let budget = 1.0 - objective;

    for job in ["vllm-starved", "vllm-ample"] {
        let per_outcome =
            format!(r#"sum by (outcome) (vllm_otel_metrics_slo_requests_total{{job="{job}"}})"#);
        let outcomes = values_by(&result_within(port, &per_outcome, 20), "outcome");
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

    // The long windows (36 and 6 minutes here) hold the whole run. The
    // starved job's rules are per class (`--attribute`): its worst class,
    // the low priority, burns.
    let worst = |result: &[Value], job: &str| {
        let of_job = result
            .iter()
            .filter(|series| series["metric"]["job"] == job);
        of_job.filter_map(sample_value).reduce(f64::max)
    };
    for (record, threshold) in [
        ("model_name:vllm_otel_metrics_slo_miss:ratio_rate6h", 6.0),
        ("model_name:vllm_otel_metrics_slo_miss:ratio_rate1h", 14.4),
    ] {
        let result = result_within(port, record, 20);
        let starved = worst(&result, "vllm-starved").expect("vllm-starved");
        let ample = worst(&result, "vllm-ample").expect("vllm-ample");
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
    let attainment = result_within(
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
    let once = common::process::wait_for_optional(20, || {
        last = values_by(&result(port, judged).unwrap_or_default(), "job");
        (last.len() == 2 && last.iter().all(|(_, v)| *v == 0.0)).then_some(())
    });
    assert!(
        once.is_some(),
        "judged requests minus finished requests, per job: {last:?}"
    );
    let beyond = "sum by (job) (vllm_otel_metrics_slo_goodput_tokens_total) \
                  > sum by (job) (vllm:request_generation_tokens_sum)";
    let beyond = result(port, beyond).expect("goodput query");
    assert!(
        beyond.is_empty(),
        "goodput tokens above generation tokens: {beyond:?}"
    );
    let goodput = result_within(
        port,
        "sum by (job) (vllm_otel_metrics_slo_goodput_tokens_total) > 0",
        20,
    );
    assert_eq!(goodput.len(), 2, "goodput tokens of both jobs: {goodput:?}");
}

mod needs_prometheus {
    use super::*;

    #[test]
    fn dashboards_and_rules_work_on_live_prometheus() {
        let started = Instant::now();
        let dir = common::paths::tempdir("dashboards");
        let rules_text = std::fs::read_to_string(rules_path()).unwrap();
        let rules = dir.join("rules.yml");
        std::fs::write(&rules, fast_rules(&rules_text)).unwrap();

        let starved_port = common::http::free_port();
        let ample_port = common::http::free_port();
        // High-priority arrivals preempt low-priority running requests (reason
        // `priority`) on top of the KV-cache shortage (`kv_full`). Its
        // requests carry their class (`--attribute`): three adapters, two
        // with a label of their own, and two priority classes.
        let _starved = simulator(&dir, "starved", "256", &STARVED, starved_port);
        let _ample = simulator(&dir, "ample", "4096", &[], ample_port);

        let (_prometheus, port) = prometheus_server::start(
            &dir,
            &[("vllm-starved", starved_port), ("vllm-ample", ample_port)],
            Some(&rules),
            &[],
        );
        // Both targets scraped, and the rules loaded (a bad rule file would stop
        // Prometheus from starting at all).
        for job in ["vllm-starved", "vllm-ample"] {
            let up = format!("up{{job=\"{job}\"}} == 1");
            result_within(port, &up, 30);
        }

        // 1. The preemption and burn-rate alerts fire for the starved job.
        let mut seen = Vec::new();
        let firing = common::process::wait_for_optional(75, || {
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
                let promql = substitute(&expr, &LIVE_RANGES);
                result_within(port, &promql, 20);
            }
        }

        // 3. Every recording rule records finite data, with the values the jobs
        // imply.
        let records = rule_values(&rules_text, "record");
        assert!(records.len() >= 17, "recording rules: {records:?}");
        for record in &records {
            let result = result_within(port, record, 20);
            assert!(
                result
                    .iter()
                    .all(|series| sample_value(series).is_some_and(f64::is_finite)),
                "{record}: {result:?}"
            );
        }
        let p99 = result_within(port, "model_name:vllm_request_num_preemptions:p99_5m", 20);
        let starved_p99 = value_for_job(&p99, "vllm-starved").expect("p99 of vllm-starved");
        assert!(starved_p99 >= 3.0, "starved p99 {starved_p99}");
        let ample_p99 = value_for_job(&p99, "vllm-ample").expect("p99 of vllm-ample");
        assert!(ample_p99 < 1.0, "ample p99 {ample_p99}: first bucket");
        let share = result_within(
            port,
            "model_name:vllm_request_num_preemptions:share_ge2_5m",
            20,
        );
        assert_eq!(value_for_job(&share, "vllm-ample"), Some(0.0), "{share:?}");
        let rate = result_within(port, "model_name_engine:vllm_num_preemptions:rate5m", 20);
        assert_eq!(value_for_job(&rate, "vllm-ample"), Some(0.0), "{rate:?}");

        // 4. The SLO: see slo_checks.
        slo_checks(port);

        // 5. Preemptions by reason: the starved job preempts for both reasons
        // it has, the reasons add up to the preemptions, and the ample job has
        // none of either.
        let by_reason =
            r#"sum by (reason) (vllm:num_preemptions_by_reason_total{job="vllm-starved"})"#;
        let mut reasons = Vec::new();
        let both = common::process::wait_for_optional(30, || {
            reasons = values_by(&result(port, by_reason).unwrap_or_default(), "reason");
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
            let result = result_within(port, difference, 20);
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
        let ample_total =
            result_within(port, r#"vllm:num_preemptions_total{job="vllm-ample"}"#, 20);
        assert!(
            ample_total.iter().all(|s| sample_value(s) == Some(0.0)),
            "vllm-ample preempted: {ample_total:?}"
        );
        let ample_reasons = result(
            port,
            r#"vllm:num_preemptions_by_reason_total{job="vllm-ample"}"#,
        )
        .expect("by-reason query");
        assert!(
            ample_reasons.is_empty(),
            "vllm-ample has preemptions by reason: {ample_reasons:?}"
        );

        // 6. By class: both priority classes (0 high, 1 low) have requests,
        // and the classes add up to the job's requests. (Which class absorbs
        // the preemptions is the simulator's test: this job is overloaded
        // far past the point where it shows.)
        let per_request = r#"sum by (priority) (vllm_class:request_num_preemptions_sum{job="vllm-starved"}) / sum by (priority) (vllm_class:request_num_preemptions_count{job="vllm-starved"})"#;
        let classes = values_by(&result_within(port, per_request, 20), "priority");
        let mut names: Vec<&str> = classes.iter().map(|(c, _)| c.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["0", "1"],
            "preemptions per request by class: {classes:?}"
        );
        let apart = r#"sum(vllm:request_success_total{job="vllm-starved"}) - sum(sum by (priority, lora_name) (vllm_class:request_success_total{job="vllm-starved"}))"#;
        let apart = result_within(port, apart, 20);
        assert_eq!(
            apart.iter().map(sample_value).collect::<Vec<_>>(),
            [Some(0.0)]
        );
        // vLLM's own family keeps vLLM's labels alone.
        let classed = r#"vllm:request_success_total{job="vllm-starved", priority!=""}"#;
        let classed = result(port, classed).expect("class labels query");
        assert!(
            classed.is_empty(),
            "vLLM's family has class labels: {classed:?}"
        );
        eprintln!("vllm-starved preemptions per request by priority class: {classes:?}");

        // 7. Nothing fires, or is even pending, for the ample job.
        let all = alerts(port).expect("alerts");
        let ample: Vec<_> = all.iter().filter(|a| a.1 == "vllm-ample").collect();
        assert!(ample.is_empty(), "alerts for vllm-ample: {ample:?}");
        let series = result(port, r#"ALERTS{job="vllm-ample"}"#).expect("ALERTS query");
        assert!(series.is_empty(), "ALERTS for vllm-ample: {series:?}");

        eprintln!("live check done after {:?}", started.elapsed());
        std::fs::remove_dir_all(&dir).ok();
    }
}
