//! Per-request SLO attainment and goodput (`--slo`): the bounds of each
//! model, the outcome of one finished request against them, and the
//! handles of one label set (its model's bounds resolved when it is bound,
//! so a request's judgement is a few comparisons and two bound counters).
//!
//! Why here and not from histograms: a request that misses on TTFT and
//! meets on TPOT, and one the other way round, are alike in two separate
//! histograms. Joint attainment (DistServe's goodput) needs the request,
//! and the tracker holds each one's values when it ends.

use std::collections::BTreeMap;

use opentelemetry::metrics::{BoundCounter, Counter};
use opentelemetry::KeyValue;

use crate::catalog::labels::{LORA_NAME_LABEL, PRIORITY_LABEL};
use crate::catalog::slo::{SLO_GOODPUT_TOKENS, SLO_OUTCOMES, SLO_OUTCOME_LABELS, SLO_REQUESTS};
use crate::protocol::FinishReason;

use super::meters::{u64_counter, Meters};

/// The latency bounds of one model, seconds; a bound not set is not judged.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SloBounds {
    /// Time to first token.
    pub ttft: Option<f64>,
    /// Mean time per output token after the first (vLLM's
    /// `request_time_per_output_token`).
    pub tpot: Option<f64>,
    /// End-to-end latency.
    pub e2e: Option<f64>,
}

impl SloBounds {
    /// These bounds, each one not set taken from `base`.
    fn over(self, base: SloBounds) -> SloBounds {
        SloBounds {
            ttft: self.ttft.or(base.ttft),
            tpot: self.tpot.or(base.tpot),
            e2e: self.e2e.or(base.e2e),
        }
    }
}

/// The SLO of every model: a default, and per-model overrides of some of
/// its bounds.
///
/// ```
/// use vllm_otel_metrics::instruments::Slo;
///
/// let slo = Slo::from_json(r#"{"ttft": 0.5, "tpot": 0.05, "models": {"big": {"ttft": 2}}}"#)?;
/// assert_eq!(slo.bounds_for("big").ttft, Some(2.0));
/// assert_eq!(slo.bounds_for("big").tpot, Some(0.05), "inherited from the default");
/// assert_eq!(slo.bounds_for("small").ttft, Some(0.5));
/// assert!(Slo::from_json(r#"{"ttft": -1}"#).unwrap_err().to_string().contains("ttft"));
/// # Ok::<(), vllm_otel_metrics::instruments::SloError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Slo {
    default: SloBounds,
    models: BTreeMap<String, SloBounds>,
    /// With `--attribute lora`: an adapter's bounds, over its model's.
    adapters: BTreeMap<String, SloBounds>,
    /// With `--attribute priority`: a priority class's bounds (by its
    /// `priority` label), over its model's and its adapter's.
    priorities: BTreeMap<String, SloBounds>,
}

// Every bound is a finite number (from_json refuses the others).
impl Eq for Slo {}

/// Why an SLO value cannot be used; names the key at fault (the front end
/// names its setting, such as the command line's `--slo`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", if key.is_empty() { String::new() } else { format!("{key}: ") })]
pub struct SloError {
    /// Where: `ttft`, `models.NAME.tpot`, or empty for the whole value.
    pub key: String,
    /// Why.
    pub reason: String,
}

/// The keys a bounds object takes.
const BOUND_KEYS: [&str; 3] = ["ttft", "tpot", "e2e"];

