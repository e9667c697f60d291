//! Prometheus native histograms end to end, and how far their quantiles are
//! from the exact ones.
//!
//! `serve --otlp-histograms exponential` sends the latency families over OTLP
//! as base-2 exponential histograms; the Collector's
//! `prometheus_remote_write` exporter writes each as one native histogram
//! into a real Prometheus (Debian's 2.42, with
//! `--enable-feature=native-histograms` and
//! `--web.enable-remote-write-receiver`), which also scrapes `serve`'s
//! `/metrics` (vLLM's explicit buckets) every second. Two routes, one test
//! each:
//!
//! - `through_the_collector`: `serve` → `otel-collector/config.yaml` with the
//!   `otel-collector/remote-write.yaml` overlay → Prometheus;
//! - `through_the_gateway_tier`: `serve` → agent (`agent.yaml`) → gateway
//!   (`gateway.yaml`) → Prometheus.
//!
//! The data is a simulator run (`simulate --record`). Prometheus' `rate()`
//! sees only increases between samples, so the series must hold a zero
//! before the observations arrive: phase 1 streams one `request` record (the
//! run's first, under another request id) into `serve`, which creates the
//! label set's histograms at count 0, and waits until Prometheus holds two
//! such samples; phase 2 streams the whole run. Once Prometheus' native count
//! equals the number of observations, for time to first token and e2e
//! latency:
//!
//! - the exact quantiles (nearest rank: the ⌈q·n⌉-th smallest of the n
//!   observations) come from the same run replayed in-process through the
//!   crate's tracker, whose `llm_request` spans carry the very values the
//!   histograms observe (`gen_ai.latency.time_to_first_token`,
//!   `gen_ai.latency.e2e`);
//! - the native estimate is `histogram_quantile(q, rate(F[W]))`, the classic
//!   one `histogram_quantile(q, sum by (le) (rate(F_bucket{job="serve-bridge"}[W])))`,
//!   with `W` the whole run;
//! - the native relative error must be at most 3 % at p50, p90 and p99; the
//!   classic error is printed, not bounded (it depends on where vLLM's
//!   buckets fall).
//!
//! Also: every exponential family arrives as a native series and no
//! `_bucket` series of it is written, an explicit family
//! (`vllm:request_num_preemptions`) still arrives as classic series, `serve`'s
//! `/metrics` keeps vLLM's explicit TTFT buckets, and every query of the
//! native-histogram dashboard (`otel-collector/grafana/native/`) returns
//! finite data.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod collector;
    pub mod dashboards;
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod jaeger;
    pub mod paths;
    pub mod process;
    pub mod prometheus_server;
    pub mod serve;
    pub mod spans;
    pub mod tier;
}

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::collector::Collector;
use common::process::Guard;
use common::serve::Server;
use common::spans::{number, KeptSpans};
use common::tier::{start_agent, Gateway};
use common::{dashboards, prometheus_server};
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::Value;
use vllm_otel_metrics::catalog;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::spans::{keys, RequestSpans, SPAN_NAME};
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::tracker::Tracker;

/// About 1,800 requests in 150 simulated seconds (a second of wall time),
/// a KV cache large enough never to preempt, and a load that queues now and
/// then: TTFT from 16 ms to 0.21 s, e2e from 0.14 s to 4.7 s.
const WORKLOAD: [&str; 12] = [
    "--duration",
    "150",
    "--seed",
    "7",
    "--rate",
    "12",
    "--prompt-len",
    "512",
    "--output-len",
    "128",
    "--kv-blocks",
    "8192",
];

const TTFT: &str = "vllm:time_to_first_token_seconds";
const E2E: &str = "vllm:e2e_request_latency_seconds";
const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];
/// The largest relative error allowed of a native quantile.
const MAX_NATIVE_ERROR: f64 = 0.03;
/// The scrape job of `serve`'s `/metrics` (classic buckets).
const BRIDGE_JOB: &str = "serve-bridge";
/// `serve`'s `service.name`: the `job` of what it pushes.
const SERVICE: &str = "native-histograms";

