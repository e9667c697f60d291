//! gRPC ingest over loopback: a real `serve` process, a client in this
//! process streaming batches shaped like a 256-request engine step.
//!
//! Reports outputs/s sustained (1 and 2 concurrent streams), the added
//! latency per batch (decode + convert + track one 256-output batch, p50 and
//! p99 over many batches), and the server's resident memory with 100,000
//! requests in flight, and what the scan before decoding costs against
//! decoding alone. Run: `cargo bench --bench ingest`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::{
    EngineCoreEvent, EngineCoreOutput, EventType, OutputBatch, PrefillStats, Record, RequestStart,
};
use vllm_otel_metrics::sources::ingest::proto::{pb, record_from_proto, record_to_proto};
use vllm_otel_metrics::tracker::Tracker;

const BATCH: usize = 256;
const OUTPUTS_PER_REQUEST: usize = 128;

/// The records of `steps` engine steps of 256 running requests each; requests
/// finish after 128 outputs and are replaced. `tag` keeps streams' ids apart.
fn workload(tag: &str, steps: usize) -> Vec<pb::Record> {
    let mut records = Vec::new();
    let mut live: Vec<(String, usize)> = Vec::new();
    let mut next = 0u64;
    for step in 0..steps {
        while live.len() < BATCH {
            next += 1;
            let id = format!("{tag}-{next}");
            records.push(record_to_proto(&Record::Request(RequestStart {
                request_id: id.clone(),
                model_name: "bench-model".into(),
                engine: 0,
                arrival_time: 1.7e9 + step as f64 * 0.02,
                prompt_len: 512,
                max_tokens: Some(128),
                n: 1,
                traceparent: None,
                operation_name: None,
                stop_strings: false,
                lora_name: None,
                priority: None,
            })));
            live.push((id, 0));
        }
        let t = 1000.0 + step as f64 * 0.02;
        let outputs = live
            .iter_mut()
            .map(|(id, done)| {
                *done += 1;
                let first = *done == 1;
                EngineCoreOutput {
                    request_id: id.clone(),
                    new_token_ids: vec![42],
                    events: if first {
                        vec![
                            EngineCoreEvent {
                                kind: EventType::Queued,
                                timestamp: t - 0.01,
                                reason: None,
                            },
                            EngineCoreEvent {
                                kind: EventType::Scheduled,
                                timestamp: t - 0.005,
                                reason: None,
                            },
                        ]
                    } else {
                        Vec::new()
                    },
                    prefill_stats: first.then_some(PrefillStats {
                        num_prompt_tokens: 512,
                        num_computed_tokens: 500,
                        num_cached_tokens: 12,
                        num_local_cached_tokens: 12,
                        num_external_cached_tokens: 0,
                    }),
                    finish_reason: (*done == OUTPUTS_PER_REQUEST)
                        .then_some(vllm_otel_metrics::protocol::FinishReason::Length),
                }
            })
            .collect();
        records.push(record_to_proto(&Record::Outputs(OutputBatch {
            engine: 0,
            timestamp: t,
            received_at: 1.7e9 + step as f64 * 0.02 + 0.001,
            outputs,
        })));
        live.retain(|(_, done)| *done < OUTPUTS_PER_REQUEST);
    }
    records
}

