//! vLLM's own published Grafana dashboards, run unchanged against the
//! simulator.
//!
//! `tests/data/vllm-dashboards/queries.tsv` holds every query expression of
//! the dashboards the vLLM project publishes (see the README there for the
//! paths and commits). A real Prometheus (Debian's `prometheus`) scrapes three
//! simulators every second, as three scrape jobs that together exercise
//! everything the simulator models:
//!
//! - `vllm-a`: two engines under a KV cache too small for the load (requests
//!   wait and are preempted), speculative decoding, a NIXL connector pulling
//!   part of each prompt from a prefill instance (some transfers fail),
//!   three LoRA adapters, sampled KV-block residency, an RL trainer pushing
//!   weights every 6 s, and the OffloadingConnector's CPU pool with a store
//!   threshold (skipped stores, allocation failures, deferred lookups); its
//!   per-request series carry their class (`--attribute lora,priority`);
//! - `vllm-b`: a light load whose engine sleeps whenever it has been idle for
//!   a second and wakes for the next request;
//! - `vllm-c`: a CPU pool under the SimpleCPUOffloadConnector.
//!
//! After enough scrapes every query is evaluated through `/api/v1/query`, with
//! Grafana's variables set as the dashboards' defaults would set them (see
//! [`substitute`]). Every query must return data, except the few in
//! [`EXPECTED_EMPTY`], which must be empty (so a stale entry fails).

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
use std::time::{Duration, Instant};

use common::process::Guard;
use common::prometheus_server;
use serde_json::Value;

const KV_CACHE: &str = "examples/observability/dashboards/grafana/vllm_kv_cache.json";
const OVERVIEW: &str = "examples/observability/dashboards/grafana/vllm_overview.json";
const SERVICE_STATUS: &str = "examples/observability/dashboards/grafana/vllm_service_status.json";
/// The older dashboard, whose `$model_name` is a single-value variable.
const PROMETHEUS_GRAFANA: &str = "examples/observability/prometheus_grafana/grafana.json";

/// Rows of `queries.tsv`.
const EXPECTED_ROWS: usize = 277;
/// Every query is covered: none is out of the simulator's scope.
const MIN_COVERED: usize = EXPECTED_ROWS;

/// Covered queries that cannot return data from what the simulator models:
/// (source, panel id, refId, why).
const EXPECTED_EMPTY: [(&str, &str, &str, &str); 2] = [
    (
        KV_CACHE,
        "16",
        "C",
        "multi-modal cache hit rate `mm_cache_hits / (mm_cache_queries > 0)`: the simulator serves text only, so there are no multi-modal cache queries",
    ),
    (
        OVERVIEW,
        "38",
        "C",
        "multi-modal cache hit rate `mm_cache_hits / (mm_cache_queries > 0)`: the simulator serves text only, so there are no multi-modal cache queries",
    ),
];

/// Simulator A: everything the engine tier models, under load; its
/// per-request families carry each request's class (`--attribute
/// lora,priority`, docs/SEMANTICS.md §6d), so every query also runs over
/// classed series.
const SIM_A: [&str; 28] = [
    "--attribute",
    "lora,priority",
    "--seed",
    "1",
    "--engines",
    "2",
    "--num-speculative-tokens",
    "3",
    "--external-prefix-hit-rate",
    "0.4",
    "--lora-adapters",
    "--models",
    "3",
    "--kv-cache-metrics-sample",
    "0.2",
    "--weight-update-interval",
    "6",
    "--kv-blocks",
    "256",
    "--rate",
    "6",
    "--nixl",
    "--nixl-failure-rate",
    "0.1",
    // Much smaller than the GPU cache: some stores find no room
    // (allocation failures), the others are loaded back. A request is
    // stored from its second preemption on: the first is a skipped store.
    "--kv-offload-blocks",
    "32",
    "--kv-offload-store-threshold",
    "2",
];

/// Simulator B: a light load that sleeps between requests and wakes.
const SIM_B: [&str; 6] = ["--seed", "2", "--rate", "0.5", "--sleep-when-idle", "1"];

/// Simulator C: CPU offloading under vLLM's SimpleCPUOffloadConnector,
/// whose pool is too small for every store (dropped blocks).
const SIM_C: [&str; 10] = [
    "--seed",
    "3",
    "--rate",
    "2",
    "--kv-blocks",
    "128",
    "--kv-offload-blocks",
    "64",
    "--kv-offload-connector",
    "simple",
];