#[derive(Debug, Clone, Copy)]
enum Route {
    /// `config.yaml` + `remote-write.yaml`.
    Collector,
    /// `agent.yaml` → `gateway.yaml`.
    GatewayTier,
}

/// The processes of a route, kept running while the guards live.
enum Pipeline {
    Collector(Collector),
    Tier { _agent: Guard, _gateway: Gateway },
}

impl Pipeline {
    fn log(&self, dir: &Path) -> String {
        match self {
            Pipeline::Collector(collector) => collector.log(),
            Pipeline::Tier { .. } => ["agent.log", "gateway-a.log"]
                .iter()
                .map(|name| {
                    format!(
                        "== {name}\n{}",
                        std::fs::read_to_string(dir.join(name)).unwrap_or_default()
                    )
                })
                .collect(),
        }
    }
}

/// Every observation of the two families, sorted.
#[derive(Debug)]
struct Exact {
    ttft: Vec<f64>,
    e2e: Vec<f64>,
}

impl Exact {
    fn of(&self, family: &str) -> &[f64] {
        match family {
            TTFT => &self.ttft,
            E2E => &self.e2e,
            other => panic!("no exact values of {other}"),
        }
    }
}

/// The run replayed in-process through the tracker: each terminated
/// request's span carries its e2e latency and, when it produced a token
/// (only then is a TTFT observed), its time to first token. The counts and
/// sums are checked against the histograms the same replay recorded.
fn exact_observations(trace: &Path) -> Exact {
    let kept = KeptSpans::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build())
        .with_spans(RequestSpans::new(&provider));
    let file = std::fs::File::open(trace).expect("the recorded run");
    let mut diagnostics = Vec::new();
    let report = jsonl::replay(
        BufReader::new(file),
        "sim.jsonl",
        &mut tracker,
        &mut diagnostics,
        jsonl::DEFAULT_MAX_LINE_BYTES,
    )
    .expect("the replay reads the run");
    assert!(
        report.is_clean(),
        "{report:?}\n{}",
        String::from_utf8_lossy(&diagnostics)
    );
    let spans = kept.0.lock().unwrap();
    let (mut ttft, mut e2e) = (Vec::new(), Vec::new());
    for span in spans.iter().filter(|s| s.name == SPAN_NAME) {
        e2e.push(number(span, keys::LATENCY_E2E).expect("e2e on every span"));
        if number(span, keys::USAGE_COMPLETION_TOKENS) > Some(0.0) {
            ttft.push(number(span, keys::LATENCY_TIME_TO_FIRST_TOKEN).expect("a TTFT"));
        }
    }
    let text = bridge.encode(Format::Text);
    for (family, values) in [(TTFT, &ttft), (E2E, &e2e)] {
        let count = common::exposition::sum_of(&text, &format!("{family}_count"));
        let sum = common::exposition::sum_of(&text, &format!("{family}_sum"));
        let spans_sum: f64 = values.iter().sum();
        assert_eq!(
            count,
            values.len() as f64,
            "{family}: the histogram's count against the spans"
        );
        assert!(
            (sum - spans_sum).abs() <= 1e-9 * sum.abs().max(1.0),
            "{family}: the histogram's sum {sum} against the spans' {spans_sum}"
        );
    }
    ttft.sort_by(f64::total_cmp);
    e2e.sort_by(f64::total_cmp);
    assert!(ttft.len() >= 1000, "{} TTFT observations", ttft.len());
    Exact { ttft, e2e }
}

/// The nearest-rank quantile: the ⌈q·n⌉-th smallest value.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64 - 1e-9).ceil().max(1.0) as usize;
    sorted[rank - 1]
}

