//! The vLLM stat-logger plugin (`python/`) against vLLM 0.33.0's own code.
//!
//! The Python environment comes from `scripts/vllm-env.sh` (the test command
//! runs it first and passes its python in `VLLM_OTEL_METRICS_PYTHON`; without
//! it this test runs the script itself, which needs PyPI).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::serve::Server;
// The tests of this file run one at a time: each starts processes of its
// own, and a release build or a trace replay beside the restart test would
// only blur what it measures.
use common::serial;
use common::ONLY_VLLM;
use serde_json::Value;

/// The python of the environment with vLLM and the plugin installed.
fn vllm_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        common::path_from_script(
            "VLLM_OTEL_METRICS_PYTHON",
            "scripts/vllm-env.sh",
            "it installs vLLM 0.33.0 from PyPI",
        )
    })
}

/// Runs one of `tests/vllm/*.py` in the vLLM environment; returns its JSON report.
fn run_script(script: &str, args: &[&str], dir: &Path) -> Value {
    run_script_with_env(script, args, dir, &[])
}

/// [`run_script`] with extra environment variables.
fn run_script_with_env(script: &str, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Value {
    let report = dir.join(format!("{script}.json"));
    let output = Command::new(vllm_python())
        .arg(common::repo().join("tests/vllm").join(script))
        .args(args)
        .arg("--report")
        .arg(&report)
        .env("PYTHONPATH", common::repo().join("tests/vllm"))
        .envs(env.iter().copied())
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&report).expect("report written"))
        .expect("report is JSON")
}

