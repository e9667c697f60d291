//! vLLM's own `PrometheusStatLogger` and the plugin (`python/`), fed the
//! same vLLM 0.33.0 stats objects by `tests/vllm/oracle.py`, give the same
//! samples.
//!
//! The Python environment comes from `scripts/vllm-env.sh` (the test command
//! runs it first and passes its python in `VLLM_OTEL_METRICS_PYTHON`; without
//! it the test runs the script itself, which needs PyPI).

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod plugin;
    pub mod process;
    pub mod serve;
}

use common::exposition::ONLY_VLLM;
use common::plugin::{run_oracle, simulated_trace, strings, MAX_MODEL_LEN};
use common::process::serial;
use common::serve::Server;

/// With the MultiConnector configured, the families only vLLM's logger has
/// besides [`ONLY_VLLM`]: the OffloadingConnector's deprecated transfer
/// metrics (labelled by `transfer_type`, kept by vLLM beside the flat
/// `vllm:kv_offload_load_*`/`store_*` families the catalog carries), whose
/// series vLLM creates at 0 for every engine when the connector starts.
/// The catalog has no family for them (docs/SEMANTICS.md §4b).
const ONLY_VLLM_KV_CONNECTOR: &[&str] = &[
    "vllm:kv_offload_size",
    "vllm:kv_offload_total_bytes",
    "vllm:kv_offload_total_time",
];

/// The families only the sidecar has: made from records vLLM's logger never
/// gets in these runs (none: the plugin feeds what vLLM's logger reads).
const ONLY_OURS: &[&str] = &[];

mod needs_vllm {
    use super::*;

    /// vLLM's `PrometheusStatLogger` and the plugin, fed the same vLLM stats
    /// objects, give the same value for every sample of every shared family.
    #[test]
    fn vllm_logger_and_plugin_agree_on_every_sample() {
        let _serial = serial();
        let dir = common::paths::tempdir("vllm-plugin-oracle");
        let simulated = simulated_trace(&dir);
        let data = common::paths::repo().join("tests/data");
        // (trace, model, a KV connector configured). generated-seed14 carries
        // all three connectors' stats: llama-3.1-8b's engine 0 the
        // OffloadingConnector's (with stores_skipped), its engine 10 all three;
        // qwen's engine 2 NIXL's and the simple connector's, with KV-fetch stages.
        let cases = [
            (simulated, "sim-model-0", false),
            (data.join("generated-seed11.jsonl"), "llama-3.1-8b", false),
            (
                data.join("generated-seed11.jsonl"),
                "qwen/Qwen2.5-7B-Instruct",
                false,
            ),
            (data.join("generated-seed12.jsonl"), "llama-3.1-8b", false),
            (data.join("generated-seed13.jsonl"), "llama-3.1-8b", false),
            (data.join("generated-seed14.jsonl"), "llama-3.1-8b", true),
            (
                data.join("generated-seed14.jsonl"),
                "qwen/Qwen2.5-7B-Instruct",
                true,
            ),
        ];
        let mut summary = Vec::new();
        for (trace, model, kv_connector) in cases {
            let server = Server::start(&[
                "--token-buckets",
                "python",
                "--max-model-len",
                MAX_MODEL_LEN,
            ]);
            let name = trace.file_name().unwrap().to_string_lossy().into_owned();
            let report = run_oracle(&server, &trace, model, kv_connector, &dir);
            let differing = report["differing_samples"].as_array().expect("a list");
            assert!(
                differing.is_empty(),
                "{name} ({model}): {} samples differ, first ones:\n{}",
                differing.len(),
                serde_json::to_string_pretty(&differing[..differing.len().min(20)]).unwrap()
            );
            let mut only_vllm = ONLY_VLLM.to_vec();
            if kv_connector {
                only_vllm.extend(ONLY_VLLM_KV_CONNECTOR);
                only_vllm.sort_unstable();
            }
            assert_eq!(strings(&report["only_vllm"]), only_vllm, "{name} ({model})");
            assert_eq!(strings(&report["only_ours"]), ONLY_OURS, "{name} ({model})");
            assert_eq!(report["plugin_dropped"], 0, "{name} ({model})");
            let finished = report["finished_requests"].as_u64().unwrap();
            assert!(finished > 0, "{name} ({model}): no request finished");
            assert!(
                strings(&report["plugin_factories"])
                    .contains(&"vllm_otel_metrics.plugin.OtelMetricsStatLogger".to_owned()),
                "vLLM's loader did not find the plugin: {}",
                report["plugin_factories"]
            );
            let connector = if kv_connector { ", MultiConnector" } else { "" };
            summary.push(format!(
            "{name} ({model}{connector}): {} steps, {finished} finished requests, {} shared families, {} samples, 0 differ",
            report["steps"],
            report["shared_families"].as_array().unwrap().len(),
            report["shared_samples"],
        ));
        }
        eprintln!("{}", summary.join("\n"));
    }
}
