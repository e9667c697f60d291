//! The end-of-run summary a person reads at a glance, computed from the
//! recorded histograms the way PromQL's `histogram_quantile` reads them.

use std::collections::BTreeMap;
use std::fmt::Write;

use vllm_otel_metrics::catalog::{self, MetricDef};
use vllm_otel_metrics::export::prometheus::{Family, Series, Value};
use vllm_otel_metrics::instruments::exemplars::TraceLink;
use vllm_otel_metrics::sources::sim::{SimConfig, SimOutcome};

/// One histogram summed over every label set: cumulative `(le, count)` for the
/// finite bounds, then the total count and the sum.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MergedHistogram {
    /// `(upper bound, cumulative count)` of every finite boundary.
    pub(crate) buckets: Vec<(f64, u64)>,
    /// Observations.
    pub(crate) count: u64,
    /// Sum of observations.
    pub(crate) sum: f64,
}

impl MergedHistogram {
    /// The family `def` of a snapshot, summed over its series.
    pub(crate) fn from_snapshot(families: &[Family], def: &MetricDef) -> Option<MergedHistogram> {
        Self::of_series(families, def, |_| true)
    }

    /// The family `def` of a snapshot, summed over the series `keep` keeps.
    fn of_series(
        families: &[Family],
        def: &MetricDef,
        keep: impl Fn(&Series) -> bool,
    ) -> Option<MergedHistogram> {
        Self::of_family(families, def.vllm_name, keep)
    }

    /// The family named `name` of a snapshot, summed over the series
    /// `keep` keeps.
    fn of_family(
        families: &[Family],
        name: &str,
        keep: impl Fn(&Series) -> bool,
    ) -> Option<MergedHistogram> {
        let family = families.iter().find(|f| f.name == name)?;
        let mut merged: Option<MergedHistogram> = None;
        for series in family.series.iter().filter(|s| keep(s)) {
            if let Value::Histogram {
                buckets,
                sum,
                count,
            } = &series.value
            {
                let m = merged.get_or_insert_with(|| MergedHistogram {
                    buckets: buckets.iter().map(|(le, _)| (*le, 0)).collect(),
                    count: 0,
                    sum: 0.0,
                });
                for (into, (_, c)) in m.buckets.iter_mut().zip(buckets) {
                    into.1 += c;
                }
                m.count += count;
                m.sum += sum;
            }
        }
        merged
    }

    /// PromQL `histogram_quantile(q, …)`: linear interpolation inside the
    /// bucket holding rank `q × count`; the lowest bucket starts at 0; a rank
    /// in the `+Inf` bucket yields the highest finite bound. NaN when empty.
    pub(crate) fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 || q.is_nan() {
            return f64::NAN;
        }
        if q < 0.0 {
            return f64::NEG_INFINITY;
        }
        if q > 1.0 {
            return f64::INFINITY;
        }
        let rank = q * self.count as f64;
        let mut lower = 0.0;
        let mut below = 0u64;
        for &(upper, cumulative) in &self.buckets {
            if cumulative as f64 >= rank {
                if upper <= 0.0 {
                    return upper;
                }
                let in_bucket = (cumulative - below) as f64;
                return lower + (upper - lower) * (rank - below as f64) / in_bucket;
            }
            lower = upper;
            below = cumulative;
        }
        // In the +Inf bucket.
        self.buckets.last().map_or(f64::NAN, |(le, _)| *le)
    }

    /// Mean observation.
    pub(crate) fn mean(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            self.sum / self.count as f64
        }
    }
}

fn counter_total(families: &[Family], def: &MetricDef, label: Option<(&str, &str)>) -> f64 {
    counter_where(families, def, |s| {
        label.is_none_or(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
    })
}

fn counter_where(families: &[Family], def: &MetricDef, keep: impl Fn(&Series) -> bool) -> f64 {
    families
        .iter()
        .filter(|f| f.name == def.vllm_name)
        .flat_map(|f| &f.series)
        .filter(|s| keep(s))
        .map(|s| match s.value {
            Value::Scalar(v) => v,
            Value::Histogram { .. } => 0.0,
        })
        .sum()
}

/// A series' class with `--attribute`: its `lora_name` and `priority`
/// (empty when it has no such label); None for a series of neither.
fn class_of(series: &Series) -> Option<(String, String)> {
    let label = |name: &str| {
        let pair = series.labels.iter().find(|(k, _)| k == name);
        pair.map(|(_, v)| v.clone())
    };
    match (
        label(catalog::LORA_NAME_LABEL),
        label(catalog::PRIORITY_LABEL),
    ) {
        (None, None) => None,
        (lora, priority) => Some((lora.unwrap_or_default(), priority.unwrap_or_default())),
    }
}

/// The name of `def`'s series by class on `/metrics`.
fn by_class(def: &MetricDef) -> &'static str {
    def.by_class_name.unwrap_or(def.vllm_name)
}

