//! # vllm-otel-metrics
//!
//! vLLM's per-request lifecycle metrics — headline: the preemption histogram
//! `vllm:request_num_preemptions` — recorded through OpenTelemetry instruments
//! and exposed under vLLM's own Prometheus names.
//!
//! Data flows one way through the modules: [`sources`] → [`protocol`]
//! records → [`tracker`] → [`instruments`] (OpenTelemetry instruments on an
//! `opentelemetry_sdk` provider) → [`export`]; the [`catalog`] of names,
//! HELP texts and buckets is at the bottom. Each module's page says its
//! job; the rules of the flow are the repository's docs/SEMANTICS.md §1.
//!
//! ```
//! use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
//! use vllm_otel_metrics::instruments::Instruments;
//! use vllm_otel_metrics::protocol::{Abort, RequestStart};
//! use vllm_otel_metrics::tracker::Tracker;
//!
//! let (bridge, reader) = PrometheusBridge::builder().build();
//! let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
//! assert!(tracker.start_request(&RequestStart {
//!     request_id: "r1".into(), model_name: "m".into(), engine: 0,
//!     arrival_time: 100.0, prompt_len: 8, max_tokens: None, n: 1, traceparent: None, operation_name: None, stop_strings: false,
//!     lora_name: None, priority: None,
//! }).is_empty());
//! assert!(tracker.abort(&Abort { request_id: "r1".into(), received_at: 101.0 }).is_empty());
//! let text = bridge.encode(Format::Text);
//! assert!(text.contains("vllm:request_num_preemptions_count{model_name=\"m\",engine=\"0\"} 1\n"));
//! ```
//!
//! # Feature flags
//!
//! The default features build the command line and everything it uses. A
//! host that embeds only the tracker and the Prometheus bridge takes
//! `default-features = false`: the catalog, the records ([`protocol`], JSONL
//! replay included), the [`tracker`], the [`instruments`] and the bridge's
//! encoder, on the product's OpenTelemetry stack and nothing else.
//!
//! - `otlp`: OTLP push (`export::otlp`, over `opentelemetry-otlp`) and one
//!   aggregation for two readers (`export::shared`, which needs the SDK's
//!   `experimental_metrics_custom_reader`).
//! - `grpc`: the gRPC ingest server and client (`sources::ingest::grpc`,
//!   `::client`, `::proto`) and the proto compile in `build.rs`.
//! - `http`: the bridge's own `/metrics` server (`export::prometheus::http`).
//! - `sim`: the engine simulator (`sources::sim`).
//! - `cli` (default): the command line and the binary; turns on all of the
//!   above.
//! - `listen`: the `listen` module, how the servers above listen (bounds,
//!   TLS, bearer token; turned on by `grpc` and `http`).
//!
//! The SDK's `experimental_metrics_bound_instruments` feature is always on:
//! recording goes through its bound handles.

// The layers, in the order data flows through them (see docs/SEMANTICS.md §1).
pub mod catalog;
pub mod error;
pub mod export;
pub mod instruments;
#[cfg(feature = "listen")]
pub mod listen;
pub mod protocol;
pub mod sources;
// Plumbing the layers share and no host needs; its two error types are
// public through `error`.
mod support;
pub mod tracker;

/// The README's Rust examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// docs/LIBRARY.md's Rust examples, compiled and run as doc tests.
#[doc = include_str!("../docs/LIBRARY.md")]
#[cfg(doctest)]
pub struct LibraryDoctests;
