//! Reads an ingest message's protobuf bytes without decoding them and
//! refuses one whose decoding would take far more memory than its bytes.
//!
//! Why: protobuf decodes a two-byte empty element of a repeated message
//! field (`0a 00`) into a whole struct. A 16 MiB `RecordBatch` of empty
//! records decodes into eight million `Record`s, gigabytes, before a
//! single one is looked at. The scan walks the wire format against the
//! ingest schema, counting what decoding would build (the records of a
//! batch, the outputs of an output batch, and an estimate of every
//! struct, string and packed number), and stops at the first bound
//! exceeded. It allocates nothing and reads each byte at most once.
//!
//! The bounds and refusals are in `limits.rs`, the schema table in
//! `schema.rs`, the walk in `scan.rs`.

mod limits;
#[cfg(test)]
mod proto_fields;
mod scan;
mod schema;
#[cfg(test)]
mod tests;

pub use limits::{DecodeLimits, Refusal};
pub use scan::check;