impl Slo {
    /// Parses `{"ttft": S, "tpot": S, "e2e": S, "models": {"NAME": {…}},
    /// "adapters": {"LORA_NAME": {…}}, "priorities": {"CLASS": {…}}}`
    /// (seconds; every key optional). A model's bounds override the
    /// default's one by one; with `--attribute`, an adapter's override its
    /// model's, and a priority class's (keyed by its `priority` label, such
    /// as `0` or `>1`) override both.
    ///
    /// ```
    /// use vllm_otel_metrics::instruments::Slo;
    ///
    /// let slo = Slo::from_json(
    ///     r#"{"ttft": 0.5, "e2e": 60, "adapters": {"sql": {"ttft": 1}}, "priorities": {">1": {"ttft": 5}}}"#,
    /// )?;
    /// let bounds = |adapter, priority| slo.bounds_for_class("m", adapter, priority);
    /// assert_eq!(bounds(Some("sql"), Some("0")).ttft, Some(1.0));
    /// assert_eq!(bounds(Some("sql"), Some(">1")).ttft, Some(5.0));
    /// assert_eq!(bounds(Some("chat"), None).ttft, Some(0.5));
    /// assert_eq!(bounds(Some("sql"), Some(">1")).e2e, Some(60.0), "inherited");
    /// # Ok::<(), vllm_otel_metrics::instruments::SloError>(())
    /// ```
    pub fn from_json(text: &str) -> Result<Slo, SloError> {
        let error = |key: &str, reason: String| SloError {
            key: key.to_owned(),
            reason,
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| error("", format!("not JSON ({e})")))?;
        let object = value
            .as_object()
            .ok_or_else(|| error("", "not a JSON object".into()))?;
        let mut slo = Slo::default();
        for (key, value) in object {
            let by_name = match key.as_str() {
                "models" => Some((&mut slo.models, "models")),
                "adapters" => Some((&mut slo.adapters, "adapters")),
                "priorities" => Some((&mut slo.priorities, "priority classes")),
                _ => None,
            };
            match by_name {
                Some((into, what)) => {
                    let named = value
                        .as_object()
                        .ok_or_else(|| error(key, format!("not an object of {what}")))?;
                    for (name, bounds) in named {
                        let place = format!("{key}.{name}");
                        let bounds = bounds
                            .as_object()
                            .ok_or_else(|| error(&place, "not an object of bounds".into()))?;
                        into.insert(name.clone(), parse_bounds(bounds, &place)?);
                    }
                }
                None if BOUND_KEYS.contains(&key.as_str()) => {
                    set_bound(&mut slo.default, key, value, key)?;
                }
                None => {
                    return Err(error(
                        key,
                        "unknown key (expected ttft, tpot, e2e, models, adapters or priorities)"
                            .into(),
                    ))
                }
            }
        }
        // Overrides, then the default for what a model leaves out.
        for bounds in slo.models.values_mut() {
            *bounds = bounds.over(slo.default);
        }
        Ok(slo)
    }

    /// The bounds of `model`.
    pub fn bounds_for(&self, model: &str) -> SloBounds {
        self.models.get(model).copied().unwrap_or(self.default)
    }

    /// The bounds of a request of `model`, with its adapter and priority
    /// class labels (`--attribute`): the class's bounds over the adapter's
    /// over the model's, bound by bound.
    pub fn bounds_for_class(
        &self,
        model: &str,
        lora_name: Option<&str>,
        priority: Option<&str>,
    ) -> SloBounds {
        let mut bounds = self.bounds_for(model);
        let adapter = lora_name.and_then(|name| self.adapters.get(name));
        let class = priority.and_then(|class| self.priorities.get(class));
        for over in adapter.into_iter().chain(class) {
            bounds = over.over(bounds);
        }
        bounds
    }

    /// The priority classes the SLO names (`priorities`' keys), which must
    /// be `--priority-classes` labels to apply.
    pub fn priority_classes(&self) -> impl Iterator<Item = &str> {
        self.priorities.keys().map(String::as_str)
    }
}

fn parse_bounds(
    object: &serde_json::Map<String, serde_json::Value>,
    place: &str,
) -> Result<SloBounds, SloError> {
    let mut bounds = SloBounds::default();
    for (key, value) in object {
        let key_place = format!("{place}.{key}");
        if !BOUND_KEYS.contains(&key.as_str()) {
            return Err(SloError {
                key: key_place,
                reason: "unknown key (expected ttft, tpot or e2e)".into(),
            });
        }
        set_bound(&mut bounds, key, value, &key_place)?;
    }
    Ok(bounds)
}

fn set_bound(
    bounds: &mut SloBounds,
    key: &str,
    value: &serde_json::Value,
    place: &str,
) -> Result<(), SloError> {
    let seconds = value
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| SloError {
            key: place.to_owned(),
            reason: format!("{value} is not a positive number of seconds"),
        })?;
    let slot = match key {
        "ttft" => &mut bounds.ttft,
        "tpot" => &mut bounds.tpot,
        _ => &mut bounds.e2e,
    };
    *slot = Some(seconds);
    Ok(())
}

/// How one finished request fared against its model's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SloOutcome {
    /// Every bound set was met.
    Met,
    /// The TTFT bound was missed (the TPOT one met or not set).
    MissedTtft,
    /// The TPOT bound was missed (the TTFT one met or not set).
    MissedTpot,
    /// Both the TTFT and the TPOT bounds were missed.
    MissedBoth,
    /// TTFT and TPOT were met (or not set) and the end-to-end bound missed.
    MissedE2e,
    /// The request was aborted: it met nothing for its client.
    Aborted,
}