/// `tests/vllm/oracle.py` on `trace`'s records of `model`, the plugin
/// streaming to `server`; `kv_connector`: both loggers have a MultiConnector
/// (NIXL, CPU offloading, simple CPU offloading) configured.
fn run_oracle(server: &Server, trace: &Path, model: &str, kv_connector: bool, dir: &Path) -> Value {
    let metrics_url = format!("http://127.0.0.1:{}/metrics", server.metrics);
    let target = server.target();
    let mut args = vec![
        trace.to_str().expect("utf-8 path"),
        "--model",
        model,
        "--max-model-len",
        MAX_MODEL_LEN,
        "--target",
        &target,
        "--metrics-url",
        &metrics_url,
    ];
    if kv_connector {
        args.push("--kv-connector");
    }
    run_script("oracle.py", &args, dir)
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

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

const MAX_MODEL_LEN: &str = "4096";

/// A simulated trace with preemptions and client aborts: one model
/// (`sim-model-0`), two engines.
fn simulated_trace(dir: &Path) -> PathBuf {
    let simulated = dir.join("simulated.jsonl");
    let (code, _, stderr) = common::run(&[
        "simulate",
        "--seed",
        "7",
        "--models",
        "1",
        "--engines",
        "2",
        "--duration",
        "60",
        "--rate",
        "6",
        "--kv-blocks",
        "500",
        "--abort-rate",
        "0.05",
        "--max-model-len",
        MAX_MODEL_LEN,
        "--metrics-addr",
        "none",
        "--record",
        simulated.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    simulated
}

/// vLLM's `PrometheusStatLogger` and the plugin, fed the same vLLM stats
/// objects, give the same value for every sample of every shared family.
#[test]
fn vllm_logger_and_plugin_agree_on_every_sample() {
    let _serial = serial();
    let dir = common::tempdir("vllm-plugin-oracle");
    let simulated = simulated_trace(&dir);
    let data = common::repo().join("tests/data");
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

/// `record()` never waits for the sidecar: killed, it drops and counts;
/// restarted, the stream resumes and the drop count reaches `/metrics`.
#[test]
fn plugin_outlives_a_sidecar_restart() {
    let _serial = serial();
    let dir = common::tempdir("vllm-plugin-restart");
    let log = dir.join("serve.log");
    let report = run_script(
        "restart.py",
        &[
            common::binary().to_str().unwrap(),
            "--queue",
            "50",
            "--log",
            log.to_str().unwrap(),
        ],
        &dir,
    );
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    // Idle after a burst: the last record still arrives (the thread polls
    // every 50 ms; 2 s leaves room for a loaded machine).
    assert!(report["idle_arrival_seconds"].as_f64().unwrap() < 2.0);
    // Blocking would mean waiting for a connection (2 s) or a full queue
    // (forever); a call that never waits stays far below that even on a
    // loaded machine (its median is under a microsecond).
    assert!(report["down_record_max_seconds"].as_f64().unwrap() < 0.5);
    // 300 records while down, 50 fit in the queue: the rest are dropped,
    // bar the few the broken stream took before its failure was seen.
    let dropped = report["dropped_while_down"].as_u64().unwrap();
    assert!((240..=250).contains(&dropped), "dropped {dropped}");
    assert_eq!(report["queued_while_down"], 50);
    assert_eq!(
        report["sidecar_dropped"].as_f64(),
        report["dropped_total"].as_f64()
    );
    // After the restart: the 50 queued and the 100 new records arrive, but
    // for those dropped while the thread was still backing off.
    let dropped_after = report["dropped_total"].as_u64().unwrap() - dropped;
    assert_eq!(
        report["sidecar_generated_after_restart"].as_f64(),
        Some((50 + 100 - dropped_after) as f64)
    );
}

/// `pip install ./python` in a fresh virtual environment gives the plugin
/// (its gRPC code generated from proto/, its entry point registered) and
/// the sidecar binary on the environment's PATH.
#[test]
fn pip_install_in_a_fresh_environment() {
    let _serial = serial();
    let python3 = common::require_tool(
        "python3",
        "install Python 3 (Debian: apt-get install -y python3 python3-venv)",
    );
    let dir = common::tempdir("vllm-plugin-pip");
    let venv = dir.join("venv");
    let status = Command::new(&python3)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "python3 -m venv failed (Debian: apt-get install -y python3-venv)"
    );
    let output = Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
        ])
        .arg(common::repo().join("python"))
        // Its own target directory: this test runs while cargo may hold the
        // tests' one, and a release build must not wait for it. Under the
        // tests' one when that is set (the test command's cache), where
        // scripts/test.sh has made this release build first (beside the
        // wheel's, which is for another target and shares none of it), so
        // that this build finds it done instead of building it here.
        .env(
            "CARGO_TARGET_DIR",
            std::env::var_os("CARGO_TARGET_DIR")
                .map(|dir| std::path::PathBuf::from(dir).join("wheel"))
                .unwrap_or_else(|| common::repo().join("target/wheel")),
        )
        .output()
        .expect("pip runs");
    assert!(
        output.status.success(),
        "pip install ./python failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sidecar = Command::new(venv.join("bin/vllm-otel-metrics"))
        .arg("--version")
        .output()
        .expect("the installed sidecar runs");
    assert_eq!(
        String::from_utf8_lossy(&sidecar.stdout).trim(),
        format!("vllm-otel-metrics {}", env!("CARGO_PKG_VERSION"))
    );
    let probe = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import importlib.metadata as m, vllm_otel_metrics.v1.ingest_pb2 as pb, vllm_otel_metrics.convert;\
             print(sorted(e.value for e in m.entry_points(group='vllm.stat_logger_plugins')));\
             print(sorted(e.value for e in m.entry_points(group='vllm.general_plugins')));\
             print(pb.Record.DESCRIPTOR.oneofs_by_name['record'].fields[-1].name)",
        ])
        .output()
        .expect("python runs");
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout),
        "['vllm_otel_metrics.plugin:OtelMetricsStatLogger']\n['vllm_otel_metrics.tap:register']\nframes\n",
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
}

