//! The Grafana dashboards in `otel-collector/grafana/` and the alerts of
//! `otel-collector/rules.yml`, read as files: every query of a dashboard is
//! filtered by its variables, every panel described, the variables chained,
//! the panels laid out without overlap, and every alert has its runbook
//! section in docs/OBSERVABILITY.md. The queries' answers are checked on a
//! live Prometheus by `tests/dashboards_prometheus.rs` (the vLLM dashboards),
//! `tests/genai_collector.rs` (the GenAI dashboard) and
//! `tests/native_histograms.rs` (the native-histogram dashboard).

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod dashboards;
    pub mod paths;
}

use std::path::Path;

use common::dashboards::*;
use serde_json::Value;
use vllm_otel_metrics::catalog;
use vllm_otel_metrics::catalog::slo::SLO_OUTCOMES;

const FILTER: [&str; 4] = [
    r#"job=~"$job""#,
    r#"instance=~"$instance""#,
    r#"model_name=~"$model_name""#,
    r#"engine=~"$engine""#,
];

const GENAI_FILTER: [&str; 4] = [
    r#"job=~"$job""#,
    r#"instance=~"$instance""#,
    r#"gen_ai_request_model=~"$gen_ai_request_model""#,
    r#"gen_ai_operation_name=~"$gen_ai_operation_name""#,
];

