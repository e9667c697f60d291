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

/// The queries of vLLM's dashboards that do not aggregate: they show one
/// line per series, so class labels on vLLM's families would split them
/// into one line per class. (source, panel id, refId).
const UNAGGREGATED: [(&str, &str, &str); 14] = [
    (PERFORMANCE, "1", "A"),
    (PERFORMANCE, "10", "A"),
    (PERFORMANCE, "15", "A"),
    (PERFORMANCE, "20", "A"),
    (PERFORMANCE, "20", "B"),
    (PROMETHEUS_GRAFANA, "5", "E"),
    (PROMETHEUS_GRAFANA, "8", "A"),
    (PROMETHEUS_GRAFANA, "8", "B"),
    (PROMETHEUS_GRAFANA, "9", "E"),
    (PROMETHEUS_GRAFANA, "10", "E"),
    (PROMETHEUS_GRAFANA, "14", "A"),
    (PROMETHEUS_GRAFANA, "15", "A"),
    (PROMETHEUS_GRAFANA, "15", "B"),
    (PROMETHEUS_GRAFANA, "16", "A"),
];
const PERFORMANCE: &str = "examples/observability/dashboards/grafana/performance_statistics.json";

/// The A/B run: one simulated trace, replayed without and with
/// `--attribute lora,priority` up to each of [`SNAPSHOTS`] points, the
/// expositions backfilled a [`SNAPSHOT_SECS`] apart into two Prometheus
/// servers.
const SNAPSHOTS: usize = 12;
const SNAPSHOT_SECS: u64 = 5;

