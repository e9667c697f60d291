//! Sinks that read the SDK state: the Prometheus bridge (pull) and OTLP (push).

pub mod otlp;
pub mod prometheus;
