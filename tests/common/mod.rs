//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub(crate) mod collector;
pub(crate) mod jaeger;
pub(crate) mod pki;
pub(crate) mod prometheus;
pub(crate) mod proto_fields;
pub(crate) mod serve;
pub(crate) mod spans;
pub(crate) mod thanos;
pub(crate) mod tier;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `vllm:` families only vLLM's own logger has, beside the plugin-fed
/// sidecar's, each for a reason docs/SEMANTICS.md §3b gives.
pub(crate) const ONLY_VLLM: &[&str] = &[
    // Frontend admission control: vLLM hands it to plugins through
    // `record_admission_rejection`, which no record type carries yet.
    "vllm:admission_rejections",
];

/// The path `variable` names, or else the one `script` (run with bash)
/// prints on its last line; fails saying how to get it (`what` the script
/// needs).
pub(crate) fn path_from_script(variable: &str, script: &str, what: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{variable}={} does not exist: run `bash {script}`",
            path.display()
        );
        return path;
    }
    let output = Command::new("bash")
        .arg(repo().join(script))
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "{script} failed ({what}):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(
        String::from_utf8(output.stdout)
            .expect("utf-8")
            .lines()
            .last()
            .expect("a path")
            .trim(),
    )
}

/// Holds the test binary's one lock: the tests that take it run one at a
/// time (each starts processes that would blur the others' timing).
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The sum of the samples of `name` (any labels) in a text exposition.
pub(crate) fn sum_of(exposition: &str, name: &str) -> f64 {
    samples(exposition)
        .iter()
        .filter(|(key, _)| key.split('{').next() == Some(name))
        .map(|(_, value)| value)
        .sum()
}

/// The sum of the samples of `name` whose label `label` is `value`.
pub(crate) fn sum_where(exposition: &str, name: &str, label: &str, value: &str) -> f64 {
    let with = format!("{label}=\"{value}\"");
    samples(exposition)
        .iter()
        .filter(|(key, _)| {
            key.split_once('{')
                .is_some_and(|(family, labels)| family == name && labels.contains(&with))
        })
        .map(|(_, value)| value)
        .sum()
}

/// The built command-line binary.
pub(crate) fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vllm-otel-metrics"))
}

/// The repository root.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Samples of a text exposition: `name{labels}` exactly as written → value.
/// Panics on a line that is neither a comment nor a `key value` sample.
pub(crate) fn samples(exposition: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in exposition.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample line: {line:?}"));
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|e| panic!("bad value in {line:?}: {e}")),
        };
        assert!(
            out.insert(key.to_owned(), value).is_none(),
            "duplicate sample {key}"
        );
    }
    out
}

/// Fails with instructions when `tool` is not on the PATH (never skips).
pub(crate) fn require_tool(tool: &str, how_to_get_it: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("`{tool}` is required by this test but is not on the PATH: {how_to_get_it}")
    })
}

/// Python 3 with the `prometheus_client` package (fails with instructions otherwise).
pub(crate) fn python_with_prometheus_client() -> PathBuf {
    let python = require_tool(
        "python3",
        "install Python 3 (Debian: apt-get install -y python3)",
    );
    let probe = Command::new(&python)
        .args(["-c", "import prometheus_client"])
        .output()
        .expect("python3 runs");
    assert!(
        probe.status.success(),
        "Python package prometheus_client is required: pip install -r tests/requirements.txt"
    );
    python
}

/// Runs the binary with `args`; returns (exit code, stdout, stderr).
pub(crate) fn run(args: &[&str]) -> (i32, String, String) {
    run_with_env(args, &[])
}

/// [`run`] with `env` added to the environment.
pub(crate) fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let output = Command::new(binary())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).expect("utf-8 stdout"),
        String::from_utf8(output.stderr).expect("utf-8 stderr"),
    )
}

/// Runs `command` with `input` on its standard input; returns its output.
pub(crate) fn run_with_stdin(command: &mut Command, input: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_owned();
    // A writer thread: the child may fill its output pipes before reading all input.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("the child runs");
    writer
        .join()
        .expect("the writer ends")
        .expect("the input is written");
    output
}

/// `replay FILE --output prometheus --metrics-addr none`.
pub(crate) fn replay(trace: &Path) -> (i32, String, String) {
    run(&[
        "replay",
        trace.to_str().expect("utf-8 path"),
        "--output",
        "prometheus",
        "--metrics-addr",
        "none",
    ])
}

/// A port that was free a moment ago on 127.0.0.1, and never handed out
/// before by this test binary: the kernel may give a port back as soon as
/// its listener is dropped, so two calls for one process (Jaeger takes six)
/// could otherwise get the same one, and the second bind fails.
pub(crate) fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// `GET http://127.0.0.1:{port}{path}`; `None` when nothing answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some(dechunk(body));
    }
    Some(body.to_owned())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `secs`.
pub(crate) fn wait_for<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A child process killed when dropped.
pub(crate) struct Guard(pub std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh temporary directory.
pub(crate) fn tempdir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vllm-otel-metrics-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A sample with its labels parsed: family-agnostic key for comparing
/// expositions written by different encoders (label order, `le` spelling).
pub(crate) fn normalized_samples(exposition: &str, drop_labels: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (key, value) in samples(exposition) {
        let (name, labels) = match key.split_once('{') {
            Some((name, rest)) => (name.to_owned(), rest.trim_end_matches('}').to_owned()),
            None => (key.clone(), String::new()),
        };
        let mut pairs: Vec<(String, String)> = split_labels(&labels)
            .into_iter()
            .filter(|(k, _)| !drop_labels.contains(&k.as_str()))
            .map(|(k, v)| {
                let v = if k == "le" && v != "+Inf" {
                    format!("{:?}", v.parse::<f64>().expect("numeric le"))
                } else {
                    v
                };
                (k, v)
            })
            .collect();
        pairs.sort();
        let labels: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        out.insert(format!("{name}{{{}}}", labels.join(",")), value);
    }
    out
}

fn split_labels(labels: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = labels.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'));
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.push(chars.next().unwrap()),
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((name.trim_start_matches(',').to_owned(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    out
}

/// Like [`wait_for`], but returns `None` at the deadline (to report details).
pub(crate) fn wait_for_optional<T>(secs: u64, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Spawns `command` with stdin closed and stdout and stderr appended to
/// `log` (a restarted process adds to its log); killed when the guard drops.
pub(crate) fn spawn_logged(command: &mut Command, log: &Path, what: &str) -> Guard {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    Guard(
        command
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}")),
    )
}

/// Every `expr` string anywhere in a Grafana dashboard (panels, rows,
/// targets, variables).
pub(crate) fn dashboard_exprs(json: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match json {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => dashboard_exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| dashboard_exprs(item, out)),
        _ => {}
    }
}