#[test]
fn dashboards_are_filtered_described_and_chained() {
    for (path, json) in dashboards() {
        let name = path.display();
        assert_variable_chain(
            &name,
            &json,
            &["job", "instance", "model_name", "engine"],
            "vllm:request_num_preemptions_count",
        );
        let traces = variable(&name, &json, "traces");
        assert_eq!(traces["type"], "datasource", "{name}");
        assert_eq!(traces["query"], "tempo", "{name}");
        for panel in panels(&json) {
            if panel["type"] == "row" {
                continue;
            }
            if panel["datasource"]["type"] == "tempo" {
                // A traces panel: TraceQL on the span attribute the
                // histogram's value is also written to, linked from the
                // preemption panels.
                let title = panel["title"].as_str().unwrap_or_default();
                assert_eq!(panel["datasource"]["uid"], "${traces}", "{name}: {title}");
                let target = &panel["targets"][0];
                assert_eq!(target["queryType"], "traceql", "{name}: {title}");
                assert_eq!(
                    target["query"], "{ span.vllm.request.num_preemptions >= 3 }",
                    "{name}: {title}"
                );
                let id = panel["id"].as_u64().unwrap();
                let linked = panels(&json)
                    .iter()
                    .filter(|p| {
                        p["links"].as_array().into_iter().flatten().any(|l| {
                            l["url"]
                                .as_str()
                                .is_some_and(|u| u.contains(&format!("viewPanel={id}")))
                        })
                    })
                    .count();
                assert!(linked >= 3, "{name}: {title}: linked from {linked} panels");
                continue;
            }
            let (title, description, targets) = described_panel(&name, panel);
            for target in targets {
                let expr = target["expr"].as_str().unwrap_or_default();
                for matcher in FILTER {
                    assert!(
                        expr.contains(matcher),
                        "{name}: {title}: {matcher} in {expr}"
                    );
                }
                if expr.contains(r#"le="1.0""#) {
                    assert!(
                        description.contains(r#"le="1.0""#) && description.contains("0 and 1"),
                        "{name}: {title}: the description must say that le=\"1.0\" holds 0 and 1"
                    );
                }
            }
            if panel["type"] == "heatmap" || panel["type"] == "bargauge" {
                assert_eq!(targets[0]["format"], "heatmap", "{name}: {title}");
            }
        }
        assert_layout(&path, &json);
        if json["uid"] == "vllm-preemptions" {
            // The reasons, stacked, beside the engine-wide rate they add up to.
            let find = |title: &str| {
                panels(&json)
                    .into_iter()
                    .find(|p| p["title"] == title)
                    .unwrap_or_else(|| panic!("{name}: no panel {title:?}"))
            };
            let by_reason = find("Preemptions by reason");
            let rate = find("Preemption rate per engine");
            let expr = by_reason["targets"][0]["expr"].as_str().unwrap_or_default();
            assert!(
                expr.starts_with("sum by (reason) (rate(vllm:num_preemptions_by_reason_total{"),
                "{name}: by reason: {expr}"
            );
            assert_eq!(
                by_reason["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"], "normal",
                "{name}: by reason stacked"
            );
            assert_eq!(
                by_reason["fieldConfig"]["defaults"]["unit"],
                rate["fieldConfig"]["defaults"]["unit"],
                "{name}: by reason and the rate in the same unit"
            );
            assert_eq!(
                by_reason["gridPos"]["y"], rate["gridPos"]["y"],
                "{name}: by reason beside the rate"
            );
            assert_slo_panels(&name, &find);
        }
    }
}

/// The SLO panels of "vLLM preemptions": what they read, and that their
/// lines are the objective and the thresholds of rules.yml.
fn assert_slo_panels<'a>(name: &impl std::fmt::Display, find: &dyn Fn(&str) -> &'a Value) {
    let rules = std::fs::read_to_string(rules_path()).unwrap();
    let exprs = |panel: &Value| -> Vec<String> {
        panel["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .map(|t| t["expr"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let steps = |panel: &Value| -> Vec<f64> {
        panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            .as_array()
            .expect("threshold steps")
            .iter()
            .filter_map(|step| step["value"].as_f64())
            .collect()
    };
    let requests = "rate(vllm_otel_metrics_slo_requests_total{";
    let met = format!(r#"sum by (model_name) ({requests}outcome="met", job=~"#);
    let all = format!(r#"sum by (model_name) ({requests}job=~"#);

    // Attainment: met / all per model; its line is the objective.
    let attainment = find("SLO attainment");
    let e = exprs(attainment);
    assert!(
        e.len() == 1 && e[0].starts_with(&met) && e[0].contains(&format!(" / {all}")),
        "{name}: attainment: {e:?}"
    );
    assert_eq!(attainment["fieldConfig"]["defaults"]["unit"], "percentunit");
    let objective: f64 = rules
        .lines()
        .skip_while(|l| !l.contains(&format!("record: {SLO_OBJECTIVE}")))
        .find_map(|l| l.trim().strip_prefix("expr: vector(")?.strip_suffix(')'))
        .unwrap_or_else(|| panic!("rules.yml: no {SLO_OBJECTIVE} = vector(…)"))
        .parse()
        .expect("the objective");
    assert_eq!(steps(attainment), [objective], "{name}: attainment's line");

    // Outcomes, stacked, one colour per outcome.
    let outcomes = find("Requests by SLO outcome");
    let e = exprs(outcomes);
    assert!(
        e.len() == 1 && e[0].starts_with(&format!("sum by (outcome) ({requests}job=~")),
        "{name}: outcomes: {e:?}"
    );
    assert_eq!(
        outcomes["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"], "normal",
        "{name}: outcomes stacked"
    );
    let colored: Vec<&str> = outcomes["fieldConfig"]["overrides"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["matcher"]["options"].as_str())
        .collect();
    for outcome in SLO_OUTCOMES {
        assert!(
            colored.contains(&outcome),
            "{name}: no colour for {outcome}"
        );
    }

    // Burn rates at the alerts' four windows, against rules.yml's objective;
    // its lines are the alerts' thresholds.
    let burn = find("SLO error-budget burn rate");
    let e = exprs(burn);
    let windows: Vec<&str> = FAST_WINDOWS.iter().map(|(w, _)| *w).collect();
    assert_eq!(e.len(), windows.len(), "{name}: burn rates: {e:?}");
    for (expr, window) in e.iter().zip(&windows) {
        let miss = format!(r#"sum by (model_name) ({requests}outcome!="met", job=~"#);
        assert!(
            expr.starts_with(&miss)
                && expr.contains(&format!("{window})) / {all}"))
                && expr.ends_with(&format!(
                    "{window})) / on () group_left () (1 - {SLO_OBJECTIVE})"
                )),
            "{name}: burn rate over {window}: {expr}"
        );
    }
    for threshold in [6.0, 14.4] {
        assert!(
            steps(burn).contains(&threshold),
            "{name}: burn-rate line at {threshold}"
        );
        assert!(
            rules.contains(&format!(") > {threshold}\n")),
            "rules.yml: no burn-rate threshold {threshold}"
        );
    }

    // Goodput in requests and in tokens, each beside everything finished.
    let e = exprs(find("Goodput: requests meeting the SLO"));
    assert!(
        e.len() == 2 && e[0].starts_with(&met) && e[1].starts_with(&all),
        "{name}: goodput requests: {e:?}"
    );
    let e = exprs(find("Goodput: tokens of requests meeting the SLO"));
    assert!(
        e.len() == 2
            && e[0].starts_with(
                "sum by (model_name) (rate(vllm_otel_metrics_slo_goodput_tokens_total{job=~"
            )
            && e[1].starts_with("sum by (model_name) (rate(vllm:request_generation_tokens_sum{"),
        "{name}: goodput tokens: {e:?}"
    );
}

/// Panel ids unique, every panel inside the 24 grid columns, no two overlapping.
fn assert_layout(path: &Path, json: &Value) {
    let name = path.display();
    let all = panels(json);
    let mut ids: Vec<u64> = all.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), all.len(), "{name}: a panel without id");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), all.len(), "{name}: panel ids not unique");
    let rect = |p: &Value| {
        let g = &p["gridPos"];
        let n = |k: &str| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{name}: {}: gridPos.{k}", p["title"]))
        };
        (n("x"), n("y"), n("w"), n("h"))
    };
    for (i, a) in all.iter().enumerate() {
        let (ax, ay, aw, ah) = rect(a);
        assert!(
            aw > 0 && ah > 0 && ax + aw <= 24,
            "{name}: {}: gridPos",
            a["title"]
        );
        for b in &all[i + 1..] {
            let (bx, by, bw, bh) = rect(b);
            let apart = ax + aw <= bx || bx + bw <= ax || ay + ah <= by || by + bh <= ay;
            assert!(apart, "{name}: {} overlaps {}", a["title"], b["title"]);
        }
    }
}

