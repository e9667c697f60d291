//! Sinks that read what the instruments recorded through the SDK: the Prometheus bridge (pull) and OTLP (push).

#[cfg(feature = "otlp")]
pub mod otlp;
pub mod prometheus;
#[cfg(feature = "otlp")]
pub mod shared;