/// What a vLLM user then sees: the sidecar fed by the plugin pushes every
/// sample it serves to a real Collector, and one `llm_request` span per
/// finished request, with its preemption count, reaches Jaeger.
#[test]
fn plugin_fed_sidecar_reaches_the_collector_and_jaeger() {
    let _serial = serial();
    use common::collector::Collector;
    use common::jaeger::Jaeger;

    let dir = common::tempdir("vllm-plugin-e2e");
    let trace = simulated_trace(&dir);
    let jaeger = Jaeger::start();
    let collector = Collector::start_tracing_to(&jaeger);
    let instance = format!("plugin-{}", std::process::id());
    let service = format!("vllm-plugin-{}", std::process::id());
    let endpoint = collector.endpoint("grpc");
    let server = Server::start_with(
        &[
            "--token-buckets",
            "python",
            "--max-model-len",
            MAX_MODEL_LEN,
            "--otlp-endpoint",
            &endpoint,
            "--otlp-traces-endpoint",
            &endpoint,
            "--otlp-protocol",
            "grpc",
            "--otlp-names",
            "prometheus",
            "--otlp-interval-ms",
            "500",
        ],
        |command| {
            command
                .env("OTEL_SERVICE_NAME", &service)
                .env(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    format!("service.instance.id={instance}"),
                )
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .env_remove("OTEL_TRACES_SAMPLER");
        },
    );
    let report = run_oracle(&server, &trace, "sim-model-0", false, &dir);
    assert_eq!(report["differing_samples"].as_array().unwrap().len(), 0);
    let finished = report["finished_requests"].as_u64().unwrap() as usize;

    // The Collector shows exactly the sidecar's vllm: samples.
    let exposition = common::http_get(server.metrics, "/metrics").unwrap();
    // The Collector's Prometheus exporter prefixes a label name that starts
    // with one `_` with `key` (vLLM's cache configuration has
    // `_block_size_resolved`); the sidecar's /metrics keeps vLLM's name.
    let served = common::collector::as_exported(&exposition);
    assert!(served.len() > 500, "{} samples", served.len());
    collector.assert_shows(&instance, &served);

    // One span per finished request, carrying the histogram's preemptions.
    let preemptions = jaeger.request_spans_preemptions(&service, finished);
    let histogram_sum: f64 = served
        .iter()
        .filter(|(k, _)| k.starts_with("vllm:request_num_preemptions_sum"))
        .map(|(_, v)| v)
        .sum();
    assert!(preemptions > 0, "the trace preempts");
    assert_eq!(preemptions as f64, histogram_sum);
    eprintln!(
        "{} samples at the Collector, {finished} spans in Jaeger carrying {preemptions} preemptions",
        served.len()
    );
}

