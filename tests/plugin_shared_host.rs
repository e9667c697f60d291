//! The plugin on a host shared with another user (the impostor), who may
//! have taken its directory, port or lock file first: none of its records
//! or its token reach the impostor.
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

use std::path::Path;
use std::process::Command;

use common::plugin::{alive, sidecar_env, PluginProcess};
use common::process::serial;

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
    common::environments::needs("root");
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
        let lines = common::process::lines_of(child.stdout.take().expect("piped stdout"));
        let impostor = Impostor { child, lines };
        if common::process::wait_for_optional(10, || {
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
    let dir = common::paths::tempdir(&format!("vllm-plugin-impostor-{scenario}"));
    // The temporary directory of both users, as /tmp is.
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let token = format!("impostor-must-not-read-{}", std::process::id());
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ingest, metrics) = (common::http::free_port(), common::http::free_port());
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

mod needs_root_vllm {
    use super::*;

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
}