/// The selectors `(metric name, matchers)` of every `gen_ai_server_*` series
/// in `expr`; panics on one without matchers.
/// Every query of the dashboard's described panels, each reading its own
/// datasource and naming series with `prefix` only, every one of them
/// matched by all of `filter`; `check` sees each series' name and query.
fn filtered_exprs(
    name: &impl std::fmt::Display,
    json: &Value,
    prefix: &str,
    filter: &[&str],
    check: impl Fn(&str, &str),
) -> Vec<String> {
    let mut all = Vec::new();
    for panel in panels(json) {
        if panel["type"] == "row" {
            continue;
        }
        let (title, _, targets) = described_panel(name, panel);
        for target in targets {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "{name}: {title}"
            );
            let expr = target["expr"].as_str().unwrap_or_default();
            let selectors = selectors(expr, prefix);
            assert!(
                !selectors.is_empty(),
                "{name}: {title}: no {prefix} series in {expr}"
            );
            for (metric, matchers) in &selectors {
                check(metric, expr);
                for matcher in filter {
                    assert!(
                        matchers.contains(matcher),
                        "{name}: {title}: {matcher} on {metric} in {expr}"
                    );
                }
            }
            all.push(expr.to_owned());
        }
    }
    all
}

/// The selectors `(metric name, matchers)` of every series whose name
/// starts with `prefix` in `expr`; panics on one without matchers.
fn selectors(expr: &str, prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(prefix) {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let metric = &tail[..end];
        let body = tail[end..]
            .strip_prefix('{')
            .and_then(|b| b.split_once('}'))
            .map(|(matchers, _)| matchers)
            .unwrap_or_else(|| panic!("{metric} without matchers in {expr}"));
        out.push((metric.to_owned(), body.to_owned()));
        rest = &tail[end..];
    }
    out
}

