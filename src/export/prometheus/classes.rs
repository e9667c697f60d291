//! Attribution on `/metrics`: vLLM's families as vLLM writes them, and
//! their series by class beside them.
//!
//! With `--attribute`, the SDK aggregates each request's observations once,
//! under the label set of its class (`lora_name`, `priority`). vLLM's
//! dashboards read vLLM's families, and 14 of their queries do not
//! aggregate, so class labels on those families would split their lines
//! (docs/SEMANTICS.md §6d). Recording every observation a second time,
//! without the class, would double the recording path's cost; the SDK's
//! own way to get both (a second View whose attribute filter drops the
//! class) does exactly that. So the sum is taken here, at scrape time, over
//! what the SDK aggregated: each vLLM family keeps its own labels, its
//! series of equal labels but for the class added up (spatial
//! re-aggregation in OpenTelemetry's data model: counts, sums and bucket
//! counts are added), and the series as the SDK holds them go to the
//! family's by-class twin (`vllm_class:…`). Without `--attribute` no series
//! has a class label and nothing is touched.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};

use foldhash::fast::FixedState;
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

use crate::catalog::labels::{LORA_NAME_LABEL, PRIORITY_LABEL};

fn is_class_label(pair: &LabelPair) -> bool {
    let name = pair.name();
    name == LORA_NAME_LABEL || name == PRIORITY_LABEL
}

/// A series' labels but the class's.
fn kept(metric: &Metric) -> impl Iterator<Item = &LabelPair> + Clone {
    metric
        .get_label()
        .iter()
        .filter(|pair| !is_class_label(pair))
}

/// The hash of a series' labels but the class's.
fn kept_hash(metric: &Metric, hasher: &FixedState) -> u64 {
    let mut state = hasher.build_hasher();
    for pair in kept(metric) {
        pair.name().hash(&mut state);
        pair.value().hash(&mut state);
    }
    state.finish()
}

/// Whether two series' labels but the class's are equal.
fn same_kept(a: &Metric, b: &Metric) -> bool {
    kept(a)
        .map(|p| (p.name(), p.value()))
        .eq(kept(b).map(|p| (p.name(), p.value())))
}

/// Whether two histograms have the same bucket bounds.
fn same_bounds(a: &Histogram, b: &Histogram) -> bool {
    a.get_bucket().len() == b.get_bucket().len()
        && a.get_bucket()
            .iter()
            .zip(b.get_bucket())
            .all(|(x, y)| x.upper_bound().to_bits() == y.upper_bound().to_bits())
}

/// One summed series: the first series of its group (its labels and, for
/// a histogram, its bounds) and the running sums.
struct Summed {
    first: usize,
    value: f64,
    count: u64,
    buckets: Vec<u64>,
    /// The next group with the same hash.
    next: Option<usize>,
}