/// Writes `side`'s snapshots as one OpenMetrics file with timestamps, each
/// family once (its samples in time order), as `promtool tsdb
/// create-blocks-from openmetrics` reads it.
fn backfill_file(expositions: &[String], first: u64) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: std::collections::HashMap<String, (Vec<String>, Vec<String>)> =
        std::collections::HashMap::new();
    for (k, text) in expositions.iter().enumerate() {
        let at = first + k as u64 * SNAPSHOT_SECS;
        let mut family = String::new();
        for line in text.lines().filter(|l| !l.is_empty() && *l != "# EOF") {
            if let Some(meta) = line.strip_prefix("# ") {
                family = meta.split(' ').nth(1).unwrap_or_default().to_owned();
                let entry = families.entry(family.clone()).or_insert_with(|| {
                    order.push(family.clone());
                    Default::default()
                });
                if !entry.0.iter().any(|h| h == line) {
                    entry.0.push(line.to_owned());
                }
            } else {
                let entry = families
                    .get_mut(&family)
                    .expect("a sample after its family");
                entry.1.push(format!("{line} {at}"));
            }
        }
    }
    let mut out = String::new();
    for family in &order {
        let (headers, samples) = &families[family];
        for line in headers.iter().chain(samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out + "# EOF\n"
}

/// A query's answer as label sets (JSON) to values.
fn answer_at(port: u16, promql: &str, time: u64) -> Result<Vec<(String, f64)>, String> {
    let data = prometheus_server::query_at(port, promql, time)?;
    let value = |v: &Value| {
        v.as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let mut out: Vec<(String, f64)> = match data["resultType"].as_str() {
        Some("scalar" | "string") => vec![(String::new(), value(&data["result"][1]))],
        _ => data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| (s["metric"].to_string(), value(&s["value"][1])))
            .collect(),
    };
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Equal label sets, and values equal but for the rounding of sums taken
/// in another order.
fn same_answer(a: &[(String, f64)], b: &[(String, f64)]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((la, va), (lb, vb))| {
            la == lb
                && ((va.is_nan() && vb.is_nan()) || (va - vb).abs() <= 1e-9 * va.abs().max(1.0))
        })
}

mod needs_prometheus_promtool {
    use super::*;

    /// Attribution on against off, as vLLM's dashboards show it: one
    /// simulated trace (three LoRA adapters, two priorities, preemptions)
    /// replayed without and with `--attribute lora,priority` up to each of
    /// twelve points, backfilled into two real Prometheus servers, and
    /// every published query evaluated on both at the last point. Every
    /// query answers the same, to the label set and the value (sums to
    /// rounding), the [`UNAGGREGATED`] ones included, which must have data:
    /// vLLM's families keep vLLM's labels alone with attribution on, the
    /// classes summed away at scrape time, and a class's series are
    /// `vllm_class:` families that no published query reads.
    #[test]
    fn vllm_published_dashboards_show_the_same_with_attribution_on_and_off() {
        let rows = queries();
        let dir = common::paths::tempdir("vllm-dashboards-ab");
        let trace = dir.join("trace.jsonl");
        let run = |args: &[&str]| {
            let out = Command::new(common::process::binary())
                .args(args)
                .output()
                .expect("the binary runs");
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).expect("UTF-8")
        };
        run(&[
            "simulate",
            "--seed",
            "5",
            "--duration",
            "60",
            "--rate",
            "3",
            "--models",
            "3",
            "--lora-adapters",
            "--priority-fraction",
            "0.3",
            "--kv-blocks",
            "256",
            "--record",
            trace.to_str().unwrap(),
        ]);
        let lines: Vec<String> = std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let first = now - 600;
        let last = first + (SNAPSHOTS as u64 - 1) * SNAPSHOT_SECS;
        let mut ports = Vec::new();
        let mut guards = Vec::new();
        for (side, attribute) in [("off", None), ("on", Some("lora,priority"))] {
            let expositions: Vec<String> = (1..=SNAPSHOTS)
                .map(|k| {
                    let prefix = dir.join(format!("prefix-{k}.jsonl"));
                    let end = lines.len() * k / SNAPSHOTS;
                    std::fs::write(&prefix, lines[..end].join("\n") + "\n").unwrap();
                    let mut args = vec![
                        "replay",
                        prefix.to_str().unwrap(),
                        "--output",
                        "openmetrics",
                        "--metrics-addr",
                        "none",
                    ];
                    args.extend(attribute.iter().flat_map(|a| ["--attribute", a]));
                    run(&args)
                })
                .collect();
            let side_dir = dir.join(side);
            std::fs::create_dir_all(&side_dir).unwrap();
            let file = side_dir.join("backfill.om");
            std::fs::write(&file, backfill_file(&expositions, first)).unwrap();
            let out = Command::new(common::environments::promtool())
                .args(["tsdb", "create-blocks-from", "openmetrics"])
                .arg(&file)
                .arg(side_dir.join("data"))
                .output()
                .expect("promtool runs");
            assert!(
                out.status.success(),
                "promtool: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let (guard, port) = prometheus_server::start(&side_dir, &[], None, &[]);
            guards.push(guard);
            ports.push(port);
        }

        let range_secs = (SNAPSHOTS as u64 - 1) * SNAPSHOT_SECS;
        let unaggregated = |q: &Query| {
            UNAGGREGATED
                .iter()
                .any(|(s, p, r)| q.source == *s && q.panel_id == *p && q.ref_id == *r)
        };
        let (mut same, mut empty, mut unaggregated_seen) = (0, 0, 0);
        let mut failures = Vec::new();
        for q in &rows {
            let promql = substitute(q, "sim-model-0", range_secs);
            let ask = |port: u16, promql: &str| {
                answer_at(port, promql, last).unwrap_or_else(|e| panic!("{e}\n  {promql}"))
            };
            let (off, on) = (ask(ports[0], &promql), ask(ports[1], &promql));
            if off.is_empty() && on.is_empty() {
                empty += 1;
                if unaggregated(q) {
                    failures.push(format!(
                        "{} {} {}: no data for a query that does not aggregate\n  {promql}",
                        q.source, q.panel_id, q.ref_id
                    ));
                }
            } else if same_answer(&off, &on) {
                same += 1;
                unaggregated_seen += usize::from(unaggregated(q));
            } else {
                failures.push(format!(
                    "{} panel {} {}: off {off:?}\n  on {on:?}\n  {promql}",
                    q.source, q.panel_id, q.ref_id
                ));
            }
        }
        eprintln!(
            "{same} queries answer the same on and off ({unaggregated_seen} of them do not \
             aggregate), {empty} empty on both"
        );
        assert!(
            failures.is_empty(),
            "{} queries:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert_eq!(unaggregated_seen, UNAGGREGATED.len());
        assert!(same >= 200, "only {same} queries with data answer the same");
        // The classes are there, beside vLLM's families.
        let classes = answer_at(
            ports[1],
            "sum by (lora_name, priority) (vllm_class:request_success_total)",
            last,
        )
        .unwrap();
        let total = answer_at(ports[0], "sum(vllm:request_success_total)", last).unwrap();
        assert!(classes.len() >= 4, "classes: {classes:?}");
        let summed: f64 = classes.iter().map(|(_, v)| v).sum();
        assert_eq!(Some(summed), total.first().map(|(_, v)| *v), "{classes:?}");
        drop(guards);
    }
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
