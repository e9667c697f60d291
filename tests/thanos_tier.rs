//! The scale-out tier into a distributed store that survives losing a node,
//! with real parts only:
//!
//! two simulators (`simulate --realtime`) → one agent Collector → two
//! gateway Collectors → a Thanos Receive hashring: a routing receiver that
//! writes every series to three ingesters (replication factor 3, write
//! quorum 2), read through `thanos query`, deduplicated on the ingesters'
//! `receive_replica` label (`common::thanos`).
//!
//! Mid-run one ingester is killed (SIGKILL); later it is started again on its
//! ports and TSDB. At the end:
//!
//! 1. For every label set, Thanos Query returns exactly the final values the
//!    simulators printed themselves (`--output prometheus`):
//!    `vllm:request_num_preemptions` buckets, count and sum,
//!    `vllm:num_preemptions_total` and `vllm:request_success_total` by
//!    reason.
//! 2. Over the outage, the deduplicated raw samples of every series follow
//!    one another without a missing export, and `rate()` has a value at every
//!    step.
//! 3. No ingester refused a sample as out of order.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod process;
    pub mod prometheus_server;
    pub mod thanos;
    pub mod tier;
}

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::thanos::{Hashring, REPLICA_LABEL};
use common::tier::{start_agent, Gateway};
use serde_json::Value;

/// The simulators' OTLP export interval.
const EXPORT_INTERVAL_MS: u64 = 1000;
/// Simulated (and, with `--realtime`, wall-clock) seconds of arrivals.
const DURATION_SECS: u64 = 30;
/// When the ingester is killed and started again, from the simulators' start.
const KILL_AT: Duration = Duration::from_secs(8);
const RESTART_AT: Duration = Duration::from_secs(18);
/// The families compared.
const FAMILIES: &str = "vllm:request_num_preemptions_bucket|vllm:request_num_preemptions_count|\
                        vllm:request_num_preemptions_sum|vllm:num_preemptions_total|vllm:request_success_total";

fn start_simulator(seed: u32, agent_grpc: u16) -> Child {
    Command::new(common::process::binary())
        .args(["simulate", "--realtime", "--seed", &seed.to_string()])
        .args(["--duration", &DURATION_SECS.to_string()])
        .args(["--rate", "12", "--engines", "2", "--kv-blocks", "48"])
        .args(["--prompt-len", "96", "--output-len", "48"])
        .args(["--output", "prometheus", "--metrics-addr", "none"])
        .args(["--otlp-endpoint", &format!("http://127.0.0.1:{agent_grpc}")])
        .args(["--otlp-protocol", "grpc"])
        .args(["--otlp-interval-ms", &EXPORT_INTERVAL_MS.to_string()])
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("service.instance.id=sim-{seed}"),
        )
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the simulator starts")
}

/// A sample's identity across the two sides: `instance`, name, and its
/// other labels but `job`, `tenant_id` (Thanos adds it), `gateway` (the
/// gateway a series came through) and `le` spelling.
fn key(instance: &str, name: &str, labels: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "__name__" | "job" | "instance" | "tenant_id" | "gateway"
            )
        })
        .map(|(k, v)| {
            let v = if k == "le" && v != "+Inf" {
                format!("{}", v.parse::<f64>().expect("numeric le"))
            } else {
                v.clone()
            };
            format!("{k}={v:?}")
        })
        .collect();
    format!("{instance} {name}{{{}}}", pairs.join(","))
}

/// What a simulator printed, as [`key`]s.
fn printed(instance: &str, exposition: &str) -> BTreeMap<String, f64> {
    let families: Vec<&str> = FAMILIES.split('|').collect();
    common::exposition::normalized_samples(exposition, &[])
        .into_iter()
        .filter_map(|(sample, value)| {
            let (name, rest) = sample.split_once('{')?;
            if !families.contains(&name) {
                return None;
            }
            let labels = rest
                .trim_end_matches('}')
                .split(',')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').expect("k=v");
                    (
                        k.to_owned(),
                        serde_json::from_str::<String>(v).expect("quoted value"),
                    )
                })
                .collect();
            Some((key(instance, name, &labels), value))
        })
        .collect()
}

