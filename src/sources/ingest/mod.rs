//! The ingest sources: a JSONL trace (`replay`), and beside `serve` an
//! ingest core ([`service`]) that knows no transport, with its two
//! transports, gRPC ([`grpc`]) and the ingest socket ([`socket`]); their wire
//! types ([`proto`]), the bounds a message meets before it is kept
//! ([`room`]) or decoded ([`prescan`]), and the client that streams to a
//! sidecar (`--target`).
//!
//! Data flows one way: a transport reads its framing and hands each message
//! to the core, which decodes and applies it; neither transport knows the
//! other.

#[cfg(feature = "grpc")]
pub mod client;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod json_scan;
pub mod jsonl;
#[cfg(feature = "grpc")]
pub mod prescan;
#[cfg(feature = "grpc")]
pub mod proto;
#[cfg(feature = "grpc")]
pub mod room;
#[cfg(feature = "grpc")]
pub mod service;
#[cfg(all(feature = "grpc", unix))]
pub mod socket;