/// With `serve --tls-cert … --auth-token-file …`, the plugin's https target,
/// CA file and token file get its records through; a wrong token gets
/// nothing through and is named in the log, which never shows a token.
#[test]
fn plugin_streams_over_tls_with_a_token() {
    let _serial = serial();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = common::pki::make_pki();
    let dir = common::tempdir("vllm-plugin-tls");
    let (token, wrong) = (dir.join("token"), dir.join("wrong"));
    std::fs::write(&token, "plugin-s3cret\n").unwrap();
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let (ingest, metrics) = (common::free_port(), common::free_port());
    let path = |p: &Path| p.to_str().expect("utf-8 path").to_owned();
    let _server = common::Guard(
        Command::new(common::binary())
            .args(["serve", "--ingest-addr", &format!("127.0.0.1:{ingest}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--tls-cert", &path(&pki.server_cert)])
            .args(["--tls-key", &path(&pki.server_key)])
            .args([
                "--auth-token-file",
                &path(&token),
                "--token-buckets",
                "python",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("serve starts"),
    );
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca).unwrap()).unwrap();
    let client = reqwest::blocking::Client::builder()
        .tls_certs_only([ca])
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    let url = format!("https://127.0.0.1:{metrics}/metrics");
    let generated = || -> Option<f64> {
        let text = client
            .get(&url)
            .bearer_auth("plugin-s3cret")
            .send()
            .ok()?
            .text()
            .ok()?;
        common::samples(&text)
            .get(r#"vllm:generation_tokens_total{model_name="m",engine="0"}"#)
            .copied()
    };
    common::wait_for(20, "serve's TLS /metrics", || client.get(&url).send().ok());
    let target = format!("https://localhost:{ingest}");
    let env = |token_file: &Path| {
        [
            ("VLLM_OTEL_METRICS_TARGET", target.clone()),
            ("VLLM_OTEL_METRICS_CA_FILE", path(&pki.ca)),
            ("VLLM_OTEL_METRICS_TOKEN_FILE", path(token_file)),
        ]
    };
    let run = |token_file: &Path, steps: &str| {
        let env = env(token_file);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_script_with_env(
            "secure.py",
            &["--steps", steps, "--seconds", "3"],
            &dir,
            &env,
        )
    };

    let report = run(&token, "10");
    assert_eq!(
        (&report["pending"], &report["dropped"]),
        (&Value::from(0), &Value::from(0)),
        "{report}"
    );
    assert_eq!(generated(), Some(10.0));

    let report = run(&wrong, "5");
    assert_eq!(
        generated(),
        Some(10.0),
        "nothing got through with a wrong token"
    );
    let log = strings(&report["log"]).join("\n");
    assert!(log.contains("UNAUTHENTICATED"), "{log}");
    assert!(
        !log.contains("not-the-token") && !log.contains("plugin-s3cret"),
        "{log}"
    );
}

/// A plugin process of `tests/vllm/supervise.py`, its log lines collected,
/// and whether a Python thread died (a traceback on its stderr, which is
/// passed on to the test's).
struct PluginProcess {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    traceback: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PluginProcess {
    fn start(env: &[(&str, String)]) -> PluginProcess {
        use std::io::BufRead;
        let mut child = Command::new(vllm_python())
            .arg(common::repo().join("tests/vllm/supervise.py"))
            .env("PYTHONPATH", common::repo().join("tests/vllm"))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python runs");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().unwrap().push(line);
            }
        });
        let traceback = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stderr = child.stderr.take().expect("piped stderr");
        let seen = traceback.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.starts_with("Traceback") {
                    seen.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                eprintln!("{line}");
            }
        });
        let process = PluginProcess {
            child,
            lines,
            traceback,
        };
        process.wait_line(60, "ready");
        process
    }

    /// The pid of the `nth` sidecar this process says it started, waiting
    /// up to `secs` for the line.
    fn started_sidecar(&self, nth: usize, secs: u64) -> u32 {
        common::wait_for(secs, "the plugin's 'started the sidecar' line", || {
            let lines = self.lines.lock().unwrap();
            lines
                .iter()
                .filter_map(|l| l.split("started the sidecar (pid ").nth(1))
                .nth(nth)
                .map(|rest| rest.split(')').next().unwrap().parse().expect("a pid"))
        })
    }

    fn count(&self, needle: &str) -> usize {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    fn wait_line(&self, secs: u64, needle: &str) {
        common::wait_for(secs, needle, || (self.count(needle) > 0).then_some(()));
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit(')').next().unwrap().split_whitespace().next() != Some("Z"))
        .unwrap_or(false)
}

/// A plugin process's environment for a sidecar it starts itself on
/// `ingest` with `/metrics` on `metrics`. The plugin finds the sidecar
/// binary on PATH (this environment's plugin is installed without one):
/// the one cargo built for the tests.
fn sidecar_env(ingest: u16, metrics: u16) -> Vec<(&'static str, String)> {
    let path = std::env::join_paths(
        std::iter::once(common::binary().parent().unwrap().to_path_buf()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ),
    )
    .unwrap()
    .into_string()
    .unwrap();
    vec![
        ("PATH", path),
        ("VLLM_OTEL_METRICS_SIDECAR", "auto".to_owned()),
        (
            "VLLM_OTEL_METRICS_TARGET",
            format!("http://127.0.0.1:{ingest}"),
        ),
        (
            "VLLM_OTEL_METRICS_METRICS_ADDR",
            format!("127.0.0.1:{metrics}"),
        ),
    ]
}