/// With `--attribute`, one line per class: its requests, preemptions per
/// request, TTFT p99 and, with `--slo`, the share that met the SLO, all
/// read from the class's series (vLLM's families' by-class twins, and the
/// SLO family, which carries the class itself).
fn class_rows(out: &mut String, families: &[Family]) {
    let preemptions = by_class(&catalog::REQUEST_NUM_PREEMPTIONS);
    let Some(preemptions) = families.iter().find(|f| f.name == preemptions) else {
        return;
    };
    let classes: std::collections::BTreeSet<(String, String)> =
        preemptions.series.iter().filter_map(class_of).collect();
    for class in classes {
        let of_class = |s: &Series| class_of(s).as_ref() == Some(&class);
        let Some(h) = MergedHistogram::of_family(
            families,
            by_class(&catalog::REQUEST_NUM_PREEMPTIONS),
            of_class,
        ) else {
            continue;
        };
        let ttft =
            MergedHistogram::of_family(families, by_class(&catalog::TIME_TO_FIRST_TOKEN), of_class)
                .map_or(f64::NAN, |t| t.quantile(0.99));
        let mut line = String::from("class");
        for (name, value) in [
            (catalog::LORA_NAME_LABEL, &class.0),
            (catalog::PRIORITY_LABEL, &class.1),
        ] {
            if !value.is_empty() {
                let _ = write!(line, " {name}={value}");
            }
        }
        let _ = write!(
            line,
            ": {} requests, {:.3} preemptions/request, TTFT p99 {:.3} s",
            h.count,
            h.mean(),
            ttft
        );
        let judged = counter_where(families, &catalog::slo::SLO_REQUESTS, of_class);
        if judged > 0.0 {
            let met = counter_where(families, &catalog::slo::SLO_REQUESTS, |s| {
                let met = catalog::slo::SLO_OUTCOMES[0];
                of_class(s)
                    && (s.labels.iter())
                        .any(|(k, v)| k == catalog::slo::SLO_OUTCOME_LABEL && v == met)
            });
            let _ = write!(line, ", SLO met {:.1}%", met / judged * 100.0);
        }
        let _ = writeln!(out, "{line}");
    }
}