#[test]
fn genai_dashboard_is_filtered_described_and_chained() {
    let vllm_uids: Vec<Value> = dashboards().iter().map(|(_, j)| j["uid"].clone()).collect();
    for (path, json) in genai_dashboards() {
        let name = path.display();
        assert!(json["uid"].is_string(), "{name}: uid");
        assert!(!vllm_uids.contains(&json["uid"]), "{name}: uid taken");
        assert_variable_chain(
            &name,
            &json,
            &GENAI_CHAIN,
            "gen_ai_server_request_duration_seconds_count",
        );
        // Semantic-convention series only, each filtered by all four variables.
        let all = filtered_exprs(&name, &json, "gen_ai_server_", &GENAI_FILTER, |_, expr| {
            assert!(!expr.contains("vllm:"), "{name}: vLLM family in {expr}");
        });
        assert_layout(&path, &json);
        // The panels the dashboard promises.
        let has = |what: &str, check: &dyn Fn(&str) -> bool| {
            assert!(all.iter().any(|e| check(e)), "{name}: no query for {what}");
        };
        let quantile = |q: &str, metric: &str| {
            let q = format!("histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{");
            move |e: &str| e.starts_with(&q)
        };
        for q in ["0.5", "0.9", "0.99"] {
            has(
                &format!("request duration p{q}"),
                &quantile(q, "gen_ai_server_request_duration_seconds"),
            );
        }
        for q in ["0.5", "0.99"] {
            has(
                &format!("TTFT p{q}"),
                &quantile(q, "gen_ai_server_time_to_first_token_seconds"),
            );
            has(
                &format!("TPOT p{q}"),
                &quantile(q, "gen_ai_server_time_per_output_token_seconds"),
            );
        }
        has("request rate by operation", &|e| {
            e.starts_with(
                "sum by (gen_ai_operation_name) (rate(gen_ai_server_request_duration_seconds_count{",
            )
        });
        has("error share by error_type", &|e| {
            e.starts_with("sum by (error_type) (rate(gen_ai_server_request_duration_seconds_count{")
                && e.contains(r#"error_type!="""#)
        });
        has("mean request duration", &|e| {
            e.contains("rate(gen_ai_server_request_duration_seconds_sum{")
                && e.contains(") / sum")
                && e.contains("rate(gen_ai_server_request_duration_seconds_count{")
        });
    }
}

/// Checks what every dashboard needs of its variables: a recent schema, a
/// Prometheus data source variable, and `chain`, each a multi-select query
/// variable with an All of `.*` on the data source, taking its values from
/// `family` filtered by every variable before it.
fn assert_variable_chain(
    name: &impl std::fmt::Display,
    json: &Value,
    chain: &[&str],
    family: &str,
) {
    assert!(
        json["schemaVersion"].as_u64() >= Some(36),
        "{name}: schemaVersion"
    );
    let var = |n: &str| variable(name, json, n);
    assert_eq!(var("datasource")["type"], "datasource", "{name}");
    assert_eq!(var("datasource")["query"], "prometheus", "{name}");
    // Each variable is filtered by the ones before it.
    for (i, n) in chain.iter().enumerate() {
        let v = var(n);
        assert_eq!(v["type"], "query", "{name}: {n}");
        assert_eq!(v["multi"], true, "{name}: {n} multi-select");
        assert_eq!(v["includeAll"], true, "{name}: {n} All");
        assert_eq!(v["allValue"], ".*", "{name}: {n} All is .*");
        assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}: {n}");
        let q = v["query"].as_str().unwrap_or_default();
        assert!(
            q.starts_with(&format!("label_values({family}")) && q.ends_with(&format!(", {n})")),
            "{name}: {n}: {q}"
        );
        for earlier in &chain[..i] {
            assert!(
                q.contains(&format!("{earlier}=~\"${earlier}\"")),
                "{name}: {n}: {q}"
            );
        }
    }
}

/// The dashboard's variable called `n`.
fn variable<'a>(name: &impl std::fmt::Display, json: &'a Value, n: &str) -> &'a Value {
    json["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .find(|v| v["name"] == n)
        .unwrap_or_else(|| panic!("{name}: no variable {n}"))
}

/// A data panel's title, description and queries, after checking what
/// every data panel needs: a title, a description that explains it, a unit,
/// the dashboard's data source and at least one query.
fn described_panel<'a>(
    name: &impl std::fmt::Display,
    panel: &'a Value,
) -> (&'a str, &'a str, &'a Vec<Value>) {
    let title = panel["title"].as_str().unwrap_or_default();
    assert!(!title.is_empty(), "{name}: a panel without title");
    let description = panel["description"].as_str().unwrap_or_default();
    assert!(description.len() > 40, "{name}: {title}: description");
    assert!(
        panel["fieldConfig"]["defaults"]["unit"].is_string(),
        "{name}: {title}: unit"
    );
    assert_eq!(
        panel["datasource"]["uid"], "${datasource}",
        "{name}: {title}"
    );
    let targets = panel["targets"].as_array().expect("targets");
    assert!(!targets.is_empty(), "{name}: {title}: no query");
    (title, description, targets)
}

