//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The built command-line binary.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vllm-otel-metrics"))
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Samples of a text exposition: `name{labels}` exactly as written → value.
/// Panics on a line that is neither a comment nor a `key value` sample.
pub fn samples(exposition: &str) -> BTreeMap<String, f64> {
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
pub fn require_tool(tool: &str, how_to_get_it: &str) -> PathBuf {
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
pub fn python_with_prometheus_client() -> PathBuf {
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
pub fn run(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(binary())
        .args(args)
        .output()
        .expect("the binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).expect("utf-8 stdout"),
        String::from_utf8(output.stderr).expect("utf-8 stderr"),
    )
}

/// `replay FILE --output prometheus --metrics-addr none`.
pub fn replay(trace: &Path) -> (i32, String, String) {
    run(&[
        "replay",
        trace.to_str().expect("utf-8 path"),
        "--output",
        "prometheus",
        "--metrics-addr",
        "none",
    ])
}
