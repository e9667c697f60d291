//! `pip install ./python` in a fresh virtual environment, as a user
//! installs the plugin from source: its build runs cargo for the sidecar
//! (the `dev` profile here, `--release` for a user).

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod paths;
    pub mod process;
}

use std::process::Command;

use common::process::serial;

mod needs_pip {
    use super::*;

    /// `pip install ./python` in a fresh virtual environment gives the plugin
    /// (its gRPC code generated from proto/, its entry point registered) and
    /// the sidecar binary on the environment's PATH.
    #[test]
    fn pip_install_in_a_fresh_environment() {
        let _serial = serial();
        common::environments::needs("pip");
        let python3 = common::environments::require_tool(
            "python3",
            "install Python 3 (Debian: apt-get install -y python3 python3-venv)",
        );
        let dir = common::paths::tempdir("vllm-plugin-pip");
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
        let output = common::environments::pip_install(&venv.join("bin/python"))
            .arg(common::paths::repo().join("python"))
            // The build runs cargo as a user's does, in the tests' own target
            // directory (cargo holds its lock while it builds, not while the
            // tests run) and with the `dev` profile: scripts/test.sh has made
            // that build before the tests, most of it shared with theirs, so
            // this one finds it done. A user's build is `--release`; which
            // profile cargo builds is no part of what this test checks.
            .env(
                "CARGO_TARGET_DIR",
                std::env::var_os("CARGO_TARGET_DIR")
                    .map(std::path::PathBuf::from)
                    .unwrap_or_else(|| common::paths::repo().join("target")),
            )
            .env("VLLM_OTEL_METRICS_CARGO_PROFILE", "dev")
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
}
