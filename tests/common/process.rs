//! Processes: the built binary run to its end (`replay` among its
//! commands), child processes started for a test and killed after it, their
//! output gathered, waiting for what they make, and one test at a time for
//! the tests whose processes would blur each other's timing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The built command-line binary.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vllm-otel-metrics"))
}

/// Runs the binary with `args`; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    run_with_env(args, &[])
}

/// [`run`] with `env` added to the environment.
pub fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    outcome(Command::new(binary()).args(args).envs(env.iter().copied()))
}

/// Runs `command` to its end: (exit code, stdout, stderr).
fn outcome(command: &mut Command) -> (i32, String, String) {
    let output = command.output().expect("the binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).expect("utf-8 stdout"),
        String::from_utf8(output.stderr).expect("utf-8 stderr"),
    )
}

/// Runs `command` with `input` on its standard input; returns its output.
pub fn run_with_stdin(command: &mut Command, input: &str) -> std::process::Output {
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
pub fn replay(trace: &Path) -> (i32, String, String) {
    replay_with(trace, &[])
}

/// [`replay`] with `extra` arguments.
pub fn replay_with(trace: &Path, extra: &[&str]) -> (i32, String, String) {
    replay_with_env(
        trace,
        &[&["--output", "prometheus"][..], extra].concat(),
        &[],
    )
}

/// `replay FILE --metrics-addr none --target TARGET` with `extra`
/// arguments: the trace streamed to a `serve` at `target`.
pub fn replay_to(trace: &Path, target: &str, extra: &[&str]) -> (i32, String, String) {
    replay_with_env(trace, &[&["--target", target][..], extra].concat(), &[])
}

/// `replay FILE --metrics-addr none` with `args` (no `--output` unless
/// they give one) and `env` added to an environment without
/// `OTEL_EXPORTER_OTLP_ENDPOINT`: the trace goes nowhere the arguments
/// and `env` do not send it. Every `replay` above is one of these.
pub fn replay_with_env(trace: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let trace = trace.to_str().expect("utf-8 path");
    outcome(
        Command::new(binary())
            .args(["replay", trace, "--metrics-addr", "none"])
            .args(args)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .envs(env.iter().copied()),
    )
}

/// A child process killed when dropped.
#[derive(Debug)]
pub struct Guard(pub std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `command` with stdin closed and stdout and stderr appended to
/// `log` (a restarted process adds to its log); killed when the guard drops.
pub fn spawn_logged(command: &mut Command, log: &Path, what: &str) -> Guard {
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
pub fn lines_of(
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

/// Polls `check` every 100 ms until it returns `Some`, or panics after `secs`.
pub fn wait_for<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
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

/// Like [`wait_for`], but returns `None` at the deadline (to report details).
pub fn wait_for_optional<T>(secs: u64, mut check: impl FnMut() -> Option<T>) -> Option<T> {
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

/// Holds the test binary's one lock: the tests that take it run one at a
/// time (each starts processes that would blur the others' timing).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
