//! `serve --ingest-socket`: the Unix domain socket the plugin streams to
//! the sidecar it started. Records sent over it are applied as over gRPC;
//! a message that does not decode is counted and the next one applied; a
//! length above the bound is counted and ends the connection before
//! anything is allocated; the file is private and removed at exit; only
//! this user's processes are read.

#![cfg(unix)]

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod process;
    pub mod serve;
}

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;

use common::serve::{send_over_socket, Server};
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::sources::ingest::proto::{pb, record_to_proto};

const INVALID: &str = r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#;
const STARTED: &str = r#"{"type":"request","request_id":"REQ","model_name":"m","engine":0,"arrival_time":1700000000.0,"prompt_len":4}"#;
const ABORTED: &str = r#"{"type":"abort","request_id":"REQ","received_at":1700000001.0}"#;
const ABORTS: &str =
    r#"vllm:request_success_total{model_name="m",engine="0",finished_reason="abort"}"#;

fn wire(text: &str, id: &str) -> pb::Record {
    let record: Record = serde_json::from_str(&text.replace("REQ", id)).unwrap();
    record_to_proto(&record)
}

/// A request's start and its abort.
fn aborted(id: &str) -> Vec<pb::Record> {
    vec![wire(STARTED, id), wire(ABORTED, id)]
}

fn serve_on(socket: &Path) -> Server {
    let server = Server::start(&["--ingest-socket", socket.to_str().unwrap()]);
    common::process::wait_for(20, "the ingest socket", || UnixStream::connect(socket).ok());
    server
}

fn wait_for_sample(server: &Server, key: &str, value: f64) {
    common::process::wait_for(20, &format!("{key} = {value}"), || {
        (server.sample(key) == Some(value)).then_some(())
    });
}

