//! The plugin starts and supervises its sidecar itself: one per host,
//! started again when it dies, none left when the last plugin ends.
//!
//! The Python environment comes from `scripts/vllm-env.sh` (the test command
//! runs it first and passes its python in `VLLM_OTEL_METRICS_PYTHON`; without
//! it the test runs the script itself, which needs PyPI).

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod plugin;
    pub mod process;
    pub mod serve;
}

use std::process::Command;

use common::plugin::{alive, sidecar_env, PluginProcess};
use common::process::serial;

/// `kill -SIGNAL pid`.
fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
}

mod needs_vllm {
    use super::*;

    /// The plugin starts its sidecar itself (`VLLM_OTEL_METRICS_SIDECAR=auto`,
    /// the default): two plugin processes on one host share one sidecar; when
    /// the process that started it is killed (SIGKILL) that sidecar ends, and
    /// the other plugin starts one; a sidecar that dies is started again; when
    /// the last plugin process ends, no sidecar is left.
    #[test]
    fn plugin_supervises_one_sidecar_per_host() {
        let _serial = serial();
        let dir = common::paths::tempdir("vllm-plugin-supervise");
        let (ingest, metrics) = (common::http::free_port(), common::http::free_port());
        let mut env = sidecar_env(ingest, metrics);
        env.push((
            "VLLM_OTEL_METRICS_SIDECAR_LOG",
            dir.join("sidecar.log").display().to_string(),
        ));
        let first = PluginProcess::start(&env);
        let sidecar = first.started_sidecar(0, 30);
        let second = PluginProcess::start(&env);
        // Both stream to the one sidecar: the steps of both add up.
        common::process::wait_for(30, "steps of both plugins on the sidecar", || {
            let text = common::http::http_get(metrics, "/metrics")?;
            let steps = common::exposition::samples(&text)
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
        common::process::wait_for(10, "the killed plugin's sidecar to end", || {
            (!alive(sidecar)).then_some(())
        });
        let replacement = second.started_sidecar(0, 30);
        assert_ne!(replacement, sidecar);

        // A sidecar that dies is started again.
        send_signal(replacement, "KILL");
        second.wait_line(10, "the sidecar ended");
        let restarted = second.started_sidecar(1, 30);
        common::process::wait_for(30, "the restarted sidecar's /metrics", || {
            common::http::http_get(metrics, "/metrics")
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
        common::process::wait_for(10, "the last sidecar to end", || {
            (!alive(restarted)).then_some(())
        });
        let log = std::fs::read_to_string(dir.join("sidecar.log")).unwrap();
        assert!(
            log.contains("the parent process") || log.contains("received SIGTERM"),
            "{log}"
        );
    }
}