/// Series that show every kind of event has happened at least once.
const READY_WHEN: [&str; 5] = [
    "vllm:sleep_mode_operation_duration_seconds_count",
    "vllm:rl_weight_update_operation_duration_seconds_count",
    "vllm:kv_block_lifetime_seconds_count",
    "vllm:kv_block_idle_before_evict_seconds_count",
    "vllm:kv_block_reuse_gap_seconds_count",
];
/// Seconds of scraping before the queries run, at the least.
const MIN_SCRAPED_SECS: u64 = 35;
/// Seconds a covered query may take to return data (windows fill in).
const RETRY_SECS: u64 = 15;

/// One row of `queries.tsv`.
struct Query {
    source: String,
    panel_id: String,
    panel_title: String,
    ref_id: String,
    expr: String,
}

fn queries() -> Vec<Query> {
    let path = common::paths::repo().join("tests/data/vllm-dashboards/queries.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("source\tcommit\tpanel_id\tpanel_title\tref_id\texpr"),
        "{}: header",
        path.display()
    );
    let data_lines = text.lines().count() - 1;
    let rows: Vec<Query> = lines
        .enumerate()
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 6, "{}:{}: six fields", path.display(), i + 2);
            let commit = fields[1];
            assert!(
                commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
                "{}:{}: commit {commit:?}",
                path.display(),
                i + 2
            );
            assert!(
                fields[5].contains("vllm:"),
                "{}:{}: not a vLLM query",
                path.display(),
                i + 2
            );
            Query {
                source: fields[0].to_owned(),
                panel_id: fields[2].to_owned(),
                panel_title: fields[3].to_owned(),
                ref_id: fields[4].to_owned(),
                expr: fields[5].to_owned(),
            }
        })
        .collect();
    assert_eq!(
        rows.len(),
        data_lines,
        "every line of {} is a query",
        path.display()
    );
    rows
}

/// The expression as Grafana sends it to Prometheus with the dashboards'
/// default variables:
///
/// - the multi-value variables with "All" selected (`$job`, `$instance`,
///   `$model_name`, `$engine`, `$Deployment_id`) become `.*`; they may only
///   appear in `=~"…"` matchers (asserted);
/// - `$model_name` of `prometheus_grafana/grafana.json` is a single-value
///   variable (`label_values(model_name)`, used in `model_name="…"`); its saved
///   value is not served, so Grafana selects the first value: `first_model`;
/// - `$__rate_interval` becomes `15s` (fifteen scrapes; as in
///   `tests/dashboards_prometheus.rs`);
/// - `$__range` becomes the time scraped so far, `range_secs`;
/// - `$ttft_slo` and `$tpot_slo` take `vllm_overview.json`'s saved values,
///   `1.0` (1 s) and `0.1` (100 ms).
fn substitute(query: &Query, first_model: &str, range_secs: u64) -> String {
    let range = format!("{range_secs}s");
    let mut values = vec![
        ("__rate_interval", "15s"),
        ("__range", range.as_str()),
        ("ttft_slo", "1.0"),
        ("tpot_slo", "0.1"),
    ];
    if query.source == PROMETHEUS_GRAFANA {
        values.push(("model_name", first_model));
    }
    common::dashboards::substitute(&query.expr, &values)
}

/// What Prometheus answered to an instant query.
enum Answer {
    /// Status success with data: series (or 1 for a scalar or string).
    Data(usize),
    /// Status success with series whose every value is NaN (Grafana shows
    /// "NaN"; histogram quantiles of windows without observations).
    NaN(usize),
    /// Status success, no series.
    Empty,
    /// Anything else: the HTTP status, Prometheus' error or the body.
    Error(String),
}

fn query(port: u16, promql: &str) -> Answer {
    let data = match prometheus_server::query(port, promql) {
        Ok(data) => data,
        Err(e) => return Answer::Error(e),
    };
    match data["resultType"].as_str() {
        Some("vector") | Some("matrix") => match data["result"].as_array() {
            Some(result) if result.is_empty() => Answer::Empty,
            Some(result) => {
                let nan = |v: &Value| v[1].as_str().is_some_and(|x| x == "NaN");
                let all_nan = result.iter().all(|series| {
                    nan(&series["value"])
                        || series["values"]
                            .as_array()
                            .is_some_and(|values| values.iter().all(nan))
                });
                if all_nan {
                    Answer::NaN(result.len())
                } else {
                    Answer::Data(result.len())
                }
            }
            None => Answer::Error(format!("no result array: {data}")),
        },
        Some("scalar") | Some("string") => Answer::Data(1),
        _ => Answer::Error(format!("unknown resultType: {data}")),
    }
}

