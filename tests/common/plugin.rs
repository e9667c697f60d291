//! The vLLM stat-logger plugin (`python/`) in vLLM 0.33.0's environment:
//! its python, the scripts of `tests/vllm/` that drive it, and plugin
//! processes that start their own sidecar.
//!
//! The Python environment comes from `scripts/vllm-env.sh` (the test command
//! runs it first and passes its python in `VLLM_OTEL_METRICS_PYTHON`; without
//! it the test runs the script itself, which needs PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::serve::Server;

/// Runs one of `tests/vllm/*.py` in the vLLM environment; returns its JSON report.
pub fn run_script(script: &str, args: &[&str], dir: &Path) -> Value {
    run_script_with_env(script, args, dir, &[])
}

/// [`run_script`] with extra environment variables.
pub fn run_script_with_env(script: &str, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Value {
    let report = dir.join(format!("{script}.json"));
    let output = Command::new(super::environments::vllm_python())
        .arg(super::paths::repo().join("tests/vllm").join(script))
        .args(args)
        .arg("--report")
        .arg(&report)
        .env("PYTHONPATH", super::paths::repo().join("tests/vllm"))
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

/// The `--max-model-len` the simulated trace and the oracle's loggers share.
pub const MAX_MODEL_LEN: &str = "4096";

/// A simulated trace with preemptions and client aborts: one model
/// (`sim-model-0`), two engines.
pub fn simulated_trace(dir: &Path) -> PathBuf {
    let simulated = dir.join("simulated.jsonl");
    let (code, _, stderr) = super::process::run(&[
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

/// `tests/vllm/oracle.py` on `trace`'s records of `model`, the plugin
/// streaming to `server`; `kv_connector`: both loggers have a MultiConnector
/// (NIXL, CPU offloading, simple CPU offloading) configured.
pub fn run_oracle(
    server: &Server,
    trace: &Path,
    model: &str,
    kv_connector: bool,
    dir: &Path,
) -> Value {
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

/// A JSON list of strings as strings.
pub fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

/// A plugin process of `tests/vllm/supervise.py`, its log lines collected,
/// and whether a Python thread died (a traceback on its stderr, which is
/// passed on to the test's).
#[derive(Debug)]
pub struct PluginProcess {
    /// The python process.
    pub child: std::process::Child,
    /// The lines of its stdout so far.
    pub lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Whether its stderr had a traceback.
    pub traceback: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PluginProcess {
    /// `supervise.py` with `env` added to an environment without
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn start(env: &[(&str, String)]) -> PluginProcess {
        use std::io::BufRead;
        let mut child = Command::new(super::environments::vllm_python())
            .arg(super::paths::repo().join("tests/vllm/supervise.py"))
            .env("PYTHONPATH", super::paths::repo().join("tests/vllm"))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python runs");
        let lines = super::process::lines_of(child.stdout.take().expect("piped stdout"));
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
    pub fn started_sidecar(&self, nth: usize, secs: u64) -> u32 {
        super::process::wait_for(secs, "the plugin's 'started the sidecar' line", || {
            let lines = self.lines.lock().unwrap();
            lines
                .iter()
                .filter_map(|l| l.split("started the sidecar (pid ").nth(1))
                .nth(nth)
                .map(|rest| rest.split(')').next().unwrap().parse().expect("a pid"))
        })
    }

    /// How many of its lines so far contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    /// Waits up to `secs` for a line containing `needle`.
    pub fn wait_line(&self, secs: u64, needle: &str) {
        super::process::wait_for(secs, needle, || (self.count(needle) > 0).then_some(()));
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `pid` is a live process (a zombie is not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit(')').next().unwrap().split_whitespace().next() != Some("Z"))
        .unwrap_or(false)
}

/// A plugin process's environment for a sidecar it starts itself on
/// `ingest` with `/metrics` on `metrics`. The plugin finds the sidecar
/// binary on PATH (this environment's plugin is installed without one):
/// the one cargo built for the tests.
pub fn sidecar_env(ingest: u16, metrics: u16) -> Vec<(&'static str, String)> {
    let path = std::env::join_paths(
        std::iter::once(super::process::binary().parent().unwrap().to_path_buf()).chain(
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
