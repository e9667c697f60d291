//! The SLO families (`--slo`): each finished request judged against its
//! model's latency bounds, and the generation tokens of the requests that
//! met them (goodput). This crate's own names, never `vllm:`; they exist
//! only when bounds are configured (docs/SEMANTICS.md, "SLO attainment").

use super::def::{counter, MetricDef};
use super::labels::ENGINE_LABELS;

/// The labels of [`SLO_REQUESTS`].
pub(crate) const SLO_OUTCOME_LABELS: &[&str] = &["model_name", "engine", SLO_OUTCOME_LABEL];
/// The label that names a request's outcome.
pub const SLO_OUTCOME_LABEL: &str = "outcome";

/// The values of `outcome`, in `SloOutcome::ALL` order.
pub const SLO_OUTCOMES: [&str; 6] = [
    "met",
    "missed_ttft",
    "missed_tpot",
    "missed_both",
    "missed_e2e",
    "aborted",
];

/// Finished requests judged against the SLO, by outcome.
pub const SLO_REQUESTS: MetricDef = counter(
    own!("slo_requests"),
    "{request}",
    "Finished requests judged against the latency SLO of their model, by outcome.",
    SLO_OUTCOME_LABELS,
)
.with_label_values(&SLO_OUTCOMES);

/// Generation tokens of the requests that met the SLO.
pub const SLO_GOODPUT_TOKENS: MetricDef = counter(
    own!("slo_goodput_tokens"),
    "{token}",
    "Generation tokens of the finished requests that met the latency SLO of their model.",
    ENGINE_LABELS,
);

/// Both families, in exposition order.
pub const ALL: &[&MetricDef] = &[&SLO_REQUESTS, &SLO_GOODPUT_TOKENS];
