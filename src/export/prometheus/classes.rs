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

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use crate::catalog::labels::{LORA_NAME_LABEL, PRIORITY_LABEL};

fn is_class_label(pair: &LabelPair) -> bool {
    let name = pair.name();
    name == LORA_NAME_LABEL || name == PRIORITY_LABEL
}

/// When `family` has series with class labels: rewrites it to its series
/// summed over the class labels, and returns it as gathered (the by-class
/// family). `None`, and `family` untouched, otherwise.
pub(super) fn split_classes(family: &mut MetricFamily) -> Option<MetricFamily> {
    let classed = family
        .get_metric()
        .iter()
        .any(|metric| metric.get_label().iter().any(is_class_label));
    if !classed {
        return None;
    }
    let field_type = family.get_field_type();
    let by_class = family.clone();
    let mut summed: Vec<Metric> = Vec::new();
    // The labels but the class's, as the key of the summed series.
    let mut index: HashMap<Vec<(&str, &str)>, usize> = HashMap::new();
    for metric in by_class.get_metric() {
        let kept: Vec<&LabelPair> = metric
            .get_label()
            .iter()
            .filter(|pair| !is_class_label(pair))
            .collect();
        let key = kept.iter().map(|p| (p.name(), p.value())).collect();
        match index.get(&key) {
            Some(&at) if add_into(&mut summed[at], metric, field_type) => {}
            _ => {
                let mut first = metric.clone();
                first.set_label(kept.into_iter().cloned().collect());
                index.insert(key, summed.len());
                summed.push(first);
            }
        }
    }
    family.set_metric(summed);
    Some(by_class)
}

/// Adds `metric`'s value into `into`'s. False, and nothing added, for two
/// histograms of different bucket bounds (kept apart: the SDK never gives
/// one family two, but a sum over them would be wrong).
fn add_into(into: &mut Metric, metric: &Metric, field_type: MetricType) -> bool {
    match field_type {
        MetricType::COUNTER => {
            let mut counter = into.get_counter().clone();
            counter.set_value(counter.get_value() + metric.get_counter().get_value());
            into.set_counter(counter);
        }
        MetricType::HISTOGRAM => {
            let (a, b) = (into.get_histogram(), metric.get_histogram());
            let same_bounds = a.get_bucket().len() == b.get_bucket().len()
                && a.get_bucket()
                    .iter()
                    .zip(b.get_bucket())
                    .all(|(x, y)| x.upper_bound().to_bits() == y.upper_bound().to_bits());
            if !same_bounds {
                return false;
            }
            let mut histogram = a.clone();
            histogram.set_sample_count(a.get_sample_count() + b.get_sample_count());
            histogram.set_sample_sum(a.get_sample_sum() + b.get_sample_sum());
            let buckets = a
                .get_bucket()
                .iter()
                .zip(b.get_bucket())
                .map(|(x, y)| {
                    let mut bucket = x.clone();
                    bucket.set_cumulative_count(x.cumulative_count() + y.cumulative_count());
                    bucket
                })
                .collect();
            histogram.set_bucket(buckets);
            into.set_histogram(histogram);
        }
        _ => {
            let mut gauge = into.get_gauge().clone();
            gauge.set_value(gauge.get_value() + metric.get_gauge().get_value());
            into.set_gauge(gauge);
        }
    }
    true
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
