//! `scheduler_stats.kv_connector_stats` (docs/SEMANTICS.md §4b): vLLM's
//! NIXL and CPU-offloading families from one step's connector stats, read
//! back through the Prometheus bridge sample by sample; invalid stats are
//! refused whole and located; the gRPC form carries the same content.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
    pub mod paths;
    pub mod process;
}

use std::collections::BTreeMap;

use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::sources::ingest::proto::{record_from_proto, record_to_proto};
use vllm_otel_metrics::tracker::Tracker;

fn stats_line(kv: &str) -> String {
    format!(
        r#"{{"type":"scheduler_stats","model_name":"m","engine":3,"num_running_reqs":1,"num_waiting_reqs":0,"kv_cache_usage":0.5,"prefix_cache_queries":0,"prefix_cache_hits":0,"kv_connector_stats":{kv}}}"#
    )
}

/// The connector families' samples (no other family's) after `lines`.
fn connector_samples(lines: &[String]) -> BTreeMap<String, f64> {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
    for line in lines {
        let record: Record = serde_json::from_str(line).unwrap();
        assert_eq!(tracker.apply(&record), vec![], "{line}");
    }
    common::exposition::samples(&bridge.encode(Format::Text))
        .into_iter()
        .filter(|(k, _)| {
            ["vllm:nixl_", "vllm:kv_offload_", "vllm:simple_kv_offload_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .filter(|(k, _)| !k.contains("_bucket"))
        .collect()
}

fn expected(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs
        .iter()
        .map(|(k, v)| {
            let (name, rest) = k.split_once('{').unwrap_or((k, "}"));
            let labels = rest.trim_end_matches('}');
            let sep = if labels.is_empty() { "" } else { "," };
            (
                format!(r#"{name}{{model_name="m",engine="3"{sep}{labels}}}"#),
                *v,
            )
        })
        .collect()
}

#[test]
fn nixl_stats_observe_each_transfer_and_count_failures_as_vllm_does() {
    let samples = connector_samples(&[
        stats_line(
            r#"{"nixl":{"transfer_duration":[0.02,0.3],"post_duration":[0.001,0.002],"bytes_transferred":[3000000,1024],"num_descriptors":[40,7],"num_failed_transfers":1,"num_failed_handshakes":2,"num_failed_notifications":3}}"#,
        ),
        stats_line(r#"{"nixl":{"num_kv_expired_reqs":4,"num_notifications_after_expiry":5}}"#),
    ]);
    assert_eq!(
        samples,
        expected(&[
            ("vllm:nixl_xfer_time_seconds_sum", 0.32),
            ("vllm:nixl_xfer_time_seconds_count", 2.0),
            ("vllm:nixl_post_time_seconds_sum", 0.003),
            ("vllm:nixl_post_time_seconds_count", 2.0),
            ("vllm:nixl_bytes_transferred_sum", 3001024.0),
            ("vllm:nixl_bytes_transferred_count", 2.0),
            ("vllm:nixl_num_descriptors_sum", 47.0),
            ("vllm:nixl_num_descriptors_count", 2.0),
            // Transfers, handshakes and notifications; notifications again.
            ("vllm:nixl_num_failed_transfers_total", 6.0),
            ("vllm:nixl_num_failed_notifications_total", 3.0),
            ("vllm:nixl_num_kv_expired_reqs_total", 4.0),
            ("vllm:nixl_num_notifications_after_expiry_total", 5.0),
        ])
    );
}

/// A label set's first NIXL stats create all eight NIXL series, at 0.
#[test]
fn the_first_nixl_stats_create_every_nixl_series() {
    let samples = connector_samples(&[stats_line(r#"{"nixl":{}}"#)]);
    let mut zero = Vec::new();
    for histogram in [
        "xfer_time_seconds",
        "post_time_seconds",
        "bytes_transferred",
        "num_descriptors",
    ] {
        zero.push(format!("vllm:nixl_{histogram}_sum"));
        zero.push(format!("vllm:nixl_{histogram}_count"));
    }
    for counter in [
        "num_failed_transfers",
        "num_failed_notifications",
        "num_kv_expired_reqs",
        "num_notifications_after_expiry",
    ] {
        zero.push(format!("vllm:nixl_{counter}_total"));
    }
    let pairs: Vec<(&str, f64)> = zero.iter().map(|k| (k.as_str(), 0.0)).collect();
    assert_eq!(samples, expected(&pairs));
}

#[test]
fn offloading_stats_add_set_and_observe_each_series_from_its_first_value() {
    let samples = connector_samples(&[
        stats_line(
            r#"{"offloading":{"load_bytes":5000000,"load_time":0.25,"load_sizes":[5000000],"store_bytes":0,"lookup_sync_delays":[0.00002,0.3],"cpu_cache_usage":0.4,"cpu_cache_write_usage":0.1,"cpu_cache_read_usage":0.3}}"#,
        ),
        stats_line(
            r#"{"offloading":{"load_bytes":1000000,"load_time":0.5,"load_sizes":[1000000],"allocation_failures":2,"lookup_async_delays":[],"cpu_cache_usage":0.2}}"#,
        ),
    ]);
    assert_eq!(
        samples,
        expected(&[
            ("vllm:kv_offload_load_bytes_total", 6000000.0),
            ("vllm:kv_offload_load_time_total", 0.75),
            ("vllm:kv_offload_load_size_sum", 6000000.0),
            ("vllm:kv_offload_load_size_count", 2.0),
            // Present at 0: the series exists.
            ("vllm:kv_offload_store_bytes_total", 0.0),
            ("vllm:kv_offload_lookup_sync_delay_seconds_sum", 0.30002),
            ("vllm:kv_offload_lookup_sync_delay_seconds_count", 2.0),
            ("vllm:kv_offload_lookup_async_delay_seconds_sum", 0.0),
            ("vllm:kv_offload_lookup_async_delay_seconds_count", 0.0),
            ("vllm:kv_offload_allocation_failure_total", 2.0),
            ("vllm:kv_offload_cpu_cache_usage_perc", 0.2),
            ("vllm:kv_offload_cpu_cache_write_usage_perc", 0.1),
            ("vllm:kv_offload_cpu_cache_read_usage_perc", 0.3),
        ])
    );
}

#[test]
fn simple_cpu_offload_stats_count_outcomes_and_set_the_pool_gauges() {
    let samples = connector_samples(&[
        stats_line(
            r#"{"simple_cpu_offload":{"save_outcomes":{"stored":3,"dropped_cpu_full":1},"load_blocks":8,"used_blocks":12,"pending_store_blocks":4}}"#,
        ),
        stats_line(
            r#"{"simple_cpu_offload":{"save_outcomes":{"stored":2,"skipped_in_flight":0},"used_blocks":9}}"#,
        ),
    ]);
    assert_eq!(
        samples,
        expected(&[
            (
                r#"vllm:simple_kv_offload_save_outcomes_total{outcome="stored"}"#,
                5.0
            ),
            (
                r#"vllm:simple_kv_offload_save_outcomes_total{outcome="dropped_cpu_full"}"#,
                1.0
            ),
            (
                r#"vllm:simple_kv_offload_save_outcomes_total{outcome="skipped_in_flight"}"#,
                0.0
            ),
            ("vllm:simple_kv_offload_load_blocks_total", 8.0),
            ("vllm:simple_kv_offload_used_blocks", 9.0),
            ("vllm:simple_kv_offload_pending_store_blocks", 4.0),
        ])
    );
}

/// Bad connector stats make the line invalid, located, and everything
/// around it is applied.
#[test]
fn invalid_connector_stats_are_located_and_change_nothing() {
    let lines = [
        stats_line(r#"{"nixl":{"transfer_duration":[0.1]}}"#),
        stats_line(r#"{"offloading":{"cpu_cache_usage":1.5}}"#),
        stats_line(r#"{"simple_cpu_offload":{"save_outcomes":{"stoored":3}}}"#),
        stats_line(r#"{"nixl":{"transfer_duration":[-0.1]}}"#),
        stats_line(r#"{"nixl":{"num_failed_transfers":1.0}}"#),
        stats_line(r#"{"lmcache":{}}"#),
        stats_line(r#"{"nixl":{"transfer_duration":[0.2]}}"#),
    ];
    let dir = common::paths::tempdir("kv-connector");
    let trace = dir.join("trace.jsonl");
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let (code, stdout, stderr) = common::process::replay(&trace);
    let file = trace.to_str().unwrap();
    let expected_stderr = [
        "2: invalid scheduler_stats record: kv_connector_stats.offloading.cpu_cache_usage is not between 0 and 1 (1.5)",
        "3: invalid record: unknown field `stoored`, expected one of `stored`, `dropped_cpu_full`, `dropped_request_gone`, `dropped_null_block`, `dropped_not_hashed`, `skipped_already_cached`, `skipped_in_flight` (column 234)",
        "4: invalid scheduler_stats record: kv_connector_stats.nixl.transfer_duration is not a finite non-negative number (-0.1)",
        "5: invalid record: invalid type: floating point `1.0`, expected u64 (column 220)",
        "6: invalid record: unknown field `lmcache`, expected one of `nixl`, `offloading`, `simple_cpu_offload` (column 195)",
    ]
    .iter()
    .map(|line| format!("{file}:{line}\n"))
    .chain([format!("{file}: 5 invalid line(s) skipped\n")])
    .collect::<String>();
    assert_eq!((code, stderr), (2, expected_stderr));
    let samples = common::exposition::samples(&stdout);
    let key = r#"vllm:nixl_xfer_time_seconds_count{model_name="m",engine="3"}"#;
    assert_eq!(samples[key], 2.0, "lines 1 and 7 applied");
    std::fs::remove_dir_all(dir).ok();
}

/// The gRPC form carries the same stats, presence included.
#[test]
fn connector_stats_cross_the_wire_unchanged() {
    let line = stats_line(
        r#"{"nixl":{"transfer_duration":[],"num_failed_handshakes":0},"offloading":{"load_time":0.5,"store_sizes":[1.0,2.0],"cpu_cache_read_usage":0.0},"simple_cpu_offload":{"save_outcomes":{"dropped_not_hashed":2},"pending_store_blocks":0}}"#,
    );
    let record: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(
        record_from_proto(record_to_proto(&record), 0.0),
        Ok(record.clone())
    );
    assert_eq!(serde_json::to_string(&record).unwrap(), line);
}
