//! The OpenTelemetry GenAI semantic conventions' model-server histograms
//! (`--semconv gen_ai`; docs/SEMANTICS.md §3c).
//!
//! They are a tier of their own, outside [`all`](super::all): they exist
//! only when asked for, and their names, units and attributes are the
//! conventions', not vLLM's. [`MetricDef::vllm_name`] holds the name the
//! Collector's Prometheus exporter gives each (unit suffix included), which
//! the bridge uses too; [`MetricDef::labels`] the attributes as Prometheus
//! label names, in exposition order.
//!
//! ```
//! use vllm_otel_metrics::catalog::semconv;
//!
//! let def = &semconv::REQUEST_DURATION;
//! assert_eq!(def.otel_name, "gen_ai.server.request.duration");
//! assert_eq!(def.vllm_name, "gen_ai_server_request_duration_seconds");
//! assert_eq!(def.buckets.boundaries(0)[..3], [0.01, 0.02, 0.04]);
//! ```

use super::def::{Buckets, Kind, MetricDef, ValueType};

/// `gen_ai.operation.name`.
pub(crate) const OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`.
pub(crate) const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`.
pub(crate) const REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.model`.
pub(crate) const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `error.type`.
pub(crate) const ERROR_TYPE: &str = "error.type";
/// `server.address`.
pub(crate) const SERVER_ADDRESS: &str = "server.address";
/// `server.port`.
pub(crate) const SERVER_PORT: &str = "server.port";

/// The value of `gen_ai.provider.name`.
pub(crate) const PROVIDER: &str = "vllm";

/// The conventions' well-known `gen_ai.operation.name` values, in the order
/// of [`GenAiOperation::ALL`](crate::protocol::GenAiOperation::ALL).
pub(crate) const OPERATION_NAMES: [&str; 7] = [
    "chat",
    "create_agent",
    "embeddings",
    "execute_tool",
    "generate_content",
    "invoke_agent",
    "text_completion",
];

/// The attributes as Prometheus label names, sorted, as the Collector's
/// exporter writes them.
pub(crate) const LABELS: &[&str] = &[
    "error_type",
    "gen_ai_operation_name",
    "gen_ai_provider_name",
    "gen_ai_request_model",
    "gen_ai_response_model",
    "server_address",
    "server_port",
];

/// Advised buckets of `gen_ai.server.request.duration`.
pub(crate) const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Advised buckets of `gen_ai.server.time_to_first_token`.
pub(crate) const TIME_TO_FIRST_TOKEN_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Advised buckets of `gen_ai.server.time_per_output_token`.
pub(crate) const TIME_PER_OUTPUT_TOKEN_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

const fn histogram(
    prometheus_name: &'static str,
    otel_name: &'static str,
    help: &'static str,
    buckets: &'static [f64],
) -> MetricDef {
    MetricDef {
        vllm_name: prometheus_name,
        otel_name,
        by_class_name: None,
        kind: Kind::Histogram,
        unit: "s",
        help,
        labels: LABELS,
        buckets: Buckets::Fixed(buckets),
        value_type: ValueType::Float,
        label_values: &[],
        // Not in the catalog's bucket families: the conventions advise
        // their buckets, and `--custom-histogram-buckets` leaves them.
        bucket_family: "",
    }
}

/// `gen_ai.server.request.duration`: every terminated request.
pub const REQUEST_DURATION: MetricDef = histogram(
    "gen_ai_server_request_duration_seconds",
    "gen_ai.server.request.duration",
    "Generative AI server request duration such as time-to-last byte or last output token.",
    REQUEST_DURATION_BUCKETS,
);
/// `gen_ai.server.time_to_first_token`: successful requests.
pub const TIME_TO_FIRST_TOKEN: MetricDef = histogram(
    "gen_ai_server_time_to_first_token_seconds",
    "gen_ai.server.time_to_first_token",
    "Time to generate first token for successful responses.",
    TIME_TO_FIRST_TOKEN_BUCKETS,
);
/// `gen_ai.server.time_per_output_token`: successful requests of more
/// than one token.
pub const TIME_PER_OUTPUT_TOKEN: MetricDef = histogram(
    "gen_ai_server_time_per_output_token_seconds",
    "gen_ai.server.time_per_output_token",
    "Time per output token generated after the first token for successful responses.",
    TIME_PER_OUTPUT_TOKEN_BUCKETS,
);

/// The tier, in exposition order.
pub const ALL: &[&MetricDef] = &[
    &REQUEST_DURATION,
    &TIME_TO_FIRST_TOKEN,
    &TIME_PER_OUTPUT_TOKEN,
];

/// The family whose OpenTelemetry name is `otel_name`.
pub fn by_otel_name(otel_name: &str) -> Option<&'static MetricDef> {
    ALL.iter().copied().find(|def| def.otel_name == otel_name)
}
