//! This crate's own families (self-telemetry), and the process families
//! served on `/metrics` only.
// The process families are read only by the `/metrics` server (feature
// `http`); a build without it leaves them unused.
#![cfg_attr(not(feature = "http"), allow(dead_code))]

use super::def::{counter, gauge, FamilyName, Kind, MetricDef, ValueType};
use super::labels::REASON_LABELS;

/// Input that changed no vLLM metric (this crate's own family, never `vllm:`).
pub(crate) const REJECTED_INPUTS: MetricDef = counter(
    own!("rejected_inputs"),
    "{input}",
    "Input records or outputs that changed no vLLM metric, by reason.",
    REASON_LABELS,
);

/// Requests the tracker terminated itself (in-flight limit, time-to-live).
pub(crate) const EVICTED_REQUESTS: MetricDef = counter(
    own!("evicted_requests"),
    "{request}",
    "Live requests terminated as abort by the tracker itself, by reason.",
    REASON_LABELS,
);

/// Records the vLLM stat-logger plugin reported dropping (this crate's own
/// family, never `vllm:`; no labels).
pub(crate) const PLUGIN_DROPPED_RECORDS: MetricDef = counter(
    own!("plugin_dropped_records"),
    "{record}",
    "Records the vLLM stat-logger plugin dropped because its queue was full or the sidecar unreachable.",
    &[],
);

// ---- process (served on /metrics only) ----

const fn process_gauge(name: FamilyName, help: &'static str) -> MetricDef {
    MetricDef {
        labels: &[],
        ..gauge(name, "", help, ValueType::Float)
    }
}

/// Virtual memory of the process.
pub(crate) const PROCESS_VIRTUAL_MEMORY: MetricDef = process_gauge(
    process!("virtual_memory_bytes"),
    "Virtual memory size in bytes.",
);
/// Resident memory of the process.
pub(crate) const PROCESS_RESIDENT_MEMORY: MetricDef = process_gauge(
    process!("resident_memory_bytes"),
    "Resident memory size in bytes.",
);
/// When the process started.
pub(crate) const PROCESS_START_TIME: MetricDef = process_gauge(
    process!("start_time_seconds"),
    "Start time of the process since unix epoch in seconds.",
);
/// CPU time of the process.
pub(crate) const PROCESS_CPU: MetricDef = MetricDef {
    kind: Kind::Counter,
    ..process_gauge(
        process!("cpu_seconds"),
        "Total user and system CPU time spent in seconds.",
    )
};
/// Open file descriptors.
pub(crate) const PROCESS_OPEN_FDS: MetricDef =
    process_gauge(process!("open_fds"), "Number of open file descriptors.");
/// The file descriptor limit.
pub(crate) const PROCESS_MAX_FDS: MetricDef = process_gauge(
    process!("max_fds"),
    "Maximum number of open file descriptors.",
);

/// The process families `/metrics` serves after the catalog's, with the
/// names and HELP texts of Prometheus client libraries (vLLM's dashboards
/// query `process_start_time_seconds`). They are read from the operating
/// system at each scrape, not recorded, so they are not OTel instruments.
// The exposition writes each by name; the table is the tests' list of them.
#[cfg(test)]
pub(crate) const PROCESS: &[&MetricDef] = &[
    &PROCESS_VIRTUAL_MEMORY,
    &PROCESS_RESIDENT_MEMORY,
    &PROCESS_START_TIME,
    &PROCESS_CPU,
    &PROCESS_OPEN_FDS,
    &PROCESS_MAX_FDS,
];

/// This crate's own families.
pub(crate) const SELF_TELEMETRY: &[&MetricDef] =
    &[&REJECTED_INPUTS, &EVICTED_REQUESTS, &PLUGIN_DROPPED_RECORDS];