fn outputs_in(records: &[pb::Record]) -> usize {
    records
        .iter()
        .map(|r| match &r.record {
            Some(pb::record::Record::Outputs(b)) => b.outputs.len(),
            _ => 0,
        })
        .sum()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Serve(Child, u16);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_serve() -> Serve {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_vllm-otel-metrics"))
        .args([
            "serve",
            "--ingest-addr",
            &format!("127.0.0.1:{port}"),
            // Serving /metrics (on any free port) gives the bridge its
            // reader, so every measurement is aggregated as in production.
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(["--request-ttl", "0", "--max-inflight-requests", "1000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Serve(child, port)
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Streams every workload concurrently (one stream each); returns seconds.
fn stream_all(
    runtime: &tokio::runtime::Runtime,
    port: u16,
    workloads: Vec<Vec<pb::Record>>,
) -> f64 {
    runtime.block_on(async move {
        let target = format!("http://127.0.0.1:{port}");
        let mut clients = Vec::new();
        for records in &workloads {
            let _ = records;
            clients.push(
                pb::ingest_client::IngestClient::connect(target.clone())
                    .await
                    .unwrap()
                    .max_encoding_message_size(64 << 20),
            );
        }
        let started = Instant::now();
        let calls: Vec<_> = clients
            .into_iter()
            .zip(workloads)
            .map(|(mut client, records)| {
                tokio::spawn(async move {
                    let summary = client
                        .stream(tokio_stream::iter(records))
                        .await
                        .unwrap()
                        .into_inner();
                    assert_eq!(summary.records_rejected, 0);
                })
            })
            .collect();
        for call in calls {
            call.await.unwrap();
        }
        started.elapsed().as_secs_f64()
    })
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let steps = if quick { 50 } else { 8_000 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    // 1. Throughput: one stream, then two concurrent streams.
    for streams in [1usize, 2] {
        let server = start_serve();
        let workloads: Vec<_> = (0..streams)
            .map(|s| workload(&format!("s{s}"), steps / streams))
            .collect();
        let outputs: usize = workloads.iter().map(|w| outputs_in(w)).sum();
        let bytes: usize = workloads.iter().flatten().map(Message::encoded_len).sum();
        let seconds = stream_all(&runtime, server.1, workloads);
        println!(
            "ingest: streams={streams} outputs={outputs} wire_mb={:.1} seconds={seconds:.2} outputs_per_s={:.0} server_rss_mib={:.1}",
            bytes as f64 / 1e6,
            outputs as f64 / seconds,
            rss_mib(server.0.id())
        );
    }

    // 2. Added latency per batch: decode + convert + track, batch by batch.
    let records = workload("lat", if quick { 50 } else { 4_000 });
    let encoded: Vec<Vec<u8>> = records.iter().map(Message::encode_to_vec).collect();
    let (_bridge, reader) =
        vllm_otel_metrics::export::prometheus::PrometheusBridge::builder().build();
    let tracker = std::sync::Mutex::new(Tracker::new(
        Instruments::builder().with_reader(reader).build(),
    ));
    let mut latencies = Vec::new();
    for bytes in &encoded {
        let started = Instant::now();
        let record = record_from_proto(pb::Record::decode(bytes.as_slice()).unwrap(), 0.0).unwrap();
        let is_batch = matches!(record, Record::Outputs(_));
        tracker.lock().unwrap().apply(&record);
        if is_batch {
            latencies.push(started.elapsed().as_secs_f64());
        }
    }
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] * 1e6;
    println!(
        "ingest: added latency per {BATCH}-output batch p50={:.1}us p99={:.1}us ({} batches)",
        pick(0.5),
        pick(0.99),
        latencies.len()
    );

    // 3. The scan before decoding (prescan), against decoding alone, on the
    // same messages in alternating rounds: its cost as a ratio.
    let limits = vllm_otel_metrics::sources::ingest::prescan::DecodeLimits::default();
    let mut ratios = Vec::new();
    for _ in 0..if quick { 3 } else { 15 } {
        let started = Instant::now();
        for bytes in &encoded {
            std::hint::black_box(pb::Record::decode(bytes.as_slice()).unwrap());
        }
        let decode = started.elapsed().as_secs_f64();
        let started = Instant::now();
        for bytes in &encoded {
            vllm_otel_metrics::sources::ingest::prescan::check(bytes, &limits).unwrap();
            std::hint::black_box(pb::Record::decode(bytes.as_slice()).unwrap());
        }
        ratios.push(started.elapsed().as_secs_f64() / decode);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "ingest: scan+decode / decode alone = {:.2}-{:.2} (median {:.2}, {} rounds of {} messages)",
        ratios[0],
        ratios[ratios.len() - 1],
        ratios[ratios.len() / 2],
        ratios.len(),
        encoded.len()
    );

    // 4. Memory with 100,000 requests in flight (started, one output each, none finished).
    let server = start_serve();
    let in_flight = if quick { 2_000 } else { 100_000 };
    let before = rss_mib(server.0.id());
    let mut records = Vec::with_capacity(in_flight / BATCH * 2 + 2);
    for chunk in 0..in_flight.div_ceil(BATCH) {
        let ids: Vec<String> = (0..BATCH).map(|i| format!("f-{chunk}-{i}")).collect();
        for id in &ids {
            records.push(record_to_proto(&Record::Request(RequestStart {
                request_id: id.clone(),
                model_name: "bench-model".into(),
                engine: 0,
                arrival_time: 1.7e9,
                prompt_len: 512,
                max_tokens: Some(128),
                n: 1,
                traceparent: None,
                operation_name: None,
                stop_strings: false,
                lora_name: None,
                priority: None,
            })));
        }
        records.push(record_to_proto(&Record::Outputs(OutputBatch {
            engine: 0,
            timestamp: 1000.0,
            received_at: 1.7e9,
            outputs: ids
                .iter()
                .map(|id| EngineCoreOutput {
                    request_id: id.clone(),
                    new_token_ids: vec![1],
                    ..Default::default()
                })
                .collect(),
        })));
    }
    stream_all(&runtime, server.1, vec![records]);
    println!(
        "ingest: in_flight={} server_rss_mib_before={before:.1} server_rss_mib_after={:.1}",
        in_flight.div_ceil(BATCH) * BATCH,
        rss_mib(server.0.id())
    );
}