/// The plugin starts its sidecar itself (`VLLM_OTEL_METRICS_SIDECAR=auto`,
/// the default): two plugin processes on one host share one sidecar; when
/// the process that started it is killed (SIGKILL) that sidecar ends, and
/// the other plugin starts one; a sidecar that dies is started again; when
/// the last plugin process ends, no sidecar is left.
#[test]
fn plugin_supervises_one_sidecar_per_host() {
    let _serial = serial();
    let dir = common::tempdir("vllm-plugin-supervise");
    let (ingest, metrics) = (common::free_port(), common::free_port());
    let mut env = sidecar_env(ingest, metrics);
    env.push((
        "VLLM_OTEL_METRICS_SIDECAR_LOG",
        dir.join("sidecar.log").display().to_string(),
    ));
    let first = PluginProcess::start(&env);
    let sidecar = first.started_sidecar(0, 30);
    let second = PluginProcess::start(&env);
    // Both stream to the one sidecar: the steps of both add up.
    common::wait_for(30, "steps of both plugins on the sidecar", || {
        let text = common::http_get(metrics, "/metrics")?;
        let steps = common::samples(&text)
            .iter()
            .filter(|(k, _)| k.starts_with("vllm:iteration_tokens_total_count"))
            .map(|(_, v)| *v)
            .sum::<f64>();
        (steps >= 6.0).then_some(())
    });
    assert_eq!(
        second.count("started the sidecar"),
        0,
        "one sidecar per host"
    );

    // The holder is killed: its sidecar ends with it, the other plugin takes
    // the lock and starts a new one.
    send_signal(first.child.id(), "KILL");
    common::wait_for(10, "the killed plugin's sidecar to end", || {
        (!alive(sidecar)).then_some(())
    });
    let replacement = second.started_sidecar(0, 30);
    assert_ne!(replacement, sidecar);

    // A sidecar that dies is started again.
    send_signal(replacement, "KILL");
    second.wait_line(10, "the sidecar ended");
    let restarted = second.started_sidecar(1, 30);
    common::wait_for(30, "the restarted sidecar's /metrics", || {
        common::http_get(metrics, "/metrics")
    });

    // The last plugin process ends: no sidecar is left.
    drop(first);
    let mut second = second;
    use std::io::Write;
    second
        .child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"stop\n")
        .unwrap();
    let status = second.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        !second.traceback.load(std::sync::atomic::Ordering::Relaxed),
        "a thread of the plugin died (its traceback is above)"
    );
    common::wait_for(10, "the last sidecar to end", || {
        (!alive(restarted)).then_some(())
    });
    let log = std::fs::read_to_string(dir.join("sidecar.log")).unwrap();
    assert!(
        log.contains("the parent process") || log.contains("received SIGTERM"),
        "{log}"
    );
}

/// `kill -SIGNAL pid`.
fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// The other user of a shared host in [`plugin_refuses_an_impostor_on_a_shared_host`].
const IMPOSTOR: &str = "vllm-otel-impostor";

