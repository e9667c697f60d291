//! The ingest sources: a JSONL trace (`replay`), the gRPC ingest service
//! (`serve`), the ingest socket beside it, their wire types, and the client that streams to it (`--target`).

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
pub mod server;
#[cfg(all(feature = "grpc", unix))]
pub mod socket;