impl SloOutcome {
    /// Every outcome, in `outcome` label order.
    pub const ALL: [SloOutcome; 6] = [
        SloOutcome::Met,
        SloOutcome::MissedTtft,
        SloOutcome::MissedTpot,
        SloOutcome::MissedBoth,
        SloOutcome::MissedE2e,
        SloOutcome::Aborted,
    ];

    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        SLO_OUTCOMES[self as usize]
    }

    /// Judges one finished request:
    ///
    /// - an abort is [`Aborted`](SloOutcome::Aborted), whatever its times;
    /// - a request without a first token (none generated) misses a TTFT
    ///   bound;
    /// - a request with one token or none has no time per output token: it
    ///   meets a TPOT bound (as vLLM's benchmark client counts it);
    /// - the end-to-end bound decides only when TTFT and TPOT were met.
    ///
    /// ```
    /// use vllm_otel_metrics::instruments::{SloBounds, SloOutcome};
    /// use vllm_otel_metrics::protocol::FinishReason;
    ///
    /// let bounds = SloBounds { ttft: Some(0.5), tpot: Some(0.05), e2e: None };
    /// let judge = |ttft, tpot| SloOutcome::judge(&bounds, FinishReason::Stop, ttft, tpot, 9.0);
    /// assert_eq!(judge(Some(0.4), Some(0.04)), SloOutcome::Met);
    /// assert_eq!(judge(Some(0.6), Some(0.04)), SloOutcome::MissedTtft);
    /// assert_eq!(judge(Some(0.6), Some(0.06)), SloOutcome::MissedBoth);
    /// assert_eq!(judge(Some(0.4), None), SloOutcome::Met, "one token: no TPOT");
    /// ```
    pub fn judge(
        bounds: &SloBounds,
        reason: FinishReason,
        ttft: Option<f64>,
        tpot: Option<f64>,
        e2e: f64,
    ) -> SloOutcome {
        if reason == FinishReason::Abort {
            return SloOutcome::Aborted;
        }
        // At the bound is within it: the bound is what the SLO allows.
        let missed_ttft = bounds.ttft.is_some_and(|b| ttft.is_none_or(|t| t > b));
        let missed_tpot = bounds.tpot.is_some_and(|b| tpot.is_some_and(|t| t > b));
        match (missed_ttft, missed_tpot) {
            (true, true) => SloOutcome::MissedBoth,
            (true, false) => SloOutcome::MissedTtft,
            (false, true) => SloOutcome::MissedTpot,
            (false, false) if bounds.e2e.is_some_and(|b| e2e > b) => SloOutcome::MissedE2e,
            (false, false) => SloOutcome::Met,
        }
    }
}

/// The SLO instruments (made only with `--slo`) and the bounds.
#[derive(Debug)]
pub(crate) struct SloInstruments {
    requests: Counter<u64>,
    goodput_tokens: Counter<u64>,
    slo: Slo,
}

impl SloInstruments {
    pub(crate) fn new(meter: &Meters, slo: Slo) -> Self {
        SloInstruments {
            requests: u64_counter(meter, &SLO_REQUESTS),
            goodput_tokens: u64_counter(meter, &SLO_GOODPUT_TOKENS),
            slo,
        }
    }
}

/// A request's end, as the SLO judges it.
pub(crate) struct SloEnd {
    pub(crate) reason: FinishReason,
    /// None when no token was generated.
    pub(crate) time_to_first_token: Option<f64>,
    /// None for one token or none.
    pub(crate) time_per_output_token: Option<f64>,
    pub(crate) e2e: f64,
    pub(crate) generation_tokens: u64,
}

/// The SLO series of one `(model_name, engine)` label set, every outcome
/// bound (at zero) with it, and its model's bounds.
pub(crate) struct SloHandles {
    bounds: SloBounds,
    /// In [`SloOutcome::ALL`] order.
    requests: [BoundCounter<u64>; SLO_OUTCOMES.len()],
    goodput_tokens: BoundCounter<u64>,
}