/// The p-quantiles a summary shows.
pub(crate) const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// The summary of one run.
/// `most_preempted` is the most-preempted request's count and trace, with
/// exemplars on (`None` inside: no request's trace was kept).
pub(crate) fn summary(
    config: &SimConfig,
    outcome: &SimOutcome,
    families: &[Family],
    most_preempted: Option<Option<(u64, TraceLink)>>,
    wall: f64,
) -> String {
    let mut out = String::new();
    let speed = if wall > 0.0 {
        outcome.simulated_seconds / wall
    } else {
        f64::INFINITY
    };
    let _ = writeln!(
        out,
        "simulated {:.1} s in {:.2} s of wall time ({speed:.0}x); {} engine(s), {} model(s), seed {}",
        outcome.simulated_seconds, wall, config.engines, config.models, config.seed
    );
    let reasons: Vec<String> = vllm_otel_metrics::protocol::FinishReason::ALL
        .iter()
        .map(|r| {
            (
                r,
                counter_total(
                    families,
                    &catalog::REQUEST_SUCCESS,
                    Some(("finished_reason", r.as_str())),
                ),
            )
        })
        .filter(|(_, n)| *n > 0.0)
        .map(|(r, n)| format!("{} {n}", r.as_str()))
        .collect();
    let _ = writeln!(
        out,
        "requests: {} arrived, {} terminated ({})",
        outcome.requests,
        outcome.finished + outcome.aborted,
        reasons.join(", ")
    );
    if let Some(h) = MergedHistogram::from_snapshot(families, &catalog::REQUEST_NUM_PREEMPTIONS) {
        preemption_rows(&mut out, &outcome.preemptions_per_request, &h);
    }
    class_rows(&mut out, families);
    match most_preempted {
        Some(Some((count, link))) => {
            let _ = writeln!(
                out,
                "most-preempted request: {count} preemptions, trace {} (its llm_request span {})",
                link.trace_id, link.span_id
            );
        }
        Some(None) => {
            let _ = writeln!(
                out,
                "most-preempted request: no trace kept (no span was sampled)"
            );
        }
        None => {}
    }
    let latency = |def: &MetricDef| {
        MergedHistogram::from_snapshot(families, def).map_or_else(
            || "n/a".to_owned(),
            |h| {
                format!(
                    "p50 {:.3} s, p99 {:.3} s",
                    h.quantile(0.5),
                    h.quantile(0.99)
                )
            },
        )
    };
    let _ = writeln!(
        out,
        "TTFT {}; e2e {}",
        latency(&catalog::TIME_TO_FIRST_TOKEN),
        latency(&catalog::E2E_REQUEST_LATENCY)
    );
    let seconds = outcome.simulated_seconds.max(f64::MIN_POSITIVE);
    if let Some(slo) = SloSummary::from_snapshot(families) {
        let _ = writeln!(out, "{}", slo.line(seconds));
    }
    let _ = writeln!(
        out,
        "{:.0} generated tokens/s; peak KV-cache usage {:.1}%; {} preemptions ({:.2}/s)",
        outcome.generated_tokens as f64 / seconds,
        outcome.peak_kv_usage * 100.0,
        outcome.preemptions,
        outcome.preemptions as f64 / seconds
    );
    out
}