/// Records the run with `simulate --record`; writes phase 1's trace, the
/// run's first request under another request id. Returns both paths.
fn record_run(dir: &Path) -> (PathBuf, PathBuf) {
    let sim = dir.join("sim.jsonl");
    let output = Command::new(common::process::binary())
        .arg("simulate")
        .args(WORKLOAD)
        .arg("--record")
        .arg(&sim)
        .args(["--output", "none", "--metrics-addr", "none"])
        .output()
        .expect("simulate runs");
    assert!(
        output.status.success(),
        "simulate --record: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&sim).unwrap();
    let mut first: Value = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON record"))
        .find(|record| record["type"] == "request")
        .expect("a request record");
    let id = first["request_id"].as_str().expect("request_id").to_owned();
    first["request_id"] = Value::from(format!("{id}-phase1"));
    let phase1 = dir.join("phase1.jsonl");
    std::fs::write(&phase1, format!("{first}\n")).unwrap();
    (sim, phase1)
}

/// `replay --target` of `trace` into `server`.
fn feed(server: &Server, trace: &Path) {
    let output = Command::new(common::process::binary())
        .args([
            "replay",
            "--metrics-addr",
            "none",
            "--target",
            &server.target(),
        ])
        .arg(trace)
        .output()
        .expect("replay runs");
    assert!(
        output.status.success(),
        "replay --target {} {}: {:?}\n{}",
        server.target(),
        trace.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `result` array of an instant query (panics on an error).
fn result(port: u16, promql: &str) -> Vec<Value> {
    prometheus_server::result(port, promql).unwrap_or_else(|e| panic!("{promql}: {e}"))
}

/// The value of a one-series instant query: `None` when there is no series.
fn scalar(port: u16, promql: &str) -> Option<f64> {
    let series = result(port, promql);
    assert!(series.len() <= 1, "{promql}: {} series", series.len());
    series
        .first()
        .and_then(|s| s["value"][1].as_str()?.parse().ok())
}

/// The raw samples' counts of the one series `selector` selects in the
/// last `window`: a native histogram's `count`, or a float sample's value.
fn sample_counts(port: u16, selector: &str, window: &str) -> Vec<f64> {
    let series = result(port, &format!("{selector}[{window}]"));
    let Some(series) = series.first() else {
        return Vec::new();
    };
    let number = |v: &Value| v.as_str().and_then(|s| s.parse::<f64>().ok());
    if let Some(histograms) = series["histograms"].as_array() {
        histograms
            .iter()
            .filter_map(|point| number(&point[1]["count"]))
            .collect()
    } else {
        series["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|point| number(&point[1]))
            .collect()
    }
}

/// The native histogram's resolution: the schema its buckets' width gives
/// (a bucket spans a factor 2^(2^-schema)), and that factor.
fn native_schema(port: u16, selector: &str) -> (i32, f64) {
    let series = result(port, selector);
    let buckets = series
        .first()
        .and_then(|s| s["histogram"][1]["buckets"].as_array().cloned())
        .unwrap_or_else(|| panic!("{selector}: no native histogram: {series:?}"));
    let bound = |b: &Value, i: usize| b[i].as_str().and_then(|s| s.parse::<f64>().ok());
    let ratio = buckets
        .iter()
        .filter_map(|b| Some(bound(b, 2)? / bound(b, 1)?))
        .find(|r| r.is_finite() && *r > 1.0)
        .unwrap_or_else(|| panic!("{selector}: no positive bucket: {buckets:?}"));
    (-(ratio.log2().log2()).round() as i32, ratio)
}

/// The metric names of the series `selector` selects (the series API).
fn metric_names(port: u16, selector: &str) -> Vec<String> {
    let path = format!(
        "/api/v1/label/__name__/values?match[]={}",
        prometheus_server::url_encode(selector)
    );
    let (status, body) = common::http::get(port, &path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let json: Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("HTTP {status}, {e}: {body}"));
    json["data"]
        .as_array()
        .unwrap_or_else(|| panic!("HTTP {status}: {body}"))
        .iter()
        .filter_map(|name| name.as_str().map(str::to_owned))
        .collect()
}

/// What a route runs: the pipeline, `serve` pushing into it, and the
/// Prometheus that both the pipeline and `serve`'s `/metrics` feed.
struct Stack {
    dir: PathBuf,
    pipeline: Pipeline,
    server: Server,
    _prometheus: Guard,
    port: u16,
    prometheus_started: Instant,
}

impl Stack {
    fn start(route: Route, dir: &Path) -> Stack {
        // Prometheus' address first: the pipeline must know where to write.
        let prometheus_port = common::http::free_port();
        let remote_write = format!("http://127.0.0.1:{prometheus_port}/api/v1/write");
        let (pipeline, otlp_endpoint) = match route {
            Route::Collector => {
                let collector = Collector::start_on_free_ports(
                    &["remote-write.yaml"],
                    &[("REMOTE_WRITE_URL", &remote_write)],
                );
                let endpoint = collector.endpoint("grpc");
                (Pipeline::Collector(collector), endpoint)
            }
            Route::GatewayTier => {
                let mut gateway = Gateway::on_free_ports("a");
                gateway.start(dir, &remote_write);
                let agent_grpc = common::http::free_port();
                let agent = start_agent(dir, agent_grpc, std::slice::from_ref(&gateway));
                let endpoint = format!("http://127.0.0.1:{agent_grpc}");
                (
                    Pipeline::Tier {
                        _agent: agent,
                        _gateway: gateway,
                    },
                    endpoint,
                )
            }
        };
        let serve_log = dir.join("serve.log");
        let server = Server::start_with(
            &[
                "--otlp-endpoint",
                &otlp_endpoint,
                "--otlp-protocol",
                "grpc",
                "--otlp-histograms",
                "exponential",
            ],
            |command| {
                let log = std::fs::File::create(&serve_log).expect("serve's log");
                command
                    .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
                    .env("OTEL_SERVICE_NAME", SERVICE)
                    .env_remove("OTEL_RESOURCE_ATTRIBUTES")
                    .stderr(log);
            },
        );
        let (prometheus, port) = prometheus_server::start_on(
            dir,
            prometheus_port,
            &[(BRIDGE_JOB, server.metrics)],
            None,
            &[
                "--enable-feature=native-histograms",
                "--web.enable-remote-write-receiver",
            ],
        );
        Stack {
            dir: dir.to_owned(),
            pipeline,
            server,
            _prometheus: prometheus,
            port,
            prometheus_started: Instant::now(),
        }
    }

    /// Where to look when something did not arrive.
    fn context(&self) -> String {
        format!(
            "logs in {} (prometheus.log, serve.log)\npipeline log:\n{}",
            self.dir.display(),
            self.pipeline.log(&self.dir)
        )
    }

    /// Polls until `check` holds, or panics with what it saw last and the logs.
    fn wait_until(&self, secs: u64, what: &str, mut check: impl FnMut() -> Result<(), String>) {
        let mut last = String::new();
        let done = common::process::wait_for_optional(secs, || match check() {
            Ok(()) => Some(()),
            Err(seen) => {
                last = seen;
                None
            }
        });
        if done.is_none() {
            panic!(
                "timed out after {secs} s waiting for {what}; last: {last}\n{}",
                self.context()
            );
        }
    }

    /// A rate window from before the first sample to now.
    fn whole_run(&self) -> String {
        format!("{}s", self.prometheus_started.elapsed().as_secs() + 30)
    }
}

/// The native series `serve` pushed of `family`.
fn native(family: &str) -> String {
    format!("{family}{{job=\"{SERVICE}\"}}")
}

/// The classic count Prometheus scraped from `serve`'s `/metrics`.
fn classic_count(family: &str) -> String {
    format!("{family}_count{{job=\"{BRIDGE_JOB}\"}}")
}

fn native_histograms_through(route: Route) {
    let _serial = common::process::serial();
    let started = Instant::now();
    let dir = common::paths::tempdir("native-histograms");

    // The data, and its exact values.
    let (sim, phase1) = record_run(&dir);
    let exact = exact_observations(&sim);
    eprintln!(
        "{route:?}: recorded and replayed in-process ({} TTFT, {} e2e observations) after {:?}",
        exact.ttft.len(),
        exact.e2e.len(),
        started.elapsed()
    );
    let stack = Stack::start(route, &dir);
    let port = stack.port;

    // Phase 1: the label set's histograms at count 0, twice in Prometheus.
    feed(&stack.server, &phase1);
    stack.wait_until(30, "two count-0 samples of each series", || {
        for family in [TTFT, E2E] {
            for selector in [native(family), classic_count(family)] {
                let counts = sample_counts(port, &selector, "1m");
                if counts.len() < 2 || counts.iter().any(|c| *c != 0.0) {
                    return Err(format!("{selector}: sample counts {counts:?}"));
                }
            }
        }
        Ok(())
    });
    eprintln!(
        "{route:?}: zero samples stored after {:?}",
        started.elapsed()
    );

    // Phase 2: the whole run, until Prometheus holds every observation.
    feed(&stack.server, &sim);
    for family in [TTFT, E2E] {
        let expected = exact.of(family).len() as f64;
        let bridge = stack.server.sample(&format!(
            "{family}_count{{model_name=\"sim-model-0\",engine=\"0\"}}"
        ));
        assert_eq!(
            bridge,
            Some(expected),
            "{family}: serve's /metrics against the in-process replay"
        );
        let what = format!("{expected} observations of {family} in Prometheus");
        stack.wait_until(30, &what, || {
            let stored = (
                scalar(port, &format!("histogram_count({})", native(family))),
                scalar(port, &classic_count(family)),
            );
            (stored == (Some(expected), Some(expected)))
                .then_some(())
                .ok_or_else(|| format!("(native, classic) counts {stored:?}"))
        });
    }
    eprintln!(
        "{route:?}: every observation stored after {:?}",
        started.elapsed()
    );

    assert_native_and_classic_series(port);
    assert_bridge_keeps_vllm_buckets(&stack.server);

    let window = stack.whole_run();
    let (table, too_far) = quantile_table(route, port, &exact, &window);
    eprintln!("{table}");
    assert!(
        too_far.is_empty(),
        "native quantiles further than {MAX_NATIVE_ERROR} from the exact ones: {too_far:?}\n{table}"
    );

    let checked = assert_dashboards_answer(port, &window);
    eprintln!(
        "{route:?}: {checked} dashboard queries answered; done after {:?}",
        started.elapsed()
    );
    drop(stack);
    std::fs::remove_dir_all(&dir).ok();
}

/// The series names the exporter wrote: every latency family as a native
/// histogram only, an explicit family (`vllm:request_num_preemptions`) as
/// classic series.
fn assert_native_and_classic_series(port: u16) {
    let names = metric_names(port, &format!("{{job=\"{SERVICE}\"}}"));
    for family in catalog::all()
        .filter(|def| catalog::is_latency_histogram(def))
        .map(|def| def.vllm_name)
    {
        assert!(
            names.iter().any(|n| n == family),
            "{family} is not among the written series: {names:?}"
        );
        assert!(
            !names.iter().any(|n| n.starts_with(&format!("{family}_"))),
            "classic series of {family} were written: {names:?}"
        );
        let counts = result(port, &format!("histogram_count({})", native(family)));
        assert_eq!(counts.len(), 1, "{family}: one native series: {counts:?}");
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        let name = format!("vllm:request_num_preemptions{suffix}");
        assert!(names.contains(&name), "{name} not written: {names:?}");
    }
}

/// `serve`'s `/metrics` keeps vLLM's explicit TTFT buckets.
fn assert_bridge_keeps_vllm_buckets(server: &Server) {
    let exposition = common::http::http_get(server.metrics, "/metrics").expect("serve's /metrics");
    let mut bounds: Vec<f64> = exposition
        .lines()
        .filter(|l| l.starts_with("vllm:time_to_first_token_seconds_bucket{"))
        .map(|l| {
            let le = l
                .split("le=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_else(|| panic!("no le in {l}"));
            if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or_else(|e| panic!("le {le:?}: {e}"))
            }
        })
        .collect();
    bounds.sort_by(f64::total_cmp);
    let mut want = common::exposition::catalog_bounds("vllm:time_to_first_token_seconds");
    want.push(f64::INFINITY);
    assert_eq!(bounds, want, "the bridge's TTFT buckets are vLLM's");
}

/// The table of exact, native and classic quantiles with both errors, and
/// the native ones further than [`MAX_NATIVE_ERROR`] from the exact ones.
fn quantile_table(route: Route, port: u16, exact: &Exact, window: &str) -> (String, Vec<String>) {
    let mut table = format!(
        "{route:?}: {} TTFT and {} e2e observations; exact = nearest rank; rate window {window}\n\
         {:<6} {:>5} {:>11} {:>11} {:>8} {:>11} {:>8}\n",
        exact.ttft.len(),
        exact.e2e.len(),
        "family",
        "q",
        "exact s",
        "native s",
        "error",
        "classic s",
        "error"
    );
    let mut too_far = Vec::new();
    for (label, family) in [("TTFT", TTFT), ("e2e", E2E)] {
        let (schema, ratio) = native_schema(port, &native(family));
        for q in QUANTILES {
            let want = nearest_rank(exact.of(family), q);
            let native_promql = format!(
                "histogram_quantile({q}, rate({}[{window}]))",
                native(family)
            );
            let classic_promql = format!(
                "histogram_quantile({q}, sum by (le) (rate({family}_bucket{{job=\"{BRIDGE_JOB}\"}}[{window}])))"
            );
            let native_q =
                scalar(port, &native_promql).unwrap_or_else(|| panic!("no data: {native_promql}"));
            let classic_q = scalar(port, &classic_promql)
                .unwrap_or_else(|| panic!("no data: {classic_promql}"));
            let native_error = (native_q - want) / want;
            let classic_error = (classic_q - want) / want;
            let name = format!("p{}", q * 100.0);
            table.push_str(&format!(
                "{label:<6} {name:>5} {want:>11.6} {native_q:>11.6} {:>+7.2}% {classic_q:>11.6} {:>+7.2}%\n",
                native_error * 100.0,
                classic_error * 100.0
            ));
            if native_error.is_nan() || native_error.abs() > MAX_NATIVE_ERROR {
                too_far.push(format!("{label} {name}: {native_error:+.4}"));
            }
        }
        let values = exact.of(family);
        table.push_str(&format!(
            "{label:<6} values {:.6} to {:.6} s; native schema {schema} (a bucket spans a factor {ratio:.4})\n",
            values[0],
            values[values.len() - 1]
        ));
    }
    (table, too_far)
}

/// Every query of the native-histogram dashboards returns finite data and
/// every variable finds values; returns how many queries were checked.
fn assert_dashboards_answer(port: u16, window: &str) -> usize {
    let mut checked = 0;
    for (path, dashboard) in dashboards::native_dashboards() {
        let name = path.display();
        // Rate interval and range cover the whole run.
        let ranges = [("__rate_interval", window), ("__range", window)];
        for expr in dashboards::all_exprs(&path, &dashboard, 10) {
            let promql = dashboards::substitute(&expr, &ranges);
            let series = result(port, &promql);
            assert!(!series.is_empty(), "{name}: no data for {promql}");
            for s in &series {
                let v = s["value"][1].as_str().and_then(|v| v.parse::<f64>().ok());
                assert!(v.is_some_and(f64::is_finite), "{name}: {promql} gives {s}");
            }
            checked += 1;
        }
        for (var, selector) in dashboards::label_value_selectors(&dashboard) {
            let promql = format!(
                "count by ({var}) ({})",
                dashboards::substitute(&selector, &ranges)
            );
            assert!(
                !result(port, &promql).is_empty(),
                "{name}: variable {var} finds nothing: {promql}"
            );
        }
    }
    checked
}

mod needs_collector_prometheus {
    use super::*;

    #[test]
    fn through_the_collector() {
        native_histograms_through(Route::Collector);
    }

    #[test]
    fn through_the_gateway_tier() {
        native_histograms_through(Route::GatewayTier);
    }
}