impl SloHandles {
    /// Binds the series of `labels` (`model_name`, `engine`; the overflow
    /// label set's judged by the default bounds).
    pub(crate) fn bind(
        instruments: &SloInstruments,
        labels: &[KeyValue],
        model: Option<&str>,
    ) -> Self {
        let label = |name: &str| {
            let pair = labels.iter().find(|l| l.key.as_str() == name);
            pair.map(|l| l.value.as_str())
        };
        let (lora_name, priority) = (label(LORA_NAME_LABEL), label(PRIORITY_LABEL));
        let requests = SloOutcome::ALL.map(|outcome| {
            let mut with_outcome = labels.to_vec();
            with_outcome.push(KeyValue::new(SLO_OUTCOME_LABELS[2], outcome.as_str()));
            let series = instruments.requests.bind(&with_outcome);
            // A dashboard reads 0, not "No data", for an outcome not yet seen.
            series.add(0);
            series
        });
        let goodput_tokens = instruments.goodput_tokens.bind(labels);
        goodput_tokens.add(0);
        SloHandles {
            bounds: model.map_or(instruments.slo.default, |m| {
                let slo = &instruments.slo;
                slo.bounds_for_class(m, lora_name.as_deref(), priority.as_deref())
            }),
            requests,
            goodput_tokens,
        }
    }

    /// Judges and counts one finished request; returns its outcome.
    #[inline]
    pub(crate) fn record(&self, end: &SloEnd) -> SloOutcome {
        let outcome = SloOutcome::judge(
            &self.bounds,
            end.reason,
            end.time_to_first_token,
            end.time_per_output_token,
            end.e2e,
        );
        self.requests[outcome as usize].add(1);
        if outcome == SloOutcome::Met && end.generation_tokens > 0 {
            self.goodput_tokens.add(end.generation_tokens);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key_at_fault() {
        let key = |text: &str| Slo::from_json(text).unwrap_err().key;
        assert_eq!(key("[1]"), "");
        assert_eq!(key("{"), "");
        assert_eq!(
            Slo::from_json("[1]").unwrap_err().to_string(),
            "not a JSON object"
        );
        assert_eq!(key(r#"{"ttft": 0}"#), "ttft");
        assert_eq!(key(r#"{"tpot": "fast"}"#), "tpot");
        assert_eq!(key(r#"{"p99": 1}"#), "p99");
        assert_eq!(key(r#"{"models": {"m": {"e2e": -2}}}"#), "models.m.e2e");
        assert_eq!(key(r#"{"models": {"m": {"tft": 1}}}"#), "models.m.tft");
        assert_eq!(key(r#"{"models": {"m": 3}}"#), "models.m");
        assert_eq!(key(r#"{"models": []}"#), "models");
        assert_eq!(
            key(r#"{"adapters": {"sql": {"ttft": 0}}}"#),
            "adapters.sql.ttft"
        );
        assert_eq!(key(r#"{"priorities": {"0": 1}}"#), "priorities.0");
        assert_eq!(
            Slo::from_json(r#"{"priorities": 1}"#)
                .unwrap_err()
                .to_string(),
            "priorities: not an object of priority classes"
        );
    }

    #[test]
    fn a_request_is_judged_on_every_bound_set_and_only_those() {
        use SloOutcome::*;
        let all = SloBounds {
            ttft: Some(1.0),
            tpot: Some(0.1),
            e2e: Some(10.0),
        };
        let judge =
            |b: &SloBounds, reason, ttft, tpot, e2e| SloOutcome::judge(b, reason, ttft, tpot, e2e);
        let stop = FinishReason::Stop;
        assert_eq!(
            judge(&all, stop, Some(1.0), Some(0.1), 10.0),
            Met,
            "at the bound"
        );
        assert_eq!(judge(&all, stop, Some(1.1), Some(0.1), 10.0), MissedTtft);
        assert_eq!(judge(&all, stop, Some(0.5), Some(0.2), 10.0), MissedTpot);
        assert_eq!(judge(&all, stop, Some(1.5), Some(0.2), 20.0), MissedBoth);
        assert_eq!(judge(&all, stop, Some(0.5), Some(0.05), 11.0), MissedE2e);
        assert_eq!(
            judge(&all, stop, None, None, 1.0),
            MissedTtft,
            "no first token"
        );
        assert_eq!(
            judge(&all, FinishReason::Abort, Some(0.1), Some(0.01), 1.0),
            Aborted
        );
        assert_eq!(judge(&all, FinishReason::Length, Some(0.1), None, 1.0), Met);
        let ttft_only = SloBounds {
            ttft: Some(1.0),
            ..SloBounds::default()
        };
        assert_eq!(judge(&ttft_only, stop, Some(0.5), Some(9.0), 99.0), Met);
        assert_eq!(judge(&SloBounds::default(), stop, None, None, 99.0), Met);
    }
}
