//! `replay` end to end: checked-in traces against golden expositions, the
//! golden values against an independent implementation of the spec, bad
//! lines located and harmless, and random traces against the same reference.
//!
//! How the golden files' values were derived independently: each
//! `tests/data/NAME.prom` is compared sample by sample (every `vllm:` sample,
//! value, label set, HELP text and `le` string) with the exposition of
//! `tests/reference/reference.py`, a separate Python implementation of
//! docs/SEMANTICS.md §3-§4 written from the document alone, sharing no code with `src/`
//! (`golden_files_agree_with_the_independent_reference`). The byte-for-byte
//! golden comparison then pins formatting, ordering and self-telemetry.
//! `lifecycle.jsonl` is hand-written to hit every rule; the `generated-*`
//! traces come from `tests/reference/gen_trace.py` (seeds 11 and 12 before
//! the engine tier existed, 13 with its records, 14 also with KV-connector
//! stats of all three connector kinds: `--kv-connectors`). All but 14 are
//! from before it stopped sending `prefill_stats` again on a re-admission
//! after a decode preemption: they still carry those, which the tracker
//! counts as given.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod paths;
    pub mod process;
}

use std::path::{Path, PathBuf};
use std::process::Command;

const TRACES: [&str; 5] = [
    "lifecycle",
    "generated-seed11",
    "generated-seed12",
    "generated-seed13",
    "generated-seed14",
];

fn data(name: &str, ext: &str) -> PathBuf {
    common::paths::repo()
        .join("tests/data")
        .join(format!("{name}.{ext}"))
}