/// The output of `id FLAGS [user]`, trimmed, or None when it fails.
fn id(args: &[&str]) -> Option<String> {
    let output = Command::new("id").args(args).output().expect("id runs");
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The impostor's uid and gid; the user is made when it does not exist.
fn impostor_user() -> (u32, u32) {
    let root = id(&["-u"]).as_deref() == Some("0");
    if !root {
        panic!(
            "this test runs processes as another user ({IMPOSTOR}): it must run as root, as the \
             test command does (it then makes that user if it does not exist)"
        );
    }
    if id(&["-u", IMPOSTOR]).is_none() {
        let status = Command::new("useradd")
            .args(["--system", "--no-create-home", IMPOSTOR])
            .status()
            .expect("useradd runs (Debian: apt-get install passwd)");
        assert!(status.success(), "useradd {IMPOSTOR}: {status}");
    }
    let number = |flag: &str| -> u32 {
        id(&[flag, IMPOSTOR])
            .expect("the impostor user exists")
            .parse()
            .expect("a number")
    };
    (number("-u"), number("-g"))
}

/// `tests/vllm/impostor.py` run by the system's python as the impostor
/// user: what it prints, collected.
struct Impostor {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Impostor {
    fn start(uid: u32, gid: u32, args: &[String], stderr: &Path) -> Impostor {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        // The system's python: vLLM's environment is root's, not another
        // user's to run. The script goes on the command line: the checkout
        // may be in a directory that user cannot read.
        let python = Path::new("/usr/bin/python3");
        assert!(
            python.exists(),
            "this test runs /usr/bin/python3 as another user: apt-get install python3"
        );
        let mut child = Command::new(python)
            .uid(uid)
            .gid(gid)
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .arg("-c")
            .arg(include_str!("vllm/impostor.py"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(stderr).unwrap())
            .spawn()
            .expect("/usr/bin/python3 runs as the impostor");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                sink.lock().unwrap().push(line);
            }
        });
        let impostor = Impostor { child, lines };
        if common::wait_for_optional(10, || {
            impostor
                .lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l == "ready")
                .then_some(())
        })
        .is_none()
        {
            panic!(
                "the impostor did not get ready:\n{}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        impostor
    }

    /// What reached it: connections and the bytes they sent.
    fn received(&self) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| *l != "ready").cloned().collect()
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pids of the processes that run as `uid` (real or effective).
fn processes_of(uid: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().map_while(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let uids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .map(|rest| {
                rest.split_whitespace()
                    .filter_map(|u| u.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if uids.iter().take(2).any(|&u| u == uid) {
            pids.push(pid);
        }
    }
    pids
}

/// The files under `dir` (itself included) that `uid` does not own.
fn not_owned_by(dir: &Path, uid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut strays = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.uid() != uid {
            strays.push(format!("{} (uid {})", path.display(), meta.uid()));
        }
        if meta.is_dir() {
            pending.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .map_while(Result::ok)
                    .map(|e| e.path()),
            );
        }
    }
    strays
}

/// One scenario of [`plugin_refuses_an_impostor_on_a_shared_host`]: the
/// impostor lays its traps (`scenario`: its own directory where the
/// plugin's private directory would be, a link there, or only the ingest
/// port), then a plugin process starts beside it. Returns the plugin's log.
fn impostor_scenario(scenario: &str, uid: u32, gid: u32) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::tempdir(&format!("vllm-plugin-impostor-{scenario}"));
    // The temporary directory of both users, as /tmp is.
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let token = format!("impostor-must-not-read-{}", std::process::id());
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ingest, metrics) = (common::free_port(), common::free_port());
    let own_uid = id(&["-u"]).expect("id -u");
    // Where the plugin keeps its files: TMPDIR, without XDG_RUNTIME_DIR.
    let private = tmp.join(format!("vllm-otel-metrics-{own_uid}"));
    let display = |p: &Path| p.display().to_string();
    let mut args = vec![
        "--port".to_owned(),
        ingest.to_string(),
        // Where the plugin's lock file was before: the impostor holds it.
        "--lock".to_owned(),
        display(&tmp.join(format!("vllm-otel-metrics-{ingest}.lock"))),
    ];
    let mut theirs = Vec::new();
    match scenario {
        "directory" => {
            args.extend(["--private-dir".to_owned(), display(&private)]);
            theirs.push(private.clone());
        }
        "link" => {
            let target = tmp.join("impostor-target");
            args.extend([
                "--link".to_owned(),
                display(&private),
                "--to".to_owned(),
                display(&target),
            ]);
            theirs.push(target);
        }
        _ => {}
    }
    let impostor = Impostor::start(uid, gid, &args, &dir.join("impostor.err"));
    let mut env = sidecar_env(ingest, metrics);
    env.extend([
        ("VLLM_OTEL_METRICS_TOKEN_FILE", display(&token_file)),
        ("TMPDIR", display(&tmp)),
        ("XDG_RUNTIME_DIR", String::new()),
    ]);
    let plugin = PluginProcess::start(&env);
    let errors = |plugin: &PluginProcess| -> Vec<String> {
        let lines = plugin.lines.lock().unwrap();
        lines
            .iter()
            .filter(|l| l.starts_with("ERROR "))
            .cloned()
            .collect()
    };
    if scenario == "port" {
        // The sidecar cannot bind the port: it exits (status 4), is tried
        // three times more, then the plugin says so once and stops.
        plugin.wait_line(30, "address in use: another vLLM instance's sidecar");
        let started = plugin.count("started the sidecar");
        std::thread::sleep(std::time::Duration::from_secs(4));
        assert_eq!(
            plugin.count("started the sidecar"),
            started,
            "no restart loop"
        );
        assert_eq!(started, 4, "one start and three retries");
        for nth in 0..started {
            let pid = plugin.started_sidecar(nth, 1);
            assert!(!alive(pid), "sidecar {pid} still runs");
        }
    } else {
        // Time enough for a plugin that would stream to the port to do so.
        std::thread::sleep(std::time::Duration::from_secs(4));
        assert_eq!(plugin.count("started the sidecar"), 0);
    }
    assert!(
        !plugin.traceback.load(std::sync::atomic::Ordering::Relaxed),
        "a thread of the plugin died (its traceback is above)"
    );
    // Nothing at all: not a connection, so neither the token nor a record.
    let token_hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    let received = impostor.received();
    assert!(
        received.is_empty(),
        "the impostor got {} lines (the token among them: {})",
        received.len(),
        received.iter().any(|l| l.contains(&token_hex))
    );
    let log = plugin.lines.lock().unwrap().clone();
    let errors = errors(&plugin);
    assert_eq!(errors.len(), 1, "one clear line:\n{}", log.join("\n"));
    for path in &theirs {
        let strays = not_owned_by(path, uid);
        assert!(
            strays.is_empty(),
            "made in the impostor's {}: {strays:?}",
            path.display()
        );
    }
    let others: Vec<u32> = processes_of(uid)
        .into_iter()
        .filter(|&pid| pid != impostor.child.id())
        .collect();
    assert!(others.is_empty(), "processes run as {IMPOSTOR}: {others:?}");
    drop(plugin);
    drop(impostor);
    log
}

