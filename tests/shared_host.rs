//! `serve` on a host other users share: what one sender can make the
//! sidecar hold (peak memory read from `/proc/PID/status`, VmHWM), the
//! streams of one connection, connections that only answer pings, and a
//! parent that is gone before the sidecar starts.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod process;
    pub mod serve;
}

use std::future::Future;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use common::serve::Server;

/// A 16 MiB `Record` of empty records: `batch` (field 10) holding `0a 00`
/// (an empty `records` element) over and over. Protobuf decodes each two
/// bytes into a whole `Record`.
fn empty_records_message() -> Vec<u8> {
    const BYTES: usize = 16 << 20;
    let inner = (BYTES - 16) / 2 * 2;
    let mut message = vec![0x52];
    let mut length = inner;
    while length >= 0x80 {
        message.push((length as u8) | 0x80);
        length >>= 7;
    }
    message.push(length as u8);
    message.extend(std::iter::repeat_n([0x0a, 0x00], inner / 2).flatten());
    message
}

/// A process's peak resident memory, kB.
fn vm_hwm(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// One gRPC message frame: a flag byte, the length (big-endian), the bytes.
fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    frame
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

type Connection = h2::client::Connection<tokio::net::TcpStream, bytes::Bytes>;

/// An HTTP/2 connection to the ingest port, for the caller to drive.
async fn handshake(port: u16) -> (h2::client::SendRequest<bytes::Bytes>, Connection) {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    h2::client::handshake(tcp).await.unwrap()
}

/// An HTTP/2 connection to the ingest port, driven by a task of its own.
async fn connect(
    port: u16,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let (send, connection) = handshake(port).await;
    (send, tokio::spawn(connection))
}

/// Opens the ingest stream on `send`.
async fn open_stream(
    send: h2::client::SendRequest<bytes::Bytes>,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    open_stream_with(send, None).await
}

/// [`open_stream`], with `authorization: Bearer TOKEN` when given.
async fn open_stream_with(
    send: h2::client::SendRequest<bytes::Bytes>,
    token: Option<&str>,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let mut send = send.ready().await.unwrap();
    let mut request = http::Request::post("http://127.0.0.1/vllm_otel_metrics.v1.Ingest/Stream")
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    send.send_request(request.body(()).unwrap(), false).unwrap()
}

/// The grpc-status and grpc-message of a finished call (trailers, or the
/// headers of a trailers-only answer).
async fn status_of(response: h2::client::ResponseFuture) -> (String, String) {
    let (status, message, _) = answer_of(response).await;
    (status, message)
}

/// [`status_of`] and the body of the answer.
async fn answer_of(response: h2::client::ResponseFuture) -> (String, String, Vec<u8>) {
    let response = response.await.unwrap();
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let mut summary = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        let _ = body.flow_control().release_capacity(data.len());
        summary.extend_from_slice(&data);
    }
    let trailers = body.trailers().await.unwrap().unwrap_or(headers);
    let get = |key: &str| {
        trailers
            .get(key)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    (
        get("grpc-status"),
        percent_decoded(&get("grpc-message")),
        summary,
    )
}

/// A `grpc-message` as written (it travels percent-encoded).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `data` on `stream`, waiting for window as the peer reads.
async fn send_all(stream: &mut h2::SendStream<bytes::Bytes>, data: Vec<u8>, end: bool) -> bool {
    let mut data = bytes::Bytes::from(data);
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let granted = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            _ => return false,
        };
        if stream
            .send_data(data.split_to(granted.min(data.len())), false)
            .is_err()
        {
            return false;
        }
    }
    !end || stream.send_data(bytes::Bytes::new(), true).is_ok()
}

