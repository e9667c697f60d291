//! The shipped Grafana dashboards (`otel-collector/grafana/`) and Prometheus
//! rules (`otel-collector/rules.yml`), as the tests read them, and Grafana's
//! variable substitution.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The alerts of rules.yml.
pub const ALERTS: [&str; 5] = [
    "VllmHighPreemptionRate",
    "VllmHighPreemptionsPerRequestP99",
    "VllmManyRequestsPreemptedTwice",
    "VllmSloErrorBudgetFastBurn",
    "VllmSloErrorBudgetSlowBurn",
];

/// The recording rule holding the SLO objective (`vector(0.99)` in
/// rules.yml), read by the burn-rate alerts and the burn-rate panel.
pub const SLO_OBJECTIVE: &str = "vllm_otel_metrics:slo_objective:ratio";

/// The shipped Prometheus rules (`otel-collector/rules.yml`).
pub fn rules_path() -> PathBuf {
    super::paths::repo().join("otel-collector/rules.yml")
}

/// Values of `key:` lines in rules.yml (`record`, `alert`, `runbook_url`, …).
pub fn rule_values(rules: &str, key: &str) -> Vec<String> {
    let prefix = format!("{key}:");
    rules
        .lines()
        .map(|line| line.trim().trim_start_matches("- "))
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim().trim_matches('"').trim_matches('\'').to_owned())
        .collect()
}

/// The GenAI dashboard's variables, in chain order.
pub const GENAI_CHAIN: [&str; 4] = [
    "job",
    "instance",
    "gen_ai_request_model",
    "gen_ai_operation_name",
];

/// The vLLM dashboards: `otel-collector/grafana/*.json`.
pub fn dashboards() -> Vec<(PathBuf, Value)> {
    dashboards_in(&super::paths::repo().join("otel-collector/grafana"))
}

/// The GenAI semantic-conventions dashboards: `otel-collector/grafana/genai/*.json`.
pub fn genai_dashboards() -> Vec<(PathBuf, Value)> {
    dashboards_in(&super::paths::repo().join("otel-collector/grafana/genai"))
}

/// The native-histogram dashboards: `otel-collector/grafana/native/*.json`.
pub fn native_dashboards() -> Vec<(PathBuf, Value)> {
    dashboards_in(&super::paths::repo().join("otel-collector/grafana/native"))
}

fn dashboards_in(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut out: Vec<(PathBuf, Value)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", path.display()));
            (path, json)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no dashboard in {}", dir.display());
    out
}

/// Every expr of a dashboard (at least `min` of them).
pub fn all_exprs(path: &Path, json: &Value, min: usize) -> Vec<String> {
    let all = exprs(json);
    assert!(
        all.len() >= min,
        "{}: only {} queries",
        path.display(),
        all.len()
    );
    all
}

/// Every panel, rows' nested panels included.
pub fn panels(json: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in json["panels"].as_array().into_iter().flatten() {
        out.push(panel);
        out.extend(panel["panels"].as_array().into_iter().flatten());
    }
    out
}

/// The multi-value variables of the dashboards, each at All: Grafana sends
/// `.*`, which matches only inside a `=~"…"` matcher.
const AT_ALL: [&str; 7] = [
    "job",
    "instance",
    "model_name",
    "engine",
    "Deployment_id",
    "gen_ai_request_model",
    "gen_ai_operation_name",
];

/// `expr` as Grafana sends it to Prometheus: each `$name` is its value in
/// `values` (`__rate_interval`, `__range`, a variable not at All), or else
/// `.*` for a multi-value variable at All; fails on any other variable, and
/// on All outside a regex matcher.
pub fn substitute(expr: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        // The whole name: `$job` must not be read inside `$job_name`.
        let len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..len];
        match values.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => out.push_str(value),
            None => {
                assert!(
                    AT_ALL.contains(&name),
                    "unknown variable `${name}` in dashboard query: {expr}"
                );
                assert!(
                    out.ends_with("=~\""),
                    "`${name}` (All, `.*`) outside a `=~\"…\"` matcher: {expr}"
                );
                out.push_str(".*");
            }
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// Every `expr` string anywhere in a Grafana dashboard (panels, rows,
/// targets, variables).
pub fn exprs(json: &Value) -> Vec<String> {
    fn walk(json: &Value, out: &mut Vec<String>) {
        match json {
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", Value::String(expr)) => out.push(expr.clone()),
                        _ => walk(value, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(json, &mut out);
    out
}

/// The selector of each `label_values(SELECTOR, NAME)` variable, as
/// `(NAME, SELECTOR)`, in the dashboard's order: what Grafana asks
/// Prometheus for each variable's values.
pub fn label_value_selectors(json: &Value) -> Vec<(String, String)> {
    json["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter_map(|variable| {
            let name = variable["name"].as_str()?;
            let selector = variable["query"]
                .as_str()?
                .strip_prefix("label_values(")?
                .strip_suffix(&format!(", {name})"))?;
            Some((name.to_owned(), selector.to_owned()))
        })
        .collect()
}

/// `$__rate_interval` and `$__range` in the live runs of a minute or two,
/// scraped every second: fifteen scrapes, and a minute.
pub const LIVE_RANGES: [(&str, &str); 2] = [("__rate_interval", "15s"), ("__range", "1m")];

/// The windows of `rules.yml` and their stand-ins in the live run: a tenth.
pub const FAST_WINDOWS: [(&str, &str); 4] = [
    ("[5m]", "[30s]"),
    ("[30m]", "[3m]"),
    ("[1h]", "[6m]"),
    ("[6h]", "[36m]"),
];