fn invalid_lines(name: &str) -> Vec<usize> {
    std::fs::read_to_string(data(name, "invalid"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().expect("a line number"))
        .collect()
}

fn python() -> PathBuf {
    common::environments::require_tool("python3", "install Python 3 (apt-get install -y python3)")
}

/// Runs `tests/reference/reference.py` on `trace`; returns its exposition.
fn reference_exposition(trace: &Path) -> String {
    reference_exposition_with(trace, &[])
}

/// [`reference_exposition`] with further arguments.
fn reference_exposition_with(trace: &Path, args: &[&str]) -> String {
    let output = Command::new(python())
        .arg(common::paths::repo().join("tests/reference/reference.py"))
        .arg(trace)
        .arg("--quiet")
        .args(args)
        .output()
        .expect("reference.py runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `compare.py EXPECTED ACTUAL` on two expositions; panics with its report on a difference.
fn assert_same_vllm_samples(expected: &str, actual: &str, what: &str) {
    let dir = common::paths::tempdir("replay");
    let (e, a) = (dir.join("expected.prom"), dir.join("actual.prom"));
    std::fs::write(&e, expected).unwrap();
    std::fs::write(&a, actual).unwrap();
    let output = Command::new(python())
        .arg(common::paths::repo().join("tests/reference/compare.py"))
        .args([&e, &a])
        .output()
        .expect("compare.py runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what}: expositions differ:\n{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        report.contains(" samples compared, 0 differences"),
        "{report}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn replay_prints_the_golden_exposition() {
    for name in TRACES {
        let trace = data(name, "jsonl");
        let (code, stdout, stderr) = common::process::replay(&trace);
        let golden = std::fs::read_to_string(data(name, "prom")).unwrap();
        assert!(
            stdout == golden,
            "{name}: exposition differs from tests/data/{name}.prom"
        );
        let invalid = invalid_lines(name);
        assert_eq!(
            code,
            if invalid.is_empty() { 0 } else { 2 },
            "{name}: {stderr}"
        );
        // Every bad line is located as FILE:LINE, and no other line is blamed.
        let blamed: Vec<usize> = stderr
            .lines()
            .filter(|l| l.contains(": invalid "))
            .map(|l| {
                let rest = l
                    .strip_prefix(trace.to_str().unwrap())
                    .expect("FILE: prefix");
                rest[1..].split(':').next().unwrap().parse().expect("LINE")
            })
            .collect();
        assert_eq!(blamed, invalid, "{name}: {stderr}");
    }
}

#[test]
fn golden_files_agree_with_the_independent_reference() {
    for name in TRACES {
        let golden = std::fs::read_to_string(data(name, "prom")).unwrap();
        let reference = reference_exposition(&data(name, "jsonl"));
        assert_same_vllm_samples(&reference, &golden, name);
    }
}

/// `--semconv gen_ai` records the GenAI streams for OTLP only: the
/// exposition stays the golden one byte for byte. With
/// `--semconv-prometheus` they follow vLLM's families, and agree sample for
/// sample with the reference's (`gen_ai_` samples included), server
/// attributes too.
#[test]
fn semconv_streams_leave_the_goldens_alone_and_agree_with_the_reference() {
    for name in TRACES {
        let trace = data(name, "jsonl");
        let golden = std::fs::read_to_string(data(name, "prom")).unwrap();
        let (_, recorded, _) = common::process::replay_with(&trace, &["--semconv", "gen_ai"]);
        assert!(
            recorded == golden,
            "{name}: --semconv gen_ai changed the exposition"
        );
        let server = [
            "--semconv-server-address",
            "10.0.0.7",
            "--semconv-server-port",
            "8000",
        ];
        let (_, exposed, _) = common::process::replay_with(
            &trace,
            &[
                &["--semconv", "gen_ai", "--semconv-prometheus"][..],
                &server,
            ]
            .concat(),
        );
        // vLLM's families first, unchanged.
        let (vllm_part, semconv_part) = exposed
            .split_once("# HELP gen_ai_server_request_duration_seconds ")
            .expect("the semconv families follow");
        assert!(
            vllm_part == golden,
            "{name}: the golden exposition, then the semconv families"
        );
        assert!(semconv_part.contains("server_port=\"8000\""), "{name}");
        let reference =
            reference_exposition_with(&trace, &[&["--semconv", "gen_ai"][..], &server].concat());
        assert_same_vllm_samples(&reference, &exposed, name);
    }
}

#[test]
fn malformed_lines_lose_nothing_around_them() {
    let name = "generated-seed11";
    let bad = invalid_lines(name);
    assert!(!bad.is_empty());
    let trace = std::fs::read_to_string(data(name, "jsonl")).unwrap();
    let clean: String = trace
        .lines()
        .enumerate()
        .filter(|(i, _)| !bad.contains(&(i + 1)))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let dir = common::paths::tempdir("replay");
    let clean_path = dir.join("clean.jsonl");
    std::fs::write(&clean_path, clean).unwrap();
    let (code, with_clean, _) = common::process::replay(&clean_path);
    assert_eq!(code, 0);
    let (code, with_bad, _) = common::process::replay(&data(name, "jsonl"));
    assert_eq!(code, 2);
    let vllm_only = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.contains("vllm_otel_metrics_"))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    assert_eq!(vllm_only(&with_bad), vllm_only(&with_clean));
    assert!(with_bad.contains(&format!(
        "vllm_otel_metrics_rejected_inputs_total{{reason=\"invalid_record\"}} {}\n",
        bad.len()
    )));
    std::fs::remove_dir_all(dir).ok();
}

/// Fresh random traces (other seeds, more label sets, malformed lines) agree
/// with the reference sample by sample.
#[test]
fn random_traces_agree_with_the_reference() {
    let dir = common::paths::tempdir("replay");
    for (seed, models, engines) in [(21, 1, 1), (22, 2, 4), (23, 4, 3), (24, 3, 2)] {
        let trace = dir.join(format!("seed{seed}.jsonl"));
        let output = Command::new(python())
            .arg(common::paths::repo().join("tests/reference/gen_trace.py"))
            .args(["--seed", &seed.to_string(), "--requests", "150"])
            .args([
                "--models",
                &models.to_string(),
                "--engines",
                &engines.to_string(),
            ])
            .args(["--malformed", "4"])
            .output()
            .expect("gen_trace.py runs");
        assert!(output.status.success());
        std::fs::write(&trace, output.stdout).unwrap();
        let (code, ours, stderr) = common::process::replay(&trace);
        assert_eq!(code, 2, "{stderr}");
        assert_same_vllm_samples(
            &reference_exposition(&trace),
            &ours,
            &format!("seed {seed}"),
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn stdin_replay_equals_file_replay_and_openmetrics_ends_with_eof() {
    use std::io::Write;
    use std::process::Stdio;
    let trace = data("generated-seed12", "jsonl");
    let mut child = Command::new(common::process::binary())
        .args([
            "replay",
            "-",
            "--output",
            "prometheus",
            "--metrics-addr",
            "none",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bytes = std::fs::read(&trace).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || stdin.write_all(&bytes).unwrap());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let golden = std::fs::read_to_string(data("generated-seed12", "prom")).unwrap();
    assert!(String::from_utf8(output.stdout).unwrap() == golden);

    let (code, open, _) = common::process::run(&[
        "replay",
        trace.to_str().unwrap(),
        "--output",
        "openmetrics",
        "--metrics-addr",
        "none",
    ]);
    assert_eq!(code, 0);
    assert!(open.ends_with("# EOF\n"));
    assert!(open.contains("# TYPE vllm:request_num_preemptions histogram\n"));
}

#[test]
fn unreadable_trace_is_an_error_naming_the_file() {
    let (code, stdout, stderr) = common::process::run(&[
        "replay",
        "/nonexistent/trace.jsonl",
        "--metrics-addr",
        "none",
    ]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("error: cannot open /nonexistent/trace.jsonl: "),
        "{stderr}"
    );
}

#[test]
fn bad_metrics_addr_is_a_usage_error() {
    let (code, _, stderr) = common::process::run(&["replay", "-", "--metrics-addr", "localhost"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("neither `none` nor an address"), "{stderr}");
}

/// The `target_info` line of a replay with `--target-info`, its labels by name.
fn target_info(env: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    let output = Command::new(common::process::binary())
        .args(["replay", "--output", "prometheus", "--metrics-addr", "none"])
        .arg("--target-info")
        .arg(data("lifecycle", "jsonl"))
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let line = stdout
        .lines()
        .find(|l| l.starts_with("target_info{"))
        .unwrap_or_else(|| panic!("no target_info in:\n{stdout}"));
    let (labels, value) = line
        .trim_start_matches("target_info{")
        .rsplit_once("} ")
        .unwrap();
    assert_eq!(value, "1.0");
    labels
        .split("\",")
        .map(|pair| {
            let (k, v) = pair.split_once("=\"").unwrap();
            (k.to_owned(), v.trim_end_matches('"').to_owned())
        })
        .collect()
}

/// The resource is the SDK's: `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES` as `Resource::builder()` reads them, the
/// crate's name when neither names the service, and a fresh
/// `service.instance.id` per process unless the environment sets one.
#[test]
fn target_info_carries_the_sdk_resource() {
    let plain = target_info(&[]);
    let sdk_version = plain["telemetry_sdk_version"].clone();
    let instance = plain["service_instance_id"].clone();
    assert_eq!(instance.len(), 36, "a UUID: {instance}");
    assert_eq!(
        plain,
        [
            ("service_instance_id", instance.as_str()),
            ("service_name", "vllm-otel-metrics"),
            ("telemetry_sdk_language", "rust"),
            ("telemetry_sdk_name", "opentelemetry"),
            ("telemetry_sdk_version", sdk_version.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    );
    assert_ne!(
        target_info(&[])["service_instance_id"],
        instance,
        "one id per process"
    );
    let named = target_info(&[
        ("OTEL_SERVICE_NAME", "frontend"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=test,service.instance.id=pod-7",
        ),
    ]);
    assert_eq!(named["service_name"], "frontend");
    assert_eq!(named["service_instance_id"], "pod-7");
    assert_eq!(named["deployment_environment"], "test");
}

/// `--max-label-sets` is the Views' cardinality limit: the first label sets
/// keep their series, the rest share the SDK's overflow series, and every
/// request is still counted.
#[test]
fn label_sets_beyond_max_label_sets_go_to_the_overflow_series() {
    let trace = data("generated-seed11", "jsonl");
    let (_, full, _) = common::process::replay(&trace);
    let (status, capped, stderr) = common::process::replay_with(&trace, &["--max-label-sets", "2"]);
    assert_eq!(status, 2, "{stderr}");
    let count_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("vllm:request_num_preemptions_count{"))
            .map(str::to_owned)
            .collect()
    };
    let (full_lines, capped_lines) = (count_lines(&full), count_lines(&capped));
    assert!(full_lines.len() > 3, "{full_lines:?}");
    assert_eq!(
        capped_lines.len(),
        3,
        "two label sets and the overflow: {capped_lines:?}"
    );
    assert_eq!(
        capped_lines
            .iter()
            .filter(|l| l
                .starts_with("vllm:request_num_preemptions_count{otel_metric_overflow=\"true\"} "))
            .count(),
        1,
        "{capped_lines:?}"
    );
    let total = |lines: &[String]| -> f64 {
        lines
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
            .sum()
    };
    assert_eq!(
        total(&capped_lines),
        total(&full_lines),
        "every request counted"
    );
    // The families with a further label keep it on their overflow series.
    assert!(
        capped.contains(
            "vllm:request_success_total{otel_metric_overflow=\"true\",finished_reason=\""
        ),
        "{capped}"
    );
}
