//! A host program (an LLM frontend) that serves the crate's families on its
//! own HTTP server, beside a metric of its own.
//!
//! The host owns the `SdkMeterProvider`: [`Instruments::install`] registers
//! the catalog's Views on the host's builder (here with the Prometheus
//! bridge's reader) and builds the instruments from the same config. Each
//! request of the host's serving loop gets a [`RequestMetrics`]; `/metrics`
//! is the bridge's exposition, under vLLM's own names.
//!
//! ```text
//! cargo run --example host_metrics_endpoint -- 127.0.0.1:9464 [SCRAPES]
//! curl -s 127.0.0.1:9464/metrics | grep request_num_preemptions
//! ```
//!
//! It serves `SCRAPES` requests (default: until stopped), then shuts the
//! provider down.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::{Instruments, InstrumentsConfig};
use vllm_otel_metrics::protocol::{EngineCoreEvent, EngineCoreOutput, EventType, FinishReason};
use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};

/// Serves on the address of the first argument for the number of scrapes
/// of the second. Public, as [`serve`] is: `tests/embedding.rs` includes
/// this file as a module, runs `serve` and leaves `main` unused.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9464".to_owned());
    let scrapes: Option<usize> = args.next().map(|n| n.parse()).transpose()?;
    let listener = TcpListener::bind(&addr)?;
    eprintln!("serving http://{addr}/metrics");
    serve(listener, scrapes)
}

/// The host: its provider, three requests, then `/metrics` for `scrapes`
/// connections (all of them when `None`).
pub fn serve(
    listener: TcpListener,
    scrapes: Option<usize>,
) -> Result<(), Box<dyn std::error::Error>> {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut config = InstrumentsConfig::default();
    config.max_model_len = 8192;
    let (provider, instruments) =
        Instruments::install(SdkMeterProvider::builder().with_reader(reader), config);
    // The host's own instrument, on the same provider.
    let batches = provider.meter("my-frontend").u64_counter("batches").build();

    // What the host's serving loop does per request: start, one output per
    // engine step, a terminal output (or a drop, which records `abort`).
    let label_set = instruments.label_set("my-model", 0);
    for (i, preempted) in [false, true, false].into_iter().enumerate() {
        let arrival = 100.0 + i as f64;
        let params = RequestParams {
            arrival_time: arrival,
            prompt_len: 128,
            max_tokens: Some(16),
            n: 1,
        };
        let mut request = RequestMetrics::start_in(&label_set, params);
        let events = if preempted {
            vec![EngineCoreEvent {
                kind: EventType::Preempted,
                timestamp: 10.0 + i as f64,
                reason: None,
            }]
        } else {
            Vec::new()
        };
        request.observe_output(
            10.5 + i as f64,
            arrival + 0.5,
            &EngineCoreOutput {
                request_id: format!("r{i}"),
                new_token_ids: vec![1, 2, 3],
                events,
                finish_reason: Some(FinishReason::Stop),
                ..EngineCoreOutput::default()
            },
        );
        batches.add(1, &[]);
    }

    for stream in listener.incoming().take(scrapes.unwrap_or(usize::MAX)) {
        if let Err(e) = respond(stream?, &bridge) {
            eprintln!("a scrape failed: {e}");
        }
    }
    provider.shutdown()?;
    Ok(())
}

/// Answers one HTTP/1.1 request: `/metrics` with the exposition, anything
/// else with 404.
fn respond(stream: TcpStream, bridge: &PrometheusBridge) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The headers, up to the empty line.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut stream = reader.into_inner();
    let (status, content_type, body) = if request_line.starts_with("GET /metrics ") {
        let format = Format::Text;
        ("200 OK", format.content_type(), bridge.encode(format))
    } else {
        ("404 Not Found", "text/plain", "not found\n".to_owned())
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}
