//! Every catalog family has a path from some record: fed the simulator's
//! records (every feature on), the fields and records it does not produce
//! and inputs the tracker refuses or evicts, each family shows a non-zero
//! sample at some point.
//! A family added to the catalog with no record field feeding it, or whose
//! tracker code is never reached, fails here by name.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod paths;
    pub mod proto_fields;
}

use std::collections::BTreeSet;

use serde_json::json;
use vllm_otel_metrics::catalog;
use vllm_otel_metrics::export::prometheus::{Family, PrometheusBridge, Value};
use vllm_otel_metrics::instruments::{Instruments, Slo};
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::sources::sim::{simulate, KvOffloadConnector, SimConfig};
use vllm_otel_metrics::tracker::Tracker;

/// A scheduler snapshot with every number the proto declares for it set
/// (a field the simulator does not produce included), and the KV-connector
/// counts the simulator leaves at zero.
fn every_scheduler_number() -> String {
    let given = json!({
        "type": "scheduler_stats", "model_name": "m", "engine": 0,
        "kv_connector_stats": {
            "nixl": {"num_failed_notifications": 1, "num_kv_expired_reqs": 1, "num_notifications_after_expiry": 1},
            "offloading": {"stores_skipped": 3},
        },
    });
    common::proto_fields::every_number("SchedulerStats", given).to_string()
}

/// What the simulator does not produce: the plugin's records (vLLM's Python
/// logger path) and records the tracker counts instead of applying.
const MORE_RECORDS: &str = r#"{"type":"iteration_stats","model_name":"m","engine":0,"received_at":1700000000.5,"num_generation_tokens":12,"prompt_token_stats":{"computed":100,"local_cache_hit":16,"external_kv_transfer":0,"cached_tokens":16,"total":116},"num_preempted_reqs":1,"max_num_generation_tokens_iter":[30],"n_params_iter":[1],"time_to_first_tokens_iter":[0.25],"inter_token_latencies_iter":[0.02,0.03],"finished_requests":[{"request_id":"r1","finish_reason":"stop","e2e_latency":1.5,"queued_time":0.1,"prefill_time":0.2,"inference_time":1.3,"decode_time":1.1,"mean_time_per_output_token":0.04,"num_prompt_tokens":116,"num_generation_tokens":30,"num_preemptions":1,"num_cached_tokens":16,"max_tokens_param":64}]}
{"type":"plugin_drops","dropped":5}
{"type":"abort","request_id":"never-started","received_at":1700000001.0}
{"type":"request","request_id":"evicted","model_name":"m","engine":0,"arrival_time":1700000001.0,"prompt_len":4}"#;

/// Whether any series of `family` is non-zero.
fn fed(family: &Family) -> bool {
    family.series.iter().any(|series| match &series.value {
        Value::Scalar(value) => *value != 0.0,
        Value::Histogram { count, .. } => *count > 0,
    })
}

/// Every feature of the simulator on: two models on two engines, priority
/// scheduling, aborts, LoRA, speculative decoding, external prefix hits, KV
/// residency sampling, sleep mode, weight updates, CPU offload and NIXL.
fn every_feature(connector: KvOffloadConnector) -> SimConfig {
    let mut config = SimConfig::default();
    config.duration = 30.0;
    config.rate = 30.0;
    config.engines = 2;
    config.models = 2;
    config.kv_blocks = 400;
    config.abort_rate = 0.1;
    config.priority_fraction = 0.3;
    config.lora_adapters = true;
    config.num_speculative_tokens = 3;
    config.external_prefix_hit_rate = 0.3;
    config.kv_load_gbps = 10.0;
    config.kv_cache_metrics_sample = 0.5;
    config.sleep_when_idle = Some(1.0);
    config.weight_update_interval = Some(5.0);
    config.kv_offload_blocks = 200;
    config.kv_offload_connector = connector;
    config.nixl = true;
    config.nixl_failure_rate = 0.1;
    config
}

#[test]
fn every_family_has_a_path_from_some_record() {
    let (bridge, reader) = PrometheusBridge::builder().build();
    // With an SLO, so that its families are made and fed too.
    let slo = Slo::from_json(r#"{"ttft": 5, "tpot": 0.5}"#).unwrap();
    let mut tracker = Tracker::new(
        Instruments::builder()
            .with_slo(slo)
            .with_reader(reader)
            .build(),
    )
    .with_start_order();
    let mut seen = BTreeSet::new();
    let mut look = |bridge: &PrometheusBridge| {
        for family in bridge.snapshot() {
            if fed(&family) {
                seen.insert(family.name.to_string());
            }
        }
    };
    for connector in [KvOffloadConnector::Offloading, KvOffloadConnector::Simple] {
        let mut applied = 0u64;
        simulate(
            &every_feature(connector),
            &mut |record: &Record| {
                tracker.apply(record);
                applied += 1;
                // Gauges move back to zero: look at them along the way.
                if applied.is_multiple_of(250) {
                    look(&bridge);
                }
            },
            &mut |_| {},
        );
        look(&bridge);
    }
    for line in [every_scheduler_number()]
        .iter()
        .map(String::as_str)
        .chain(MORE_RECORDS.lines())
    {
        let record: Record = serde_json::from_str(line).unwrap();
        let refused = tracker.apply(&record);
        assert_eq!(
            refused.is_empty(),
            !line.contains("never-started"),
            "{line}"
        );
    }
    assert_eq!(tracker.evict_oldest(0, 1_700_000_002.0), 1);
    look(&bridge);
    let unfed: Vec<&str> = catalog::all()
        .map(|def| def.vllm_name)
        .filter(|name| !seen.contains(*name))
        .collect();
    assert_eq!(unfed, Vec::<&str>::new(), "families no record reached");
}