/// The preemption histogram's section of a summary. Rows are the exact
/// counts the simulator knows, 0 apart from 1 (vLLM's first bucket,
/// `le="1"`, holds both), then the catalog's buckets; the quantiles are
/// exact counts too, followed by what `histogram_quantile` makes of the
/// recorded histogram (what a dashboard shows).
fn preemption_rows(out: &mut String, exact: &BTreeMap<u32, u64>, h: &MergedHistogram) {
    let requests: u64 = exact.values().sum();
    let _ = writeln!(
        out,
        "preemptions per request ({requests} requests; {} buckets them as le={}):",
        catalog::REQUEST_NUM_PREEMPTIONS.vllm_name,
        catalog::PREEMPTION_BUCKETS
            .iter()
            .map(|b| format!("{b}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let in_range = |low: u32, high: u32| -> u64 { exact.range(low..=high).map(|(_, n)| n).sum() };
    let mut rows = vec![("0".to_owned(), in_range(0, 0))];
    let mut low = 1;
    for &le in catalog::PREEMPTION_BUCKETS {
        let high = le as u32;
        let label = if high == low {
            format!("{high}")
        } else {
            format!("{low}-{high}")
        };
        rows.push((label, in_range(low, high)));
        low = high + 1;
    }
    rows.push((format!(">{}", low - 1), in_range(low, u32::MAX)));
    let widest = rows.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    for (label, n) in rows {
        let bar = "#".repeat(((n as f64 / widest as f64) * 40.0).round() as usize);
        let share = if requests > 0 {
            100.0 * n as f64 / requests as f64
        } else {
            0.0
        };
        let _ = writeln!(out, "  {label:>6} | {bar:<40} {n:>7} {share:5.1}%");
    }
    let exact_quantiles: Vec<String> = QUANTILES
        .iter()
        .map(|q| format!("p{} {}", (q * 100.0).round(), exact_quantile(exact, *q)))
        .collect();
    let max = exact.keys().next_back().copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "  {}, max {max}, mean {:.3}",
        exact_quantiles.join(", "),
        h.mean()
    );
    let interpolated: Vec<String> = QUANTILES
        .iter()
        .map(|q| format!("p{} {:.2}", (q * 100.0).round(), h.quantile(*q)))
        .collect();
    let _ = writeln!(out, "  histogram_quantile: {}", interpolated.join(", "));
}

/// The `q`-quantile of exact counts (nearest rank): the smallest count at
/// least a share `q` of the requests do not exceed.
fn exact_quantile(exact: &BTreeMap<u32, u64>, q: f64) -> u32 {
    let requests: u64 = exact.values().sum();
    let rank = ((q * requests as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (&count, &n) in exact {
        seen += n;
        if seen >= rank {
            return count;
        }
    }
    0
}

/// The SLO outcomes of a run (`--slo`), summed over every label set.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SloSummary {
    /// Requests by outcome, in `catalog::slo::SLO_OUTCOMES` order.
    pub(crate) outcomes: [u64; catalog::slo::SLO_OUTCOMES.len()],
    /// Generation tokens of the requests that met the SLO.
    pub(crate) goodput_tokens: u64,
}

impl SloSummary {
    /// The SLO families of a snapshot; None without `--slo`.
    pub(crate) fn from_snapshot(families: &[Family]) -> Option<SloSummary> {
        use catalog::slo::{SLO_GOODPUT_TOKENS, SLO_OUTCOMES, SLO_REQUESTS};
        families.iter().find(|f| f.name == SLO_REQUESTS.vllm_name)?;
        let outcomes = SLO_OUTCOMES.map(|outcome| {
            counter_total(families, &SLO_REQUESTS, Some(("outcome", outcome))) as u64
        });
        Some(SloSummary {
            outcomes,
            goodput_tokens: counter_total(families, &SLO_GOODPUT_TOKENS, None) as u64,
        })
    }

    /// Requests judged.
    pub(crate) fn requests(&self) -> u64 {
        self.outcomes.iter().sum()
    }

    /// Requests that met the SLO.
    pub(crate) fn met(&self) -> u64 {
        self.outcomes[0]
    }

    /// The share of judged requests that met the SLO (0 when none was).
    pub(crate) fn attainment(&self) -> f64 {
        match self.requests() {
            0 => 0.0,
            n => self.met() as f64 / n as f64,
        }
    }

    /// The summary's line, rates over `seconds`.
    pub(crate) fn line(&self, seconds: f64) -> String {
        let o = &self.outcomes;
        format!(
            "SLO: {} of {} requests met ({:.1}%); missed TTFT {}, TPOT {}, both {}, e2e {}; aborted {}; goodput {:.2} requests/s, {:.0} tokens/s",
            self.met(),
            self.requests(),
            self.attainment() * 100.0,
            o[1],
            o[2],
            o[3],
            o[4],
            o[5],
            self.met() as f64 / seconds,
            self.goodput_tokens as f64 / seconds
        )
    }
}

/// One row of a capacity what-if sweep.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SweepRow {
    /// KV blocks per engine.
    pub(crate) kv_blocks: u32,
    /// Terminated requests.
    pub(crate) requests: u64,
    /// Preemptions per terminated request.
    pub(crate) mean_preemptions: f64,
    /// p99 preemptions per request (`histogram_quantile`).
    pub(crate) p99_preemptions: f64,
    /// Share of requests preempted at least twice (exact).
    pub(crate) share_preempted_twice: f64,
    /// p99 time to first token, seconds.
    pub(crate) ttft_p99: f64,
    /// Preemption events.
    pub(crate) preemptions: u64,
    /// The SLO outcomes, with `--slo`.
    pub(crate) slo: Option<SloSummary>,
    /// Simulated seconds (the goodput's rate).
    pub(crate) seconds: f64,
    /// Generated tokens per second of every request.
    pub(crate) throughput: f64,
}

impl SweepRow {
    /// The row of one run.
    pub(crate) fn new(kv_blocks: u32, outcome: &SimOutcome, families: &[Family]) -> SweepRow {
        let terminated: u64 = outcome.preemptions_per_request.values().sum();
        let twice: u64 = outcome
            .preemptions_per_request
            .iter()
            .filter(|(k, _)| **k >= 2)
            .map(|(_, n)| n)
            .sum();
        let preemptions =
            MergedHistogram::from_snapshot(families, &catalog::REQUEST_NUM_PREEMPTIONS);
        let ttft = MergedHistogram::from_snapshot(families, &catalog::TIME_TO_FIRST_TOKEN);
        SweepRow {
            kv_blocks,
            requests: terminated,
            mean_preemptions: preemptions.as_ref().map_or(f64::NAN, MergedHistogram::mean),
            p99_preemptions: preemptions.map_or(f64::NAN, |h| h.quantile(0.99)),
            share_preempted_twice: if terminated > 0 {
                twice as f64 / terminated as f64
            } else {
                0.0
            },
            ttft_p99: ttft.map_or(f64::NAN, |h| h.quantile(0.99)),
            preemptions: outcome.preemptions,
            slo: SloSummary::from_snapshot(families),
            seconds: outcome.simulated_seconds.max(f64::MIN_POSITIVE),
            throughput: outcome.generated_tokens as f64
                / outcome.simulated_seconds.max(f64::MIN_POSITIVE),
        }
    }

    /// Generated tokens per second of the requests that met the SLO.
    pub(crate) fn goodput_tokens_per_second(&self) -> Option<f64> {
        self.slo
            .as_ref()
            .map(|slo| slo.goodput_tokens as f64 / self.seconds)
    }

    /// The table header matching [`SweepRow::line`] (with the SLO's
    /// columns when `slo`).
    pub(crate) fn header(slo: bool) -> String {
        let mut header = format!(
            "{:>9} {:>9} {:>12} {:>11} {:>10} {:>10} {:>12}",
            "kv_blocks",
            "requests",
            "preempt/req",
            "p99 preempt",
            "share>=2",
            "TTFT p99",
            "preemptions"
        );
        if slo {
            let _ = write!(
                header,
                " {:>8} {:>12} {:>12}",
                "SLO met", "goodput t/s", "tokens/s"
            );
        }
        header
    }

    /// The row as a table line.
    pub(crate) fn line(&self) -> String {
        format!(
            "{:>9} {:>9} {:>12.3} {:>11.2} {:>9.1}% {:>9.3}s {:>12}",
            self.kv_blocks,
            self.requests,
            self.mean_preemptions,
            self.p99_preemptions,
            self.share_preempted_twice * 100.0,
            self.ttft_p99,
            self.preemptions
        ) + &match (&self.slo, self.goodput_tokens_per_second()) {
            (Some(slo), Some(goodput)) => format!(
                " {:>7.1}% {:>12.1} {:>12.1}",
                slo.attainment() * 100.0,
                goodput,
                self.throughput
            ),
            _ => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_as_promql_does() {
        let h = MergedHistogram {
            buckets: vec![(1.0, 90), (2.0, 99), (5.0, 100)],
            count: 100,
            sum: 0.0,
        };
        assert_eq!(h.quantile(0.5), 1.0 * 50.0 / 90.0);
        assert_eq!(h.quantile(0.99), 2.0);
        assert_eq!(h.quantile(0.995), 2.0 + 3.0 * 0.5);
    }

    /// 0 and 1 are rows of their own, the quantiles whole counts.
    #[test]
    fn never_preempted_requests_are_a_row_and_quantiles_are_counts() {
        let exact = BTreeMap::from([(0, 6), (1, 2), (3, 1), (12, 1)]);
        // The same requests as vLLM's histogram records them.
        let h = MergedHistogram {
            buckets: vec![
                (1.0, 8),
                (2.0, 8),
                (3.0, 9),
                (4.0, 9),
                (5.0, 9),
                (10.0, 9),
                (20.0, 10),
            ],
            count: 10,
            sum: 17.0,
        };
        let mut out = String::new();
        preemption_rows(&mut out, &exact, &h);
        let bar = |n: usize| "#".repeat(n);
        let expected = [
            "preemptions per request (10 requests; vllm:request_num_preemptions buckets them as le=1,2,3,4,5,10,20):".to_owned(),
            format!("       0 | {:<40}       6  60.0%", bar(40)),
            format!("       1 | {:<40}       2  20.0%", bar(13)),
            format!("       2 | {:<40}       0   0.0%", ""),
            format!("       3 | {:<40}       1  10.0%", bar(7)),
            format!("       4 | {:<40}       0   0.0%", ""),
            format!("       5 | {:<40}       0   0.0%", ""),
            format!("    6-10 | {:<40}       0   0.0%", ""),
            format!("   11-20 | {:<40}       1  10.0%", bar(7)),
            format!("     >20 | {:<40}       0   0.0%", ""),
            "  p50 0, p90 3, p99 12, max 12, mean 1.700".to_owned(),
            "  histogram_quantile: p50 0.62, p90 3.00, p99 19.00".to_owned(),
        ];
        assert_eq!(out.lines().collect::<Vec<_>>(), expected);
    }
}