/// On a shared host another user (the impostor) may have made the plugin's
/// private directory, or a link in its place, before it, and may hold the
/// ingest port and the lock file's old path: the plugin streams none of its
/// records (nor its token) to them, makes nothing in their directories,
/// says what is wrong in one line of vLLM's log, and vLLM goes on. With only
/// the port taken, the sidecar it starts cannot listen: after three retries,
/// one line, and no restart loop.
#[test]
fn plugin_refuses_an_impostor_on_a_shared_host() {
    let _serial = serial();
    let (uid, gid) = impostor_user();

    let log = impostor_scenario("directory", uid, gid);
    let error = log.iter().find(|l| l.starts_with("ERROR ")).unwrap();
    assert!(
        error.contains(&format!("belongs to uid {uid}, not to this user"))
            && error.contains("the plugin is off, vLLM goes on"),
        "{error}"
    );

    let log = impostor_scenario("link", uid, gid);
    let error = log.iter().find(|l| l.starts_with("ERROR ")).unwrap();
    assert!(
        error.contains("is a symbolic link (to ") && error.contains("impostor-target"),
        "{error}"
    );

    let log = impostor_scenario("port", uid, gid);
    let error = log.iter().find(|l| l.starts_with("ERROR ")).unwrap();
    assert!(
        error.contains(
            "set VLLM_OTEL_METRICS_TARGET / VLLM_OTEL_METRICS_METRICS_ADDR to free ports"
        ) && error.contains("sidecar-"),
        "{error}"
    );
}
