//! Sinks that collect the [`Registry`](crate::metrics::Registry): the Prometheus bridge (pull) and OTLP (push).

pub mod otlp;
pub mod prometheus;