/// GitHub's anchor for a Markdown heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_section() {
    let rules = std::fs::read_to_string(rules_path()).unwrap();
    let doc = std::fs::read_to_string(common::paths::repo().join("docs/OBSERVABILITY.md")).unwrap();
    let anchors: Vec<String> = doc
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| slug(line.trim_start_matches('#')))
        .collect();
    let alerts = rule_values(&rules, "alert");
    assert_eq!(alerts, ALERTS, "the alerts this file checks");
    let runbooks = rule_values(&rules, "runbook_url");
    assert_eq!(runbooks.len(), alerts.len(), "one runbook_url per alert");
    for (alert, url) in alerts.iter().zip(&runbooks) {
        let (file, anchor) = url.split_once('#').expect("an anchor");
        assert_eq!(file, "docs/OBSERVABILITY.md", "{alert}");
        assert_eq!(anchor, alert.to_lowercase(), "{alert}: anchor");
        assert!(
            anchors.iter().any(|a| a == anchor),
            "{alert}: no heading for #{anchor} in docs/OBSERVABILITY.md"
        );
    }
}

#[test]
fn native_dashboard_is_filtered_described_and_chained() {
    let taken: Vec<Value> = dashboards()
        .into_iter()
        .chain(genai_dashboards())
        .map(|(_, j)| j["uid"].clone())
        .collect();
    let native: Vec<&str> = catalog::all()
        .filter(|def| catalog::is_latency_histogram(def))
        .map(|def| def.vllm_name)
        .collect();
    for (path, json) in native_dashboards() {
        let name = path.display();
        assert!(json["uid"].is_string(), "{name}: uid");
        assert!(!taken.contains(&json["uid"]), "{name}: uid taken");
        assert_variable_chain(
            &name,
            &json,
            &["job", "instance", "model_name", "engine"],
            "vllm:e2e_request_latency_seconds",
        );
        // Native histograms only (no _bucket, _sum or _count series), each
        // filtered by all four variables.
        let all = filtered_exprs(&name, &json, "vllm:", &FILTER, |metric, expr| {
            assert!(
                native.contains(&metric),
                "{name}: {metric} in {expr} is not a native histogram (one of {native:?})"
            );
        });
        assert_layout(&path, &json);
        // The panels the dashboard promises: per model, the p99 of every
        // native family and the p50 and p90 of TTFT and e2e, the rate of
        // terminated requests and the mean e2e latency.
        let has = |what: &str, check: &dyn Fn(&str) -> bool| {
            assert!(all.iter().any(|e| check(e)), "{name}: no query for {what}");
        };
        let quantile = |q: &str, metric: &str| {
            let q = format!("histogram_quantile({q}, sum by (model_name) (rate({metric}{{");
            move |e: &str| e.starts_with(&q)
        };
        for family in &native {
            has(&format!("{family} p99"), &quantile("0.99", family));
        }
        for family in [
            "vllm:time_to_first_token_seconds",
            "vllm:e2e_request_latency_seconds",
        ] {
            for q in ["0.5", "0.9"] {
                has(&format!("{family} p{q}"), &quantile(q, family));
            }
        }
        has("terminated requests per second", &|e| {
            e.starts_with(
                "sum by (model_name) (histogram_count(rate(vllm:e2e_request_latency_seconds{",
            )
        });
        has("mean e2e latency", &|e| {
            e.contains("histogram_sum(rate(vllm:e2e_request_latency_seconds{")
                && e.contains(") / sum")
                && e.contains("histogram_count(rate(vllm:e2e_request_latency_seconds{")
        });
    }
}

/// Every histogram panel of "vLLM preemptions" over a family that carries
/// exemplars asks Prometheus for them (`"exemplar": true`), and no query
/// asks for exemplars of a family that has none.
#[test]
fn histogram_panels_show_the_exemplars_of_the_families_that_carry_them() {
    // A family's series by class (`vllm_class:`) carry their class's.
    let carried: Vec<String> = catalog::exemplar_families()
        .flat_map(|def| std::iter::once(def.vllm_name).chain(def.by_class_name))
        .map(|name| format!("{name}_bucket{{"))
        .collect();
    let (path, json) = dashboards()
        .into_iter()
        .find(|(path, _)| path.ends_with("vllm-preemptions.json"))
        .expect("the vLLM preemptions dashboard");
    let mut asked = 0;
    for panel in panels(&json) {
        let kind = panel["type"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            let over_buckets = carried.iter().any(|bucket| expr.contains(bucket.as_str()));
            let histogram_view =
                expr.starts_with("histogram_quantile(") || target["format"] == "heatmap";
            let wants = over_buckets && histogram_view && kind != "bargauge";
            let asks = target["exemplar"] == Value::Bool(true);
            assert_eq!(
                asks,
                wants,
                "{}: panel '{}', query {expr}",
                path.display(),
                panel["title"]
            );
            asked += usize::from(asks);
        }
    }
    assert_eq!(asked, 10, "{}", path.display());
}