fn message(body: &[u8]) -> Vec<u8> {
    let mut bytes = (body.len() as u32).to_le_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

#[test]
fn a_message_that_does_not_decode_is_counted_and_the_next_applied() {
    let dir = common::paths::tempdir("ingest-socket-garbage");
    let socket = dir.join("ingest.sock");
    let server = serve_on(&socket);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the socket file is private");

    let mut stream = UnixStream::connect(&socket).unwrap();
    use prost::Message;
    let mut bytes = message(&wire(STARTED, "a").encode_to_vec());
    // A field of wire type 7, which protobuf does not have.
    bytes.extend(message(&[0x0f, 0x01]));
    bytes.extend(message(&wire(ABORTED, "a").encode_to_vec()));
    stream.write_all(&bytes).unwrap();
    wait_for_sample(&server, ABORTS, 1.0);
    assert_eq!(server.sample(INVALID), Some(1.0));

    // A batch counts its records one by one, as over gRPC.
    let batch = pb::Record {
        record: Some(pb::record::Record::Batch(pb::RecordBatch {
            records: aborted("b"),
        })),
    };
    send_over_socket(&socket, &[batch]);
    wait_for_sample(&server, ABORTS, 2.0);
    assert_eq!(server.sample(INVALID), Some(1.0));
}

#[test]
fn a_length_above_the_bound_is_counted_and_ends_the_connection() {
    let dir = common::paths::tempdir("ingest-socket-long");
    let socket = dir.join("ingest.sock");
    let server = Server::start(&[
        "--ingest-socket",
        socket.to_str().unwrap(),
        "--max-message-bytes",
        "1024",
    ]);
    let mut stream = UnixStream::connect(&socket).unwrap();
    // 4 GiB announced, nothing after it: the sidecar must not wait for it,
    // nor make room for it.
    stream.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let mut rest = Vec::new();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    assert_eq!(
        stream.read_to_end(&mut rest).unwrap(),
        0,
        "the sidecar closes the connection"
    );
    assert_eq!(server.sample(INVALID), Some(1.0));
    // Other connections go on.
    send_over_socket(&socket, &aborted("c"));
    wait_for_sample(&server, ABORTS, 1.0);
}

#[test]
fn the_socket_file_is_replaced_when_stale_refused_when_not_a_socket_and_removed_at_exit() {
    let dir = common::paths::tempdir("ingest-socket-file");
    let socket = dir.join("ingest.sock");
    // A socket nobody listens on any more (its listener dropped).
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let mut server = serve_on(&socket);
    send_over_socket(&socket, &aborted("d"));
    wait_for_sample(&server, ABORTS, 1.0);
    // A second sidecar on the same path: refused, naming it.
    let stderr = refused(&socket);
    assert!(
        stderr.contains(&format!(
            "ingest socket {}: another process listens there",
            socket.display()
        )),
        "{stderr}"
    );
    server.sigterm();
    assert!(!socket.exists(), "serve removes its socket when it ends");

    let file = dir.join("not-a-socket");
    std::fs::write(&file, "data").unwrap();
    let stderr = refused(&file);
    assert!(
        stderr.contains(&format!(
            "ingest socket {}: something other than a socket is there",
            file.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "data");
}

/// The error output of a `serve --ingest-socket path` that must not start.
fn refused(path: &Path) -> String {
    let output = Command::new(common::process::binary())
        .args(["serve", "--ingest-addr", "127.0.0.1:0"])
        .args(["--metrics-addr", "none", "--ingest-socket"])
        .arg(path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn nix_is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // The owner of a file this process makes is its effective user.
    let probe = std::env::temp_dir().join(format!("ingest-socket-uid-{}", std::process::id()));
    std::fs::write(&probe, "").unwrap();
    let uid = std::fs::metadata(&probe).unwrap().uid();
    let _ = std::fs::remove_file(&probe);
    uid == 0
}

/// A connection still open when `serve` shuts down is told how many
/// messages were read before it is closed: its sender sends the rest to the
/// next sidecar.
#[test]
fn at_shutdown_an_open_connection_is_told_how_many_messages_were_read() {
    let dir = common::paths::tempdir("ingest-socket-answer");
    let socket = dir.join("ingest.sock");
    let mut server = Server::start(&[
        "--ingest-socket",
        socket.to_str().unwrap(),
        "--drain-timeout",
        "1",
    ]);
    let mut stream = UnixStream::connect(&socket).unwrap();
    use prost::Message;
    let mut bytes = Vec::new();
    for record in aborted("g") {
        bytes.extend(message(&record.encode_to_vec()));
    }
    // And the first half of a third message, which is not read.
    let third = message(&wire(STARTED, "h").encode_to_vec());
    bytes.extend_from_slice(&third[..third.len() / 2]);
    stream.write_all(&bytes).unwrap();
    wait_for_sample(&server, ABORTS, 1.0);
    let terminated = std::thread::spawn(move || server.sigterm());
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    assert_eq!(answer, 2u64.to_le_bytes());
    assert_eq!(terminated.join().unwrap().code(), Some(0));
}

mod needs_root {
    use super::*;

    /// Another user's process, even one that can reach the file (made
    /// world-writable here), is not read: the sidecar checks the peer's uid.
    #[test]
    fn another_users_process_is_not_read() {
        common::environments::needs("root");
        if !nix_is_root() {
            panic!(
                "this test needs root, to run a client as another user; run the test command as \
             root, as CI does"
            );
        }
        let dir = common::paths::tempdir("ingest-socket-peer");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let socket = dir.join("ingest.sock");
        let server = serve_on(&socket);
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        use prost::Message;
        let mut bytes = Vec::new();
        for record in aborted("e") {
            bytes.extend(message(&record.encode_to_vec()));
        }
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        // The system's Python: one in root's home is not another user's to run.
        let python = Path::new("/usr/bin/python3");
        assert!(
            python.exists(),
            "this test runs /usr/bin/python3 as another user: apt-get install python3"
        );
        use std::os::unix::process::CommandExt;
        let sent = Command::new(python)
            .uid(65534)
            .gid(65534)
            .arg("-c")
            .arg(format!(
                "import socket, sys\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.connect({socket:?})\n\
             try:\n    s.sendall(bytes.fromhex('{hex}'))\n    s.recv(1)\n\
             except OSError:\n    pass\n\
             print('connected')"
            ))
            .output()
            .expect("/usr/bin/python3 runs as uid 65534");
        assert_eq!(
            String::from_utf8_lossy(&sent.stdout).trim(),
            "connected",
            "{}",
            String::from_utf8_lossy(&sent.stderr)
        );
        // This user's process, after it: applied; the other user's never was.
        send_over_socket(&socket, &aborted("f"));
        wait_for_sample(&server, ABORTS, 1.0);
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(server.sample(ABORTS), Some(1.0));
    }
}

/// A live socket whose listen backlog is full refuses no connection: a
/// connect fails with EAGAIN, not ECONNREFUSED. It used to be taken for
/// stale and removed; now it is an error naming the path, and the socket
/// stays, its listener reachable.
#[test]
fn a_live_socket_with_a_full_backlog_is_not_taken_for_stale() {
    use vllm_otel_metrics::sources::ingest::socket::IngestSocket;
    let dir = common::paths::tempdir("ingest-socket-backlog");
    let path = dir.join("ingest.sock");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A backlog of one: two connections fill it.
    let listener = runtime.block_on(async {
        let socket = tokio::net::UnixSocket::new_stream().unwrap();
        socket.bind(&path).unwrap();
        socket.listen(1).unwrap()
    });
    // Fill the backlog: connections nobody accepts, until one would wait.
    let mut waiting = Vec::new();
    runtime.block_on(async {
        loop {
            match tokio::net::UnixStream::connect(&path).await {
                Ok(stream) => waiting.push(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("connecting to fill the backlog: {e}"),
            }
            assert!(waiting.len() < 100, "the backlog never filled");
        }
    });
    let error = runtime
        .block_on(IngestSocket::bind(&path))
        .expect_err("a live socket is not replaced");
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{error}");
    assert!(
        error.to_string().starts_with(&format!(
            "ingest socket {}: a socket is there and may be in use",
            path.display()
        )),
        "{error}"
    );
    // Still the listener's: once one connection is accepted, one more gets in.
    drop(waiting.pop());
    assert!(
        std::fs::symlink_metadata(&path).is_ok(),
        "the live socket was removed"
    );
    let accepted = runtime.block_on(listener.accept());
    assert!(accepted.is_ok(), "{accepted:?}");
    // Nothing else was left in the directory.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["ingest.sock"]);
}

/// Nothing at the path is followed: a link to a stale socket is refused
/// as "something other than a socket", and the link and its target stay.
/// A socket made by `bind` is private from the start, and the temporary
/// name it was bound under is gone.
#[test]
fn a_link_at_the_path_is_not_followed_and_nothing_temporary_is_left() {
    use vllm_otel_metrics::sources::ingest::socket::IngestSocket;
    let dir = common::paths::tempdir("ingest-socket-link");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stale = dir.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let link = dir.join("ingest.sock");
    std::os::unix::fs::symlink(&stale, &link).unwrap();
    let error = runtime.block_on(IngestSocket::bind(&link)).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("something other than a socket is there"),
        "{error}"
    );
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::symlink_metadata(&stale).is_ok());

    let path = dir.join("fresh.sock");
    let socket = runtime.block_on(IngestSocket::bind(&path)).unwrap();
    let mode = std::fs::symlink_metadata(&path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["fresh.sock", "ingest.sock", "stale.sock"]);
    // Reachable at its path.
    runtime.block_on(async {
        tokio::net::UnixStream::connect(&path).await.unwrap();
    });
    drop(socket);
    assert!(
        std::fs::symlink_metadata(&path).is_err(),
        "removed when dropped"
    );
}