fn simulator(dir: &Path, name: &str, args: &[&str], port: u16) -> Guard {
    common::process::spawn_logged(
        Command::new(common::process::binary())
            .args([
                "simulate",
                "--realtime",
                "--duration",
                "600",
                "--output",
                "none",
            ])
            .args(args)
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}")),
        &dir.join(format!("{name}.log")),
        "the simulator",
    )
}

/// Names of the series of `selector` (for failure reports).
fn series_names(port: u16, selector: &str) -> Vec<String> {
    let Ok((_, body)) = common::http::get(
        port,
        &format!(
            "/api/v1/series?match[]={}",
            prometheus_server::url_encode(selector)
        ),
    ) else {
        return Vec::new();
    };
    let json: Value = serde_json::from_str(&body).unwrap_or_default();
    let mut names: Vec<String> = json["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|series| series["__name__"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    names
}

mod needs_prometheus {
    use super::*;

    #[test]
    fn vllm_published_dashboards_work_on_the_simulator() {
        let rows = queries();
        assert_eq!(rows.len(), EXPECTED_ROWS, "rows of queries.tsv");
        for (source, panel, ref_id, _) in EXPECTED_EMPTY {
            let row = rows
                .iter()
                .find(|q| q.source == source && q.panel_id == panel && q.ref_id == ref_id)
                .unwrap_or_else(|| {
                    panic!("EXPECTED_EMPTY: no query {source} panel {panel} {ref_id}")
                });
            assert!(
                !row.expr.is_empty(),
                "EXPECTED_EMPTY: {source} panel {panel} {ref_id}"
            );
        }

        let started = Instant::now();
        let dir = common::paths::tempdir("vllm-dashboards");
        let port_a = common::http::free_port();
        let port_b = common::http::free_port();
        let port_c = common::http::free_port();
        let _sim_a = simulator(&dir, "vllm-a", &SIM_A, port_a);
        let _sim_b = simulator(&dir, "vllm-b", &SIM_B, port_b);
        let _sim_c = simulator(&dir, "vllm-c", &SIM_C, port_c);

        let (_prometheus, port) = prometheus_server::start(
            &dir,
            &[("vllm-a", port_a), ("vllm-b", port_b), ("vllm-c", port_c)],
            None,
            &[],
        );
        for job in ["vllm-a", "vllm-b", "vllm-c"] {
            let up = format!("up{{job=\"{job}\"}} == 1");
            common::process::wait_for(30, &format!("{job} to be scraped"), || {
                matches!(query(port, &up), Answer::Data(_)).then_some(())
            });
        }
        let first_scrape = Instant::now();

        // Enough data: every kind of event seen, and windows filled.
        let mut missing = Vec::new();
        let ready = common::process::wait_for_optional(MIN_SCRAPED_SECS + 30, || {
            missing = READY_WHEN
                .iter()
                .filter(|series| !matches!(query(port, series), Answer::Data(_)))
                .collect();
            (missing.is_empty() && first_scrape.elapsed() >= Duration::from_secs(MIN_SCRAPED_SECS))
                .then_some(())
        });
        assert!(
            ready.is_some(),
            "after {:?} of scraping still no series for {missing:?}; logs in {}",
            first_scrape.elapsed(),
            dir.display()
        );
        let range_secs = first_scrape.elapsed().as_secs();

        // Grafana's first value of `label_values(model_name)`.
        let (_, body) =
            common::http::get(port, "/api/v1/label/model_name/values").expect("model_name values");
        let json: Value = serde_json::from_str(&body).expect("JSON label values");
        let models: Vec<String> = json["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let first_model = models.first().expect("a model_name value").clone();

        // Evaluate every query.
        let expected_empty = |q: &Query| {
            EXPECTED_EMPTY
                .iter()
                .find(|(source, panel, ref_id, _)| {
                    q.source == *source && q.panel_id == *panel && q.ref_id == *ref_id
                })
                .map(|entry| entry.3)
        };
        let mut covered = 0;
        let mut with_data = 0;
        let mut failures = Vec::new();
        let mut pending = Vec::new();
        let mut all_nan = Vec::new();
        for q in &rows {
            let promql = substitute(q, &first_model, range_secs);
            covered += 1;
            match (query(port, &promql), expected_empty(q)) {
            (Answer::Data(_), None) => with_data += 1,
            (Answer::NaN(_), None) => {
                with_data += 1;
                all_nan.push(format!("{} panel {} {}", q.source, q.panel_id, q.ref_id));
            }
            (Answer::Empty, Some(_)) => {}
            (Answer::Data(n) | Answer::NaN(n), Some(why)) => failures.push(format!(
                "{} panel {} {:?} {}: in EXPECTED_EMPTY ({why}) but returned {n} series\n  {promql}",
                q.source, q.panel_id, q.panel_title, q.ref_id
            )),
            (Answer::Error(e), _) => failures.push(format!(
                "{} panel {} {:?} {}: {e}\n  {promql}",
                q.source, q.panel_id, q.panel_title, q.ref_id
            )),
            // Windows may still be filling in: asked again below.
            (Answer::Empty, None) => pending.push((q, promql)),
        }
        }
        let retried = pending.len();
        let deadline = Instant::now() + Duration::from_secs(RETRY_SECS);
        while !pending.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            pending.retain(|(_, promql)| {
                let data = matches!(query(port, promql), Answer::Data(_) | Answer::NaN(_));
                with_data += usize::from(data);
                !data
            });
        }
        for (q, promql) in &pending {
            let names: Vec<String> = q
                .expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .filter(|word| word.starts_with("vllm:"))
                .flat_map(|name| {
                    let family = ["_bucket", "_count", "_sum", "_total"]
                        .iter()
                        .find_map(|suffix| name.strip_suffix(suffix))
                        .unwrap_or(name);
                    series_names(port, &format!("{{__name__=~\"{family}.*\"}}"))
                })
                .collect();
            failures.push(format!(
                "{} panel {} {:?} {}: empty result after {RETRY_SECS} s more\n  {promql}\n  \
             series of its families: {names:?}",
                q.source, q.panel_id, q.panel_title, q.ref_id
            ));
        }

        // No simulated request fails: the error share is 0 and the success
        // rate 1, now that every finish reason's series exists at 0 (they were
        // "No data" while the `error` series appeared only with a failure).
        for (source, panel, ref_id, expected) in [
            (OVERVIEW, "18", "G", 0.0),
            (SERVICE_STATUS, "5", "A", 1.0),
            (SERVICE_STATUS, "10", "A", 1.0),
        ] {
            let q = rows
                .iter()
                .find(|q| q.source == source && q.panel_id == panel && q.ref_id == ref_id)
                .unwrap_or_else(|| panic!("no query {source} panel {panel} {ref_id}"));
            let promql = substitute(q, &first_model, range_secs);
            let data = prometheus_server::query(port, &promql).expect("the query runs");
            let values: Vec<f64> = data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|series| series["value"][1].as_str()?.parse().ok())
                .collect();
            assert!(
                !values.is_empty() && values.iter().all(|v| *v == expected),
                "{source} panel {panel} {ref_id}: {values:?}, expected {expected}\n  {promql}"
            );
        }

        eprintln!(
        "vLLM dashboards: {} queries, {covered} covered ({with_data} with data, {} expected empty); \
         $__range = {range_secs}s, \
         $model_name (prometheus_grafana) = {first_model:?}; {retried} asked again; \
         {} only NaN; {} failure(s); {:?} in all",
        rows.len(),
        EXPECTED_EMPTY.len(),
        all_nan.len(),
        failures.len(),
        started.elapsed()
    );
        for (source, panel, ref_id, why) in EXPECTED_EMPTY {
            eprintln!("  expected empty: {source} panel {panel} {ref_id}: {why}");
        }
        for query in &all_nan {
            eprintln!("  only NaN (counted as data): {query}");
        }
        for failure in &failures {
            eprintln!("FAILED {failure}");
        }
        assert_eq!(covered, rows.len(), "every row covered");
        assert!(
            covered >= MIN_COVERED,
            "only {covered} covered queries (at least {MIN_COVERED})"
        );
        assert!(
            failures.is_empty(),
            "{} of {covered} covered vLLM dashboard queries failed (logs and config in {}):\n{}",
            failures.len(),
            dir.display(),
            failures.join("\n")
        );
        assert_eq!(
            with_data + EXPECTED_EMPTY.len(),
            covered,
            "covered queries accounted for"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