fn labels_of(series: &Value) -> BTreeMap<String, String> {
    series["metric"]
        .as_object()
        .expect("labels")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// What Thanos Query returns now, deduplicated, as [`key`]s.
fn stored(query: u16) -> BTreeMap<String, f64> {
    let data = common::prometheus_server::query(query, &format!("{{__name__=~\"{FAMILIES}\"}}"))
        .unwrap_or_else(|e| panic!("Thanos query: {e}"));
    data["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|series| {
            let labels = labels_of(series);
            assert!(
                !labels.contains_key(REPLICA_LABEL),
                "deduplicated series keep no replica label: {labels:?}"
            );
            let value = series["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .expect("a value");
            (
                key(&labels["instance"], &labels["__name__"], &labels),
                value,
            )
        })
        .collect()
}

/// The widest spacing between consecutive raw samples of any series of
/// `vllm:num_preemptions_total` in the `window_secs` before `at`
/// (deduplicated), and how many series there were.
fn widest_spacing(query: u16, at: f64, window_secs: u64) -> (f64, usize) {
    let path = format!(
        "/api/v1/query?query={}&time={at}",
        common::prometheus_server::url_encode(&format!(
            "vllm:num_preemptions_total[{window_secs}s]"
        ))
    );
    let (status, body) = common::http::get(query, &path).expect("Thanos query answers");
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).expect("JSON");
    let series = json["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut widest = 0.0f64;
    for s in &series {
        let times: Vec<f64> = s["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v[0].as_f64().unwrap())
            .collect();
        for pair in times.windows(2) {
            widest = widest.max(pair[1] - pair[0]);
        }
    }
    (widest, series.len())
}

/// Steps of a `rate()` range query over `[start, end]` with no value, for
/// any series.
fn rate_steps_missing(query: u16, start: f64, end: f64) -> usize {
    let path = format!(
        "/api/v1/query_range?query={}&start={start}&end={end}&step=1",
        common::prometheus_server::url_encode("rate(vllm:num_preemptions_total[5s])")
    );
    let (status, body) = common::http::get(query, &path).expect("Thanos query answers");
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).expect("JSON");
    let expected = (end - start) as usize + 1;
    json["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| expected.saturating_sub(s["values"].as_array().unwrap().len()))
        .sum()
}

/// Samples each ingester appended, and what any of them or the router
/// refused: out-of-order or out-of-bounds samples, or remote writes answered
/// 409 (conflict: out of order) or with a server error.
fn ingested_and_refused(hashring: &Hashring) -> (Vec<f64>, Vec<String>) {
    let mut appended = Vec::new();
    let mut refused = Vec::new();
    for ingester in &hashring.ingesters {
        let text = ingester.metrics().expect("an ingester's metrics");
        appended.push(common::exposition::sum_of(
            &text,
            "prometheus_tsdb_head_samples_appended_total",
        ));
        for name in [
            "prometheus_tsdb_out_of_order_samples_total",
            "prometheus_tsdb_out_of_bound_samples_total",
        ] {
            let value = common::exposition::sum_of(&text, name);
            if value != 0.0 {
                refused.push(format!("{}: {name} {value}", ingester.name));
            }
        }
    }
    let router = hashring.router_metrics().expect("the router's metrics");
    for (key, value) in common::exposition::samples(&router) {
        let refusal = key.starts_with("http_requests_total{")
            && key.contains("handler=\"receive\"")
            && (key.contains("code=\"409\"") || key.contains("code=\"5"));
        if refusal && value != 0.0 {
            refused.push(format!("router: {key} {value}"));
        }
    }
    (appended, refused)
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

mod needs_collector_thanos {
    use super::*;

    #[test]
    fn a_killed_thanos_ingester_loses_no_final_count() {
        let dir = common::paths::tempdir("thanos-tier");
        let mut hashring = Hashring::start(&dir);
        let mut gateways = [Gateway::on_free_ports("a"), Gateway::on_free_ports("b")];
        for gateway in &mut gateways {
            gateway.start(&dir, &hashring.remote_write);
        }
        let agent_grpc = common::http::free_port();
        let _agent = start_agent(&dir, agent_grpc, &gateways);

        let started = Instant::now();
        let simulators: Vec<(String, Child)> = [1, 2]
            .into_iter()
            .map(|seed| (format!("sim-{seed}"), start_simulator(seed, agent_grpc)))
            .collect();

        std::thread::sleep(KILL_AT.saturating_sub(started.elapsed()));
        hashring.ingesters[1].kill();
        let killed_at = now();
        std::thread::sleep(RESTART_AT.saturating_sub(started.elapsed()));
        let restarted_at = now();
        hashring.ingesters[1].start(&dir);

        let mut expected = BTreeMap::new();
        for (instance, simulator) in simulators {
            let output = simulator.wait_with_output().expect("the simulator runs");
            assert!(
                output.status.success(),
                "{instance} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            expected.extend(printed(
                &instance,
                &String::from_utf8(output.stdout).unwrap(),
            ));
        }
        let ran_for = started.elapsed();
        assert!(
            expected
                .keys()
                .any(|k| k.contains("vllm:num_preemptions_total")),
            "the simulators printed the families compared"
        );
        let preempted: f64 = expected
            .iter()
            .filter(|(k, _)| k.contains("vllm:num_preemptions_total"))
            .map(|(_, v)| v)
            .sum();
        assert!(preempted > 0.0, "the runs preempt");

        // 1. Exactly the printed values, for every label set.
        let mut last = BTreeMap::new();
        let exact = common::process::wait_for_optional(60, || {
            last = stored(hashring.query);
            (last == expected).then_some(())
        });
        let differing: Vec<String> = expected
            .iter()
            .filter(|(k, v)| last.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}: printed {v}, stored {:?}", last.get(k)))
            .collect();
        let stored_only: Vec<&String> =
            last.keys().filter(|k| !expected.contains_key(*k)).collect();
        assert!(
            exact.is_some(),
            "{} of {} samples differ; first: {:#?}\nstored only, first: {:#?}\n{}",
            differing.len(),
            expected.len(),
            &differing[..differing.len().min(8)],
            &stored_only[..stored_only.len().min(4)],
            hashring.logs()
        );

        // 2. No export missing over the outage, deduplicated.
        let window = (now() - killed_at + 5.0) as u64;
        let (widest, series) = widest_spacing(hashring.query, now(), window);
        assert!(series > 0, "raw samples over the outage");
        assert!(
            widest < 2.0 * EXPORT_INTERVAL_MS as f64 / 1000.0,
            "a gap of {widest} s between two samples of one series over the outage \
         (the export interval is {EXPORT_INTERVAL_MS} ms)"
        );
        let missing = rate_steps_missing(hashring.query, killed_at.ceil(), restarted_at.floor());
        assert_eq!(missing, 0, "rate() steps without a value during the outage");

        // 3. In order: nothing refused; every ingester stored samples (r1 fewer:
        // it missed the outage).
        let (appended, refused) = ingested_and_refused(&hashring);
        assert!(refused.is_empty(), "refused: {refused:?}");
        assert!(
            appended.iter().all(|n| *n > 0.0),
            "samples appended: {appended:?}"
        );

        eprintln!(
        "thanos tier: {} samples of {} label sets compared, 0 differ; {preempted} preemptions; \
         ingester r1 down {:.1} s; widest spacing over the outage {widest:.2} s in {series} series; \
         samples appended by r0, r1, r2: {appended:?}; run {ran_for:?}",
        expected.len(),
        expected
            .keys()
            .filter(|k| k.contains("vllm:request_num_preemptions_count"))
            .count(),
        restarted_at - killed_at,
    );
    }
}
