//! Every family, in exposition order, and the look-ups by name: the tiers'
//! tables read in one place.

use super::def::MetricDef;
use super::engine::ENGINE;
use super::kv_connector::KV_CONNECTOR;
use super::request::{PER_REQUEST_COUNTS, REQUEST_HISTOGRAMS};
use super::scheduler::SCHEDULER;
use super::slo;
use super::telemetry::SELF_TELEMETRY;

/// Every family, in exposition order: per-request tier, scheduler tier,
/// engine tier, self-telemetry, SLO (whose instruments exist only with
/// `--slo`).
pub fn all() -> impl Iterator<Item = &'static MetricDef> {
    PER_REQUEST_COUNTS
        .iter()
        .copied()
        .chain(REQUEST_HISTOGRAMS.iter().map(|h| h.def))
        .chain(SCHEDULER.iter().copied())
        .chain(ENGINE.iter().copied())
        .chain(KV_CONNECTOR.iter().copied())
        .chain(SELF_TELEMETRY.iter().copied())
        .chain(slo::ALL.iter().copied())
}

/// The per-request histograms (the tier's table, in exposition order):
/// the families each request's lifecycle observes, at its tokens or its end.
pub fn per_request_histograms() -> impl Iterator<Item = &'static MetricDef> {
    REQUEST_HISTOGRAMS.iter().map(|h| h.def)
}

/// The families whose OpenMetrics samples carry exemplars (with exemplars
/// on): the per-request histograms the table's exemplar column marks, then
/// the SLO outcome counter.
///
/// ```
/// use vllm_otel_metrics::catalog;
///
/// let names: Vec<_> = catalog::exemplar_families().map(|d| d.vllm_name).collect();
/// assert!(names.contains(&"vllm:request_num_preemptions"));
/// assert!(!names.contains(&"vllm:inter_token_latency_seconds"));
/// ```
pub fn exemplar_families() -> impl Iterator<Item = &'static MetricDef> {
    let histograms = REQUEST_HISTOGRAMS
        .iter()
        .filter(|h| h.exemplar != super::request::Exemplar::No)
        .map(|h| h.def);
    histograms.chain(std::iter::once(&super::slo::SLO_REQUESTS))
}

/// The family `/metrics` names `vllm_name` (`vllm:request_num_preemptions`),
/// if the catalog has it.
///
/// ```
/// use vllm_otel_metrics::catalog;
///
/// let def = catalog::by_vllm_name("vllm:request_num_preemptions").unwrap();
/// assert_eq!(def.otel_name, "vllm.request_num_preemptions");
/// assert_eq!(def.buckets.boundaries(catalog::DEFAULT_MAX_MODEL_LEN), catalog::PREEMPTION_BUCKETS);
/// assert!(catalog::by_vllm_name("vllm:no_such_family").is_none());
/// ```
pub fn by_vllm_name(vllm_name: &str) -> Option<&'static MetricDef> {
    all().find(|def| def.vllm_name == vllm_name)
}

/// How many series one `(model_name, engine)` label set has in `def`: one,
/// or one per value of its further label.
pub fn series_per_label_set(def: &MetricDef) -> usize {
    def.label_values.len().max(1)
}

/// The family whose OpenTelemetry name is `otel_name`.
pub fn by_otel_name(otel_name: &str) -> Option<&'static MetricDef> {
    all().find(|def| def.otel_name == otel_name)
}

#[cfg(test)]
mod tests {
    use super::all;
    use crate::catalog::def::MetricDef;
    use crate::catalog::semconv;
    use crate::catalog::telemetry::PROCESS;

    #[test]
    fn otel_name_is_the_prometheus_name_with_a_dot() {
        for def in all().chain(PROCESS.iter().copied()) {
            let (namespace, rest) = [
                ("vllm:", "vllm."),
                ("vllm_otel_metrics_", "vllm_otel_metrics."),
                ("process_", "process."),
            ]
            .into_iter()
            .find_map(|(prometheus, otel)| Some((otel, def.vllm_name.strip_prefix(prometheus)?)))
            .unwrap_or_else(|| panic!("{} has no known namespace", def.vllm_name));
            assert_eq!(def.otel_name, format!("{namespace}{rest}"));
        }
        // The semantic conventions name their streams; the Prometheus names are
        // the OpenTelemetry translation of them (dots to underscores, the unit
        // appended), which a const cannot compute, so both are written there.
        for def in semconv::ALL {
            let translated = format!("{}_seconds", def.otel_name.replace('.', "_"));
            assert_eq!(def.vllm_name, translated);
        }
    }

    #[test]
    fn names_are_unique() {
        let defs: Vec<&MetricDef> = all().chain(semconv::ALL.iter().copied()).collect();
        for name in [|d: &&MetricDef| d.vllm_name, |d: &&MetricDef| d.otel_name] {
            let mut names: Vec<_> = defs.iter().map(name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), defs.len());
        }
    }
}