/// When `family` has series with class labels: rewrites it to its series
/// summed over the class labels, and returns its series as gathered (the
/// by-class family). `None`, and `family` untouched, otherwise.
pub(super) fn split_classes(family: &mut MetricFamily) -> Option<MetricFamily> {
    let classed = family
        .get_metric()
        .iter()
        .any(|metric| metric.get_label().iter().any(is_class_label));
    if !classed {
        return None;
    }
    let field_type = family.get_field_type();
    let metrics = family.take_metric();
    let hasher = FixedState::default();
    let mut groups: Vec<Summed> = Vec::new();
    let mut heads: HashMap<u64, usize> = HashMap::with_capacity(metrics.len() / 2);
    for (at, metric) in metrics.iter().enumerate() {
        let hash = kept_hash(metric, &hasher);
        let mut found = heads.get(&hash).copied();
        while let Some(group) = found {
            let first = &metrics[groups[group].first];
            let fits = same_kept(first, metric)
                && (field_type != MetricType::HISTOGRAM
                    || same_bounds(first.get_histogram(), metric.get_histogram()));
            if fits {
                break;
            }
            found = groups[group].next;
        }
        let group = match found {
            Some(group) => group,
            None => {
                let buckets = match field_type {
                    MetricType::HISTOGRAM => vec![0; metric.get_histogram().get_bucket().len()],
                    _ => Vec::new(),
                };
                groups.push(Summed {
                    first: at,
                    value: 0.0,
                    count: 0,
                    buckets,
                    next: heads.insert(hash, groups.len()),
                });
                groups.len() - 1
            }
        };
        let sums = &mut groups[group];
        match field_type {
            MetricType::COUNTER => sums.value += metric.get_counter().get_value(),
            MetricType::HISTOGRAM => {
                let h = metric.get_histogram();
                sums.value += h.get_sample_sum();
                sums.count += h.get_sample_count();
                for (into, bucket) in sums.buckets.iter_mut().zip(h.get_bucket()) {
                    *into += bucket.cumulative_count();
                }
            }
            _ => sums.value += metric.get_gauge().get_value(),
        }
    }
    let summed = groups
        .iter()
        .map(|sums| {
            let first = &metrics[sums.first];
            let mut metric = Metric::from_label(kept(first).cloned().collect());
            match field_type {
                MetricType::COUNTER => {
                    let mut counter = Counter::default();
                    counter.set_value(sums.value);
                    metric.set_counter(counter);
                }
                MetricType::HISTOGRAM => {
                    let mut histogram = Histogram::default();
                    histogram.set_sample_sum(sums.value);
                    histogram.set_sample_count(sums.count);
                    let bounds = first.get_histogram().get_bucket();
                    let buckets = bounds.iter().zip(&sums.buckets).map(|(bound, &count)| {
                        let mut bucket = Bucket::default();
                        bucket.set_upper_bound(bound.upper_bound());
                        bucket.set_cumulative_count(count);
                        bucket
                    });
                    histogram.set_bucket(buckets.collect());
                    metric.set_histogram(histogram);
                }
                _ => {
                    let mut gauge = Gauge::default();
                    gauge.set_value(sums.value);
                    metric.set_gauge(gauge);
                }
            }
            metric
        })
        .collect();
    let mut by_class = MetricFamily::default();
    by_class.set_name(family.name().to_owned());
    by_class.set_help(family.help().to_owned());
    by_class.set_field_type(field_type);
    by_class.set_metric(metrics);
    family.set_metric(summed);
    Some(by_class)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::proto::{Bucket, Counter, Histogram};

    fn pair(name: &str, value: &str) -> LabelPair {
        let mut pair = LabelPair::default();
        pair.set_name(name.to_owned());
        pair.set_value(value.to_owned());
        pair
    }

    fn counter(labels: &[(&str, &str)], value: f64) -> Metric {
        let mut metric = Metric::from_label(labels.iter().map(|(n, v)| pair(n, v)).collect());
        let mut counter = Counter::default();
        counter.set_value(value);
        metric.set_counter(counter);
        metric
    }

    fn histogram(labels: &[(&str, &str)], bounds: &[f64], counts: &[u64], sum: f64) -> Metric {
        let mut metric = Metric::from_label(labels.iter().map(|(n, v)| pair(n, v)).collect());
        let mut histogram = Histogram::default();
        histogram.set_sample_count(*counts.last().unwrap());
        histogram.set_sample_sum(sum);
        histogram.set_bucket(
            bounds
                .iter()
                .zip(counts)
                .map(|(&bound, &count)| {
                    let mut bucket = Bucket::default();
                    bucket.set_upper_bound(bound);
                    bucket.set_cumulative_count(count);
                    bucket
                })
                .collect(),
        );
        metric.set_histogram(histogram);
        metric
    }

    fn family(field_type: MetricType, metrics: Vec<Metric>) -> MetricFamily {
        let mut family = MetricFamily::default();
        family.set_name("f".to_owned());
        family.set_field_type(field_type);
        family.set_metric(metrics);
        family
    }

    fn labels(metric: &Metric) -> Vec<(&str, &str)> {
        metric
            .get_label()
            .iter()
            .map(|p| (p.name(), p.value()))
            .collect()
    }

    #[test]
    fn counters_of_one_label_set_add_up_over_their_classes() {
        let metrics = vec![
            counter(
                &[
                    ("engine", "0"),
                    ("lora_name", "a"),
                    ("model_name", "m"),
                    ("priority", "0"),
                ],
                2.0,
            ),
            counter(
                &[
                    ("engine", "0"),
                    ("lora_name", "b"),
                    ("model_name", "m"),
                    ("priority", "0"),
                ],
                3.0,
            ),
            counter(
                &[
                    ("engine", "1"),
                    ("lora_name", "a"),
                    ("model_name", "m"),
                    ("priority", "1"),
                ],
                7.0,
            ),
            counter(
                &[
                    ("engine", "0"),
                    ("lora_name", "none"),
                    ("model_name", "m"),
                    ("priority", "1"),
                ],
                5.0,
            ),
        ];
        let mut gathered = family(MetricType::COUNTER, metrics.clone());
        let by_class = split_classes(&mut gathered).expect("classed");
        assert_eq!(by_class.get_metric(), &metrics[..]);
        let summed: Vec<_> = gathered
            .get_metric()
            .iter()
            .map(|m| (labels(m), m.get_counter().get_value()))
            .collect();
        assert_eq!(
            summed,
            vec![
                (vec![("engine", "0"), ("model_name", "m")], 10.0),
                (vec![("engine", "1"), ("model_name", "m")], 7.0),
            ]
        );
    }

    #[test]
    fn histograms_add_counts_sums_and_buckets() {
        let bounds = [1.0, 2.0, f64::INFINITY];
        let a = [("engine", "0"), ("model_name", "m"), ("priority", "0")];
        let b = [("engine", "0"), ("model_name", "m"), ("priority", "1")];
        let mut gathered = family(
            MetricType::HISTOGRAM,
            vec![
                histogram(&a, &bounds, &[1, 2, 4], 5.5),
                histogram(&b, &bounds, &[0, 3, 3], 4.0),
            ],
        );
        split_classes(&mut gathered).expect("classed");
        assert_eq!(
            gathered.get_metric(),
            &[histogram(
                &[("engine", "0"), ("model_name", "m")],
                &bounds,
                &[1, 5, 7],
                9.5
            )]
        );
    }

    #[test]
    fn histograms_of_other_bounds_stay_apart() {
        let a = [("engine", "0"), ("model_name", "m"), ("priority", "0")];
        let b = [("engine", "0"), ("model_name", "m"), ("priority", "1")];
        let mut gathered = family(
            MetricType::HISTOGRAM,
            vec![
                histogram(&a, &[1.0, f64::INFINITY], &[1, 2], 3.0),
                histogram(&b, &[2.0, f64::INFINITY], &[1, 1], 1.0),
            ],
        );
        split_classes(&mut gathered).expect("classed");
        assert_eq!(gathered.get_metric().len(), 2);
    }

    #[test]
    fn a_family_without_class_labels_is_left_as_it_is() {
        let metrics = vec![
            counter(&[("engine", "0"), ("model_name", "m")], 2.0),
            counter(&[("engine", "1"), ("model_name", "m")], 3.0),
        ];
        let mut gathered = family(MetricType::COUNTER, metrics.clone());
        assert!(split_classes(&mut gathered).is_none());
        assert_eq!(gathered.get_metric(), &metrics[..]);
    }
}
