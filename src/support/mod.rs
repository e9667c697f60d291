//! Small things every layer may use, which use nothing of the crate's
//! layers: the wall clock, reading the files settings name, and keeping
//! credentials out of messages. Private: the error types among them are
//! public through [`crate::error`], the rest is no API.

pub(crate) mod clock;
// Only the listeners, the OTLP exporter's TLS and the ingest client read
// files a setting names, or take URLs that may carry credentials.
#[cfg(any(feature = "listen", feature = "otlp"))]
pub(crate) mod file;
#[cfg(any(feature = "otlp", feature = "grpc"))]
pub(crate) mod redact;
