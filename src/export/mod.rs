//! Sinks that read what the instruments recorded through the SDK: the Prometheus bridge (pull) and OTLP (push).

pub mod otlp;
pub mod prometheus;
pub mod shared;
