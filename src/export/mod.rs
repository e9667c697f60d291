//! Sinks that read the SDK state: the Prometheus bridge (pull) and, later, OTLP (push).

pub mod prometheus;