/// Finding: one 16 MiB message of empty records took 7.6 GB and 11 s.
/// Now it is refused before it is decoded: counted once, named, the stream
/// goes on, and the sidecar's peak memory stays within 64 MB of idle.
#[test]
fn a_16_mib_batch_of_empty_records_is_refused_before_it_is_decoded() {
    let server = Server::start(&["--max-message-bytes", &(17 << 20).to_string()]);
    let pid = server.process.0.id();
    let idle = vm_hwm(pid);
    let message = empty_records_message();
    let (status, summary) = runtime().block_on(async {
        let (send, _connection) = connect(server.ingest).await;
        let (response, mut stream) = open_stream(send).await;
        let abort = {
            use prost::Message;
            use vllm_otel_metrics::sources::ingest::proto::pb;
            pb::Record {
                record: Some(pb::record::Record::Abort(pb::Abort {
                    request_id: "after".into(),
                    received_at: Some(1.0),
                })),
            }
            .encode_to_vec()
        };
        let mut frames = grpc_frame(&message);
        frames.extend(grpc_frame(&abort));
        assert!(send_all(&mut stream, frames, true).await);
        let (status, _, summary) = answer_of(response).await;
        (status, summary)
    });
    assert_eq!(status, "0");
    let summary = {
        use prost::Message;
        vllm_otel_metrics::sources::ingest::proto::pb::IngestSummary::decode(&summary[5..]).unwrap()
    };
    assert_eq!(
        (
            summary.records_applied,
            summary.records_rejected,
            summary.first_rejections.clone()
        ),
        (
            1,
            1,
            vec![
                "record 1: a record batch of more than 1024 records (--max-records-per-batch); refused before decoding"
                    .to_owned(),
                // Applied: it changes no metric, for a request never started.
                "record 2: abort for unknown or already finished request 'after'".to_owned(),
            ]
        ),
        "{summary:?}"
    );
    assert_eq!(
        server.sample(r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#),
        Some(1.0),
        "one message, one count (was 8,388,568)"
    );
    let peak = vm_hwm(pid);
    eprintln!("VmHWM: idle {idle} kB, after the message {peak} kB");
    assert!(
        peak < idle + 64 * 1024,
        "peak {peak} kB, idle {idle} kB: more than 64 MB above idle"
    );
}

/// The same message over the ingest socket: refused alike, and the next
/// message on the connection is applied.
#[test]
fn a_16_mib_batch_of_empty_records_on_the_socket_is_refused_alike() {
    let dir = common::paths::tempdir("shared-host-socket");
    let path = dir.join("ingest.sock");
    let server = Server::start(&[
        "--ingest-socket",
        path.to_str().unwrap(),
        "--max-message-bytes",
        &(17 << 20).to_string(),
    ]);
    let pid = server.process.0.id();
    let idle = vm_hwm(pid);
    let message = empty_records_message();
    let mut socket = std::os::unix::net::UnixStream::connect(&path).unwrap();
    socket
        .write_all(&(message.len() as u32).to_le_bytes())
        .unwrap();
    socket.write_all(&message).unwrap();
    drop(socket);
    use vllm_otel_metrics::sources::ingest::proto::pb;
    common::serve::send_over_socket(
        &path,
        &[pb::Record {
            record: Some(pb::record::Record::Abort(pb::Abort {
                request_id: "after".into(),
                received_at: Some(1.0),
            })),
        }],
    );
    common::process::wait_for(20, "the refused message to be counted", || {
        server
            .sample(r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#)
            .filter(|n| *n == 1.0)
    });
    let peak = vm_hwm(pid);
    eprintln!("VmHWM: idle {idle} kB, after the message {peak} kB");
    assert!(peak < idle + 64 * 1024, "peak {peak} kB, idle {idle} kB");
}

/// Finding: 64 connections, each holding a 16 MiB message that never ends,
/// could make the sidecar hold a GiB. The bytes of unfinished messages are
/// bounded over all streams (`--ingest-max-buffered-bytes`): the streams
/// past the bound wait for room, reading nothing, and every message that
/// does not arrive in full within its deadline ends its stream.
#[test]
fn sixty_four_unfinished_16_mib_messages_stay_under_256_mb() {
    let server = Server::start(&[
        "--max-message-bytes",
        &(17 << 20).to_string(),
        // 16 MiB: 4 s.
        "--ingest-message-deadline",
        "2",
        "--ingest-message-deadline-per-mib",
        "0.125",
    ]);
    let pid = server.process.0.id();
    let idle = vm_hwm(pid);
    let outcomes = runtime().block_on(async {
        let mut calls = Vec::new();
        for _ in 0..64 {
            let (send, connection) = connect(server.ingest).await;
            let (response, mut stream) = open_stream(send).await;
            calls.push(tokio::spawn(async move {
                // The whole header and all but the last byte of the message.
                let mut frame = grpc_frame(&vec![0x0a; 16 << 20]);
                frame.pop();
                let sent = tokio::time::timeout(
                    Duration::from_secs(20),
                    send_all(&mut stream, frame, false),
                )
                .await;
                let status = tokio::time::timeout(Duration::from_secs(10), status_of(response))
                    .await
                    .unwrap_or_else(|_| ("pending".to_owned(), String::new()));
                (sent.is_ok(), status, stream, connection)
            }));
        }
        let mut outcomes = Vec::new();
        for call in calls {
            outcomes.push(call.await.unwrap());
        }
        // Read while every connection is still open.
        let peak = vm_hwm(pid);
        (
            outcomes
                .iter()
                .map(|(_, status, _, _)| status.clone())
                .collect::<Vec<_>>(),
            peak,
        )
    });
    let (statuses, peak) = outcomes;
    let late = statuses
        .iter()
        .filter(|(code, message)| {
            code == "4"
                && (message.contains(" of its 16777216 bytes arrived within its deadline of 4.0 s")
                    || message
                        .contains("no room for its 16777216 bytes within its deadline of 4.0 s"))
        })
        .count();
    eprintln!("VmHWM: idle {idle} kB, with 64 unfinished messages {peak} kB");
    // 32 MiB of room: two 16 MiB messages at a time are held, the others
    // wait for room (each gets it when two before it end); every one ends
    // at its deadline, counted.
    assert_eq!(late, 64, "{statuses:?}");
    assert_eq!(
        server.sample(r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#),
        Some(64.0)
    );
    assert!(
        peak < idle + 256 * 1024,
        "peak {peak} kB, idle {idle} kB: more than 256 MB above idle"
    );
}

/// Finding: no `max_concurrent_streams` (tonic passed none, which removed
/// hyper's default). The server now announces the bound in its SETTINGS.
#[test]
fn one_connection_carries_a_bounded_number_of_streams() {
    let server = Server::start(&["--ingest-max-streams-per-connection", "3"]);
    let bound = runtime().block_on(async {
        let (_send, mut connection) = handshake(server.ingest).await;
        // The server's SETTINGS come before its answer to a ping.
        let mut pings = connection.ping_pong().unwrap();
        let ping = pings.ping(h2::Ping::opaque());
        tokio::pin!(ping);
        std::future::poll_fn(|cx| {
            let _ = std::pin::Pin::new(&mut connection).poll(cx);
            ping.as_mut().poll(cx)
        })
        .await
        .unwrap();
        connection.max_concurrent_send_streams()
    });
    assert_eq!(bound, 3, "the streams one connection may open at once");
}

/// Finding: a connection's idle timer was reset by any byte, the replies
/// to pings included, so connections that never open a stream held every
/// ingest slot. Now only streams keep a connection: one that pings and
/// never opens a stream is closed after the idle timeout.
#[test]
fn a_connection_that_only_answers_pings_is_closed_when_idle() {
    let server = Server::start(&["--idle-timeout", "1"]);
    let closed_after = runtime().block_on(async {
        let (_send, mut connection) = handshake(server.ingest).await;
        let mut pings = connection.ping_pong().unwrap();
        let began = Instant::now();
        let driver = tokio::spawn(connection);
        loop {
            if began.elapsed() > Duration::from_secs(10) {
                return None;
            }
            // Bytes both ways every 100 ms.
            if pings.ping(h2::Ping::opaque()).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = driver.await;
        Some(began.elapsed())
    });
    let closed_after = closed_after.expect("the server closed the connection within 10 s");
    assert!(
        closed_after >= Duration::from_millis(900),
        "closed after {closed_after:?}, before the idle timeout"
    );
    // A connection with a stream open is kept however long it is quiet.
    let kept = runtime().block_on(async {
        let (send, connection) = connect(server.ingest).await;
        let (_response, _stream) = open_stream(send).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        !connection.is_finished()
    });
    assert!(kept, "a connection with an open stream was closed");
}

/// Finding: `--exit-with-parent` took the parent's pid after the OTLP
/// setup and both binds; a sidecar whose supervisor died before that kept
/// the ports for good. With `--parent-pid`, one whose parent is already
/// another process exits at once and binds nothing.
#[test]
fn a_sidecar_whose_parent_is_gone_exits_at_once() {
    let ingest = common::http::free_port();
    let began = Instant::now();
    let (status, _, stderr) = common::process::run(&[
        "serve",
        "--parent-pid",
        // Never this test process's own child's parent.
        "1",
        "--ingest-addr",
        &format!("127.0.0.1:{ingest}"),
        "--metrics-addr",
        "none",
    ]);
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(
        stderr.trim(),
        "the parent process (pid 1) ended before this one started: exiting"
    );
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert!(
        std::net::TcpListener::bind(("127.0.0.1", ingest)).is_ok(),
        "the port was never taken"
    );

    // The race itself: the supervisor (a shell) starts the sidecar with its
    // own pid and exits at once. Whichever comes first, the sidecar ends.
    let ingest = common::http::free_port();
    let shell = format!(
        "{} serve --parent-pid $$ --ingest-addr 127.0.0.1:{ingest} --metrics-addr none & echo $!",
        common::process::binary().display()
    );
    let output = Command::new("sh").args(["-c", &shell]).output().unwrap();
    let pid: u32 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap();
    common::process::wait_for(10, "the orphaned sidecar to exit", || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next());
        (stat.is_empty() || state == Some("Z")).then_some(())
    });
}

/// A message above `--max-message-bytes` ends its stream on its header,
/// counted, without a byte of it kept or a share of the buffered bound.
#[test]
fn a_message_above_the_size_limit_ends_its_stream_counted() {
    let server = Server::start(&["--max-message-bytes", "1048576"]);
    let (code, message) = runtime().block_on(async {
        let (send, _connection) = connect(server.ingest).await;
        let (response, mut stream) = open_stream(send).await;
        let mut header = vec![0];
        header.extend_from_slice(&(2u32 << 20).to_be_bytes());
        let _ = send_all(&mut stream, header, false).await;
        status_of(response).await
    });
    assert_eq!(code, "3", "INVALID_ARGUMENT: {message}");
    assert_eq!(
        message,
        "record 1: cannot read the message (a message of 2097152 bytes, above the 1048576 of --max-message-bytes); 0 record(s) before it were applied"
    );
    assert_eq!(
        server.sample(r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#),
        Some(1.0)
    );
}

/// Finding 10: one `--auth-token-file` guarded `/metrics` and ingest, so a
/// scrape credential could write records. `--ingest-auth-token-file` gives
/// ingest a token of its own; `/metrics` keeps `--auth-token-file`'s, here
/// none (the vLLM plugin starts its sidecar so: `/metrics` open, as vLLM's).
#[test]
fn ingest_takes_a_token_of_its_own() {
    let dir = common::paths::tempdir("shared-host-token");
    let token_file = dir.join("ingest-token");
    std::fs::write(&token_file, "ingest-only\n").unwrap();
    // Server::start scrapes /metrics without a token before it returns.
    let server = Server::start(&["--ingest-auth-token-file", token_file.to_str().unwrap()]);
    let codes = runtime().block_on(async {
        let mut codes = Vec::new();
        for token in [None, Some("wrong"), Some("ingest-only")] {
            let (send, _connection) = connect(server.ingest).await;
            let (response, mut stream) = open_stream_with(send, token).await;
            let _ = stream.send_data(bytes::Bytes::new(), true);
            codes.push(status_of(response).await.0);
        }
        codes
    });
    // UNAUTHENTICATED, UNAUTHENTICATED, OK.
    assert_eq!(codes, ["16", "16", "0"]);
    std::fs::remove_dir_all(dir).ok();
}

/// Finding 3: a stream's records were applied on the runtime's only worker
/// in one go, so a large batch held up `/metrics` and every other stream
/// until its last record. Now the worker is given back between records: a
/// scrape made while a batch of 100,000 records is applied sees part of it.
#[test]
fn metrics_are_served_while_a_large_batch_is_applied() {
    use vllm_otel_metrics::sources::ingest::proto::pb;
    const RECORDS: usize = 100_000;
    let dir = common::paths::tempdir("shared-host-stall");
    let path = dir.join("ingest.sock");
    let server = Server::start(&[
        "--ingest-socket",
        path.to_str().unwrap(),
        "--max-records-per-batch",
        &RECORDS.to_string(),
        "--max-message-bytes",
        &(128 << 20).to_string(),
        "--ingest-max-buffered-bytes",
        &(128 << 20).to_string(),
    ]);
    // Aborts of requests never started: each counts once, as it is applied.
    // Their ids are long, so that the batch (40 MB) decodes within the decode
    // budget (a record of a few bytes decodes into a whole `Record`).
    let records = (0..RECORDS)
        .map(|i| pb::Record {
            record: Some(pb::record::Record::Abort(pb::Abort {
                request_id: format!("r{i:0>400}"),
                received_at: Some(1.0),
            })),
        })
        .collect();
    let batch = pb::Record {
        record: Some(pb::record::Record::Batch(pb::RecordBatch { records })),
    };
    let sender = std::thread::spawn(move || common::serve::send_over_socket(&path, &[batch]));
    let key = r#"vllm_otel_metrics_rejected_inputs_total{reason="unknown_request"}"#;
    // Scrapes back to back, until one sees the batch.
    let began = Instant::now();
    let first_seen = loop {
        if let Some(seen) = server.sample(key).filter(|n| *n > 0.0) {
            break seen;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the batch never arrived"
        );
    };
    sender.join().unwrap();
    eprintln!("the first scrape that saw the batch saw {first_seen} of its {RECORDS} records");
    assert!(
        first_seen < RECORDS as f64,
        "the first scrape that saw the batch saw all of it ({first_seen}): /metrics waited for the batch"
    );
    common::process::wait_for(60, "the whole batch", || {
        server.sample(key).filter(|n| *n == RECORDS as f64)
    });
    std::fs::remove_dir_all(dir).ok();
}

/// A batch of `count` aborts of requests never started, each id `id_bytes`
/// long: applied, each counts once as `unknown_request`.
fn aborts(
    tag: &str,
    count: usize,
    id_bytes: usize,
) -> vllm_otel_metrics::sources::ingest::proto::pb::Record {
    use vllm_otel_metrics::sources::ingest::proto::pb;
    let records = (0..count)
        .map(|i| {
            let mut request_id = format!("{tag}-{i}-");
            request_id.extend(std::iter::repeat_n('x', id_bytes - request_id.len()));
            pb::Record {
                record: Some(pb::record::Record::Abort(pb::Abort {
                    request_id,
                    received_at: Some(1.0),
                })),
            }
        })
        .collect();
    pb::Record {
        record: Some(pb::record::Record::Batch(pb::RecordBatch { records })),
    }
}

const UNKNOWN: &str = r#"vllm_otel_metrics_rejected_inputs_total{reason="unknown_request"}"#;
const INVALID: &str = r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#;

/// Finding: a stream that sent a message's header and then nothing held
/// room for the whole message for as long as it stayed open, and an open
/// stream is never idle. Now the message must arrive within its deadline
/// (`--ingest-message-deadline` plus `--ingest-message-deadline-per-mib`
/// for each MiB): the stream ends, counted, named and logged.
#[test]
fn a_stalled_message_ends_its_stream_at_its_deadline() {
    let mut server = Server::start(&[
        "--ingest-message-deadline",
        "1",
        "--ingest-message-deadline-per-mib",
        "0.1",
    ]);
    let log = common::process::lines_of(server.process.0.stderr.take().unwrap());
    let began = Instant::now();
    let (code, message) = runtime().block_on(async {
        let (send, _connection) = connect(server.ingest).await;
        let (response, mut stream) = open_stream(send).await;
        let mut header = vec![0];
        header.extend_from_slice(&(16u32 << 20).to_be_bytes());
        let _ = send_all(&mut stream, header, false).await;
        tokio::time::timeout(Duration::from_secs(20), status_of(response))
            .await
            .expect("the stream was ended")
    });
    let took = began.elapsed();
    assert_eq!(code, "4", "DEADLINE_EXCEEDED: {message}");
    assert_eq!(
        message,
        "record 1: cannot read the message (0 of its 16777216 bytes arrived within its deadline of 2.6 s (--ingest-message-deadline, --ingest-message-deadline-per-mib)); 0 record(s) before it were applied"
    );
    assert!(took >= Duration::from_millis(2500), "ended after {took:?}");
    assert_eq!(server.sample(INVALID), Some(1.0));
    let logged = common::process::wait_for(10, "the log line", || {
        log.lock()
            .unwrap()
            .iter()
            .find(|line| line.contains("ingest stream 1 from 127.0.0.1:"))
            .cloned()
    });
    assert!(
        logged
            .contains("ended: record 1: cannot read the message (0 of its 16777216 bytes arrived"),
        "{logged}"
    );
}

/// The same on the ingest socket: a byte every half second used to keep a
/// connection (any byte reset the idle timeout) and its message's room.
#[test]
fn a_message_trickled_over_the_socket_ends_its_connection_at_its_deadline() {
    let dir = common::paths::tempdir("shared-host-trickle");
    let path = dir.join("ingest.sock");
    let server = Server::start(&[
        "--ingest-socket",
        path.to_str().unwrap(),
        "--idle-timeout",
        "2",
        "--ingest-message-deadline",
        "1",
        "--ingest-message-deadline-per-mib",
        "1",
    ]);
    let mut socket = std::os::unix::net::UnixStream::connect(&path).unwrap();
    // A 1 MiB message: 2 s to arrive in full.
    socket.write_all(&(1u32 << 20).to_le_bytes()).unwrap();
    let began = Instant::now();
    let closed = loop {
        std::thread::sleep(Duration::from_millis(500));
        if socket.write_all(b"x").is_err() {
            break began.elapsed();
        }
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the connection was kept"
        );
    };
    assert!(closed >= Duration::from_secs(2), "closed after {closed:?}");
    common::process::wait_for(10, "the late message to be counted", || {
        server.sample(INVALID).filter(|n| *n == 1.0)
    });
    std::fs::remove_dir_all(dir).ok();
}

/// Finding: a stream held the room of the largest message it had had for
/// as long as it was open, so one stream left open after one large message
/// took a share of `--ingest-max-buffered-bytes` for good. Now room is lent
/// for one message and given back once it has been applied: with 2 MiB of
/// room, two streams open side by side each get a 1.5 MB message applied,
/// over gRPC and over the socket.
#[test]
fn room_is_given_back_once_a_message_is_applied() {
    let dir = common::paths::tempdir("shared-host-lent");
    let path = dir.join("ingest.sock");
    let server = Server::start(&[
        "--ingest-socket",
        path.to_str().unwrap(),
        "--ingest-max-buffered-bytes",
        "2097152",
        "--max-request-id-bytes",
        "2048",
    ]);
    use prost::Message;
    // 1,000 records of 1,500 bytes: about 1.5 MB.
    let batch = |tag: &str| aborts(tag, 1000, 1500);
    assert!(batch("a").encoded_len() > 1_500_000);
    // Over the socket.
    let first = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let message = |tag: &str| {
        let body = batch(tag).encode_to_vec();
        let mut bytes = (body.len() as u32).to_le_bytes().to_vec();
        bytes.extend(body);
        bytes
    };
    (&first).write_all(&message("socket-a")).unwrap();
    common::process::wait_for(20, "the first connection's message", || {
        server.sample(UNKNOWN).filter(|n| *n == 1000.0)
    });
    // The first connection stays open; the second's message is applied.
    let second = std::os::unix::net::UnixStream::connect(&path).unwrap();
    (&second).write_all(&message("socket-b")).unwrap();
    common::process::wait_for(20, "the second connection's message", || {
        server.sample(UNKNOWN).filter(|n| *n == 2000.0)
    });
    assert_eq!(server.sample(INVALID), Some(0.0));
    drop((first, second));

    // Over gRPC (no socket: the port has all the room).
    let server = Server::start(&[
        "--ingest-max-buffered-bytes",
        "2097152",
        "--max-request-id-bytes",
        "2048",
    ]);
    let codes = runtime().block_on(async {
        let mut open = Vec::new();
        for tag in ["grpc-a", "grpc-b"] {
            let (send, connection) = connect(server.ingest).await;
            let (response, mut stream) = open_stream(send).await;
            assert!(send_all(&mut stream, grpc_frame(&batch(tag).encode_to_vec()), false).await);
            let port = server.metrics;
            let applied = if tag == "grpc-a" { 1000.0 } else { 2000.0 };
            let mut waited = 0;
            while common::exposition::samples(&common::http::http_get(port, "/metrics").unwrap())
                .get(UNKNOWN)
                .copied()
                != Some(applied)
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
                waited += 1;
                assert!(waited < 200, "{tag}'s message was not applied");
            }
            // Kept open.
            open.push((response, stream, connection));
        }
        let mut codes = Vec::new();
        for (response, mut stream, _connection) in open {
            let _ = stream.send_data(bytes::Bytes::new(), true);
            codes.push(status_of(response).await.0);
        }
        codes
    });
    assert_eq!(codes, ["0", "0"]);
    assert_eq!(server.sample(INVALID), Some(0.0));
    std::fs::remove_dir_all(dir).ok();
}

/// The pinned budget: senders on the gRPC port (which any local user can
/// reach) open streams that announce 16 MiB messages and stall. Before, two
/// of them held all of `--ingest-max-buffered-bytes` and the plugin's
/// socket connection was closed at its first message that did not arrive
/// whole in one read. Now the port's streams hold at most half of the room
/// while the socket is served, and each stalled message ends at its
/// deadline, counted: the socket's messages are applied meanwhile.
#[test]
fn stalled_senders_on_the_port_do_not_starve_the_socket() {
    use prost::Message;
    let dir = common::paths::tempdir("shared-host-pinned");
    let path = dir.join("ingest.sock");
    let server = Server::start(&[
        "--ingest-socket",
        path.to_str().unwrap(),
        "--max-request-id-bytes",
        "2048",
        // 16 MiB: 6 s.
        "--ingest-message-deadline",
        "2",
        "--ingest-message-deadline-per-mib",
        "0.25",
    ]);
    const STALLED: usize = 16;
    let port = server.ingest;
    let (opened, all_open) = std::sync::mpsc::channel();
    let attack = std::thread::spawn(move || {
        runtime().block_on(async move {
            let mut calls = Vec::new();
            for _ in 0..STALLED {
                let (send, connection) = connect(port).await;
                let (response, mut stream) = open_stream(send).await;
                calls.push(tokio::spawn(async move {
                    // The header and 1 MiB of a 16 MiB message, then nothing.
                    let mut frame = grpc_frame(&vec![0x0a; 16 << 20]);
                    frame.truncate(5 + (1 << 20));
                    let _ = tokio::time::timeout(
                        Duration::from_secs(30),
                        send_all(&mut stream, frame, false),
                    )
                    .await;
                    let status = tokio::time::timeout(Duration::from_secs(30), status_of(response))
                        .await
                        .unwrap_or_else(|_| ("pending".to_owned(), String::new()));
                    drop((stream, connection));
                    status
                }));
            }
            // Every stream has its header in before the socket sends.
            tokio::time::sleep(Duration::from_millis(500)).await;
            opened.send(Instant::now()).unwrap();
            let mut statuses = Vec::new();
            for call in calls {
                statuses.push(call.await.unwrap());
            }
            statuses
        })
    });
    let attacked_at = all_open.recv().unwrap();
    // The plugin: 20 messages of about 1.5 MB on one connection.
    const MESSAGES: usize = 20;
    let mut socket = std::os::unix::net::UnixStream::connect(&path).unwrap();
    socket
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    for i in 0..MESSAGES {
        let body = aborts(&format!("plugin-{i}"), 1000, 1500).encode_to_vec();
        socket
            .write_all(&(body.len() as u32).to_le_bytes())
            .unwrap();
        socket.write_all(&body).unwrap();
    }
    common::process::wait_for(20, "the socket's messages", || {
        server
            .sample(UNKNOWN)
            .filter(|n| *n == (MESSAGES * 1000) as f64)
    });
    let applied_after = attacked_at.elapsed();
    eprintln!("the socket's {MESSAGES} messages were applied {applied_after:?} after the port's streams stalled");
    assert!(
        applied_after < Duration::from_secs(5),
        "the socket's messages waited for the stalled streams' deadline: {applied_after:?}"
    );
    let statuses = attack.join().unwrap();
    assert!(
        statuses.iter().all(|(code, _)| code == "4"),
        "every stalled stream ends at its deadline: {statuses:?}"
    );
    assert_eq!(server.sample(INVALID), Some(STALLED as f64));
    // The socket connection was never closed: it takes more.
    let body = aborts("plugin-last", 10, 100).encode_to_vec();
    socket
        .write_all(&(body.len() as u32).to_le_bytes())
        .unwrap();
    socket.write_all(&body).unwrap();
    common::process::wait_for(20, "the last message", || {
        server
            .sample(UNKNOWN)
            .filter(|n| *n == (MESSAGES * 1000 + 10) as f64)
    });
    std::fs::remove_dir_all(dir).ok();
}
