//! Every shipped Collector config loads: `validate` passes for each one (an
//! overlay merged with the config it overlays) with no environment set, so
//! every `${env:…}` must carry its default; and nothing in `otel-collector/`
//! is a config this test does not know of.

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

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::collector::collector_binary;
use common::jaeger::jaeger_binary;

/// The Collector configs of `otel-collector/`: (file, the config it overlays).
const COLLECTOR_CONFIGS: [(&str, Option<&str>); 6] = [
    ("config.yaml", None),
    ("tls.yaml", Some("config.yaml")),
    ("remote-write.yaml", Some("config.yaml")),
    ("agent.yaml", None),
    ("gateway.yaml", None),
    ("gateway-tls.yaml", Some("gateway.yaml")),
];
/// The Jaeger traces backend's config (validated by the Jaeger binary).
const JAEGER_CONFIG: &str = "jaeger.yaml";
/// YAML files of `otel-collector/` that are not Collector configs.
const OTHER_YAML: [&str; 3] = ["prometheus.yml", "rules.yml", "rules_test.yml"];

fn dir() -> PathBuf {
    common::paths::repo().join("otel-collector")
}

/// `BINARY validate --config …` with an empty environment.
fn validate(binary: &Path, configs: &[PathBuf]) -> Output {
    let mut command = Command::new(binary);
    command.env_clear().arg("validate");
    for config in configs {
        command.arg("--config").arg(config);
    }
    command.output().expect("validate runs")
}

fn report(output: &Output) -> String {
    format!(
        "{:?}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The files to validate together for `name`: its base first.
fn with_base(name: &str, base: Option<&str>) -> Vec<PathBuf> {
    base.into_iter()
        .chain([name])
        .map(|file| dir().join(file))
        .collect()
}

/// `${env:NAME}` (or `${NAME}`) without `:-default`, with its line number.
fn references_without_default(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("${") {
            let after = &rest[start + 2..];
            let end = after.find('}').unwrap_or(after.len());
            let reference = &after[..end];
            let name = reference.strip_prefix("env:").unwrap_or(reference);
            if !name.contains(":-") {
                found.push(format!("line {}: ${{{reference}}}", number + 1));
            }
            rest = &after[end..];
        }
    }
    found
}

#[test]
fn every_environment_reference_has_a_default() {
    let mut configs: Vec<&str> = COLLECTOR_CONFIGS.iter().map(|(name, _)| *name).collect();
    configs.push(JAEGER_CONFIG);
    for name in configs {
        let text = std::fs::read_to_string(dir().join(name)).unwrap();
        let missing = references_without_default(&text);
        assert!(missing.is_empty(), "{name}: no default in {missing:?}");
    }
    // Guards the guard.
    assert_eq!(
        references_without_default("a: ${env:X}\nb: ${env:Y:-1}\n# ${env:Z}\nc: ${W}\n"),
        ["line 1: ${env:X}", "line 4: ${W}"]
    );
}

/// The processor `key` of a config, as written: its key line and the lines
/// indented under it.
fn processor_block(config: &str, key: &str) -> String {
    let text = std::fs::read_to_string(dir().join(config)).unwrap();
    let key_line = format!("  {key}:");
    let mut lines = text.lines().skip_while(|line| *line != key_line);
    let key_line = lines
        .next()
        .unwrap_or_else(|| panic!("{config}: no processor {key}"));
    let body = lines.take_while(|line| line.starts_with("   "));
    std::iter::once(key_line)
        .chain(body)
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Every config that receives vllm-otel-metrics' OTLP attributes alike (the
/// Prometheus exporter's, the scale-out agent's and gateway's), and the two
/// that write Prometheus series rename alike.
#[test]
fn the_configs_attribute_and_rename_alike() {
    let shipped = processor_block("config.yaml", "transform/attribution");
    assert!(
        shipped.contains("copy_metric(name=Concat([\"vllm_class:\""),
        "{shipped}"
    );
    for config in ["gateway.yaml", "agent.yaml"] {
        assert_eq!(
            processor_block(config, "transform/attribution"),
            shipped,
            "{config}"
        );
    }
    assert_eq!(
        processor_block("gateway.yaml", "transform"),
        processor_block("config.yaml", "transform")
    );
}

#[test]
fn every_yaml_file_of_otel_collector_is_known() {
    let mut found: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .collect();
    found.sort();
    let mut known: Vec<String> = COLLECTOR_CONFIGS
        .iter()
        .map(|(name, _)| *name)
        .chain([JAEGER_CONFIG])
        .chain(OTHER_YAML)
        .map(str::to_owned)
        .collect();
    known.sort();
    assert_eq!(
        found, known,
        "a new config in otel-collector/ belongs in this test"
    );
}

mod needs_collector {
    use super::*;

    /// Guards the guard: `validate` refuses a config with an unknown key.
    #[test]
    fn validate_refuses_a_broken_config() {
        let temp = common::paths::tempdir("collector-configs");
        let broken = temp.join("broken.yaml");
        std::fs::write(
            &broken,
            "exporters:\n  load_balancing/metrics:\n    no_such_setting: 1\n",
        )
        .unwrap();
        let output = validate(
            &collector_binary(),
            &[dir().join("agent.yaml"), broken.clone()],
        );
        assert!(
            !output.status.success(),
            "validate accepted an unknown key:\n{}",
            report(&output)
        );
        assert!(
            report(&output).contains("no_such_setting"),
            "the error names the key:\n{}",
            report(&output)
        );
        std::fs::remove_dir_all(&temp).ok();
    }
}

mod needs_collector_jaeger {
    use super::*;

    #[test]
    fn every_shipped_config_validates_with_no_environment_set() {
        let collector = collector_binary();
        for (name, base) in COLLECTOR_CONFIGS {
            let output = validate(&collector, &with_base(name, base));
            assert!(
                output.status.success(),
                "otelcol-vllm validate {name} (over {base:?}):\n{}",
                report(&output)
            );
        }
        let output = validate(&jaeger_binary(), &[dir().join(JAEGER_CONFIG)]);
        assert!(
            output.status.success(),
            "jaeger validate {JAEGER_CONFIG}:\n{}",
            report(&output)
        );
    }
}
