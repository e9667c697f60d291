//! Where the gathered series go in the exposition: each family's series in
//! exposition order, each series' labels in exposition order.
//!
//! `opentelemetry-prometheus` writes a series' labels sorted by name and the
//! registry sorts a family's series by those label values as strings; vLLM
//! writes its labels in declaration order (`model_name`, `engine`, …) and
//! its series by their values in that order, engine numbers as numbers
//! (`engine="10"` after `"9"`). A [`Layout`] holds that order as indices
//! into the gathered family, so the series are read in place: one layout
//! per family, no allocation per series. The snapshot and the direct
//! encoder both read the series through it.

use std::cmp::Ordering;

use prometheus::proto::{LabelPair, Metric, MetricFamily};

/// A label value as series are ordered by it: its number when it is an
/// integer (`engine="10"` after `"9"`), its text otherwise. Worked out once
/// per value, not once per comparison.
#[derive(Debug, Clone, Copy)]
struct SortKey<'g> {
    number: Option<u64>,
    /// The text's first 8 bytes, big-endian, zero-padded: where two texts
    /// differ there, this orders them as the texts (most label values,
    /// `model-3` or `stop`, are that short); where it is equal, the texts
    /// decide.
    prefix: u64,
    text: &'g str,
}

impl<'g> SortKey<'g> {
    fn of(text: &'g str) -> Self {
        // Up to 19 digits fit a u64.
        let is_integer =
            !text.is_empty() && text.len() <= 19 && text.bytes().all(|c| c.is_ascii_digit());
        let number =
            is_integer.then(|| text.bytes().fold(0u64, |n, c| n * 10 + u64::from(c - b'0')));
        let mut head = [0u8; 8];
        let len = text.len().min(8);
        head[..len].copy_from_slice(&text.as_bytes()[..len]);
        SortKey {
            number,
            prefix: u64::from_be_bytes(head),
            text,
        }
    }

    /// Numerically where both are integers, else as text.
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.number, other.number) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => self
                .prefix
                .cmp(&other.prefix)
                .then_with(|| self.text.cmp(other.text)),
        }
    }
}

/// One gathered family's series and labels in exposition order.
#[derive(Debug)]
pub(super) struct Layout<'g> {
    family: &'g MetricFamily,
    /// Per series in exposition order: its index in the family and where its
    /// label order starts in `label_order`.
    series: Vec<(u32, u32)>,
    /// Every series' label indices in exposition order, one run per series
    /// (as long as the series' label list).
    label_order: Vec<u32>,
}

impl<'g> Layout<'g> {
    /// Lays `family` out with its labels in exposition order: `first` (the
    /// overflow label) before all, then `order` (the catalog's), then any
    /// other by name.
    pub(super) fn new(family: &'g MetricFamily, first: &str, order: &[&str]) -> Layout<'g> {
        let metrics = family.get_metric();
        let mut label_order = Vec::with_capacity(metrics.len() * order.len().max(1));
        let mut series = Vec::with_capacity(metrics.len());
        // The previous series' label names and their order: most series of
        // a family share them, so the order is computed once per change.
        let mut previous: Option<(&[LabelPair], u32)> = None;
        for (index, metric) in metrics.iter().enumerate() {
            let labels = metric.get_label();
            let start = label_order.len() as u32;
            match previous {
                Some((names, at)) if same_names(names, labels) => {
                    let at = at as usize;
                    label_order.extend_from_within(at..at + labels.len());
                }
                _ => {
                    push_label_order(&mut label_order, labels, first, order);
                    previous = Some((labels, start));
                }
            }
            series.push((index as u32, start));
        }
        let mut layout = Layout {
            family,
            series,
            label_order,
        };
        layout.sort();
        layout
    }

    /// The gathered family.
    pub(super) fn family(&self) -> &'g MetricFamily {
        self.family
    }

    /// The series in exposition order, with their labels in exposition order.
    pub(super) fn series(
        &self,
    ) -> impl Iterator<Item = (&'g Metric, impl Iterator<Item = &'g LabelPair> + '_)> + '_ {
        let metrics = self.family.get_metric();
        self.series.iter().map(move |&(index, start)| {
            let metric = &metrics[index as usize];
            (metric, self.labels_of(metric, start))
        })
    }

    fn labels_of(
        &self,
        metric: &'g Metric,
        start: u32,
    ) -> impl Iterator<Item = &'g LabelPair> + '_ {
        let labels = metric.get_label();
        let start = start as usize;
        self.label_order[start..start + labels.len()]
            .iter()
            .map(move |&i| &labels[i as usize])
    }

    /// Sorts the series by their label values in exposition order, then by
    /// their number of labels. Each value's key is worked out once, in
    /// `label_order`'s runs, so a comparison parses nothing.
    fn sort(&mut self) {
        let metrics = self.family.get_metric();
        let mut keys = Vec::with_capacity(self.label_order.len());
        // Each series with the end of its run of keys, so that a comparison
        // reads the keys alone, not the gathered series.
        let mut runs: Vec<((u32, u32), u32)> = Vec::with_capacity(self.series.len());
        for &(index, start) in &self.series {
            let metric = &metrics[index as usize];
            keys.extend(
                self.labels_of(metric, start)
                    .map(|l| SortKey::of(l.value())),
            );
            runs.push(((index, start), keys.len() as u32));
        }
        runs.sort_by(|&((_, a_start), a_end), &((_, b_start), b_end)| {
            let a = &keys[a_start as usize..a_end as usize];
            let b = &keys[b_start as usize..b_end as usize];
            a.iter()
                .zip(b)
                .map(|(x, y)| x.cmp(y))
                .find(|o| o.is_ne())
                .unwrap_or_else(|| a.len().cmp(&b.len()))
        });
        self.series.clear();
        self.series
            .extend(runs.into_iter().map(|(series, _)| series));
    }
}

fn same_names(a: &[LabelPair], b: &[LabelPair]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.name() == y.name())
}

/// Appends the exposition order of `labels`: by rank, then by name.
fn push_label_order(out: &mut Vec<u32>, labels: &[LabelPair], first: &str, order: &[&str]) {
    let rank = |label: &LabelPair| {
        let name = label.name();
        if name == first {
            0
        } else {
            1 + order.iter().position(|o| *o == name).unwrap_or(order.len())
        }
    };
    let start = out.len();
    out.extend(0..labels.len() as u32);
    out[start..].sort_by(|&a, &b| {
        let (a, b) = (&labels[a as usize], &labels[b as usize]);
        rank(a).cmp(&rank(b)).then_with(|| a.name().cmp(b.name()))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(labels: &[(&str, &str)]) -> Metric {
        let mut metric = Metric::default();
        metric.set_label(
            labels
                .iter()
                .map(|(name, value)| {
                    let mut pair = LabelPair::default();
                    pair.set_name((*name).to_owned());
                    pair.set_value((*value).to_owned());
                    pair
                })
                .collect(),
        );
        metric
    }

    #[test]
    fn series_follow_the_catalog_label_order_and_engines_sort_as_numbers() {
        let mut family = MetricFamily::default();
        family.set_metric(vec![
            metric(&[("engine", "10"), ("model_name", "a")]),
            metric(&[("engine", "9"), ("model_name", "a")]),
            metric(&[("engine", "0"), ("model_name", "b")]),
            metric(&[("otel_metric_overflow", "true")]),
            metric(&[("engine", "1"), ("extra", "x"), ("model_name", "a")]),
        ]);
        let layout = Layout::new(&family, "otel_metric_overflow", &["model_name", "engine"]);
        let rendered: Vec<String> = layout
            .series()
            .map(|(_, labels)| {
                labels
                    .map(|l| format!("{}={}", l.name(), l.value()))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        assert_eq!(
            rendered,
            [
                "model_name=a,engine=1,extra=x",
                "model_name=a,engine=9",
                "model_name=a,engine=10",
                "model_name=b,engine=0",
                "otel_metric_overflow=true",
            ]
        );
    }

    /// A host's collector on the bridge's registry may write any number of
    /// labels: each series keeps all of its own, in order.
    #[test]
    fn series_with_hundreds_of_labels_keep_every_label() {
        let names: Vec<String> = (0..300).map(|i| format!("l{i:03}")).collect();
        let pairs = |value: &'static str| -> Vec<(&str, &str)> {
            names.iter().map(|n| (n.as_str(), value)).collect()
        };
        let mut family = MetricFamily::default();
        family.set_metric(vec![metric(&pairs("b")), metric(&pairs("a"))]);
        let layout = Layout::new(&family, "otel_metric_overflow", &[]);
        let series: Vec<Vec<(String, String)>> = layout
            .series()
            .map(|(_, labels)| {
                labels
                    .map(|l| (l.name().to_owned(), l.value().to_owned()))
                    .collect()
            })
            .collect();
        let expected = |value: &str| -> Vec<(String, String)> {
            names
                .iter()
                .map(|n| (n.clone(), value.to_owned()))
                .collect()
        };
        assert_eq!(series, [expected("a"), expected("b")]);
    }

    fn compare_label_values(a: &str, b: &str) -> Ordering {
        SortKey::of(a).cmp(&SortKey::of(b))
    }

    #[test]
    fn label_values_compare_as_numbers_only_when_both_are() {
        assert_eq!(compare_label_values("9", "10"), Ordering::Less);
        // Texts compare as texts, past their first 8 bytes too.
        assert_eq!(compare_label_values("model-10", "model-9"), Ordering::Less);
        assert_eq!(
            compare_label_values("abcdefgh1", "abcdefgh0"),
            Ordering::Greater
        );
        assert_eq!(compare_label_values("ab", "ab\0"), Ordering::Less);
        assert_eq!(compare_label_values("ab\0", "ab"), Ordering::Greater);
        assert_eq!(compare_label_values("same", "same"), Ordering::Equal);
        assert_eq!(compare_label_values("b", "10"), Ordering::Greater);
        assert_eq!(compare_label_values("", "0"), Ordering::Less);
        assert_eq!(
            compare_label_values("18446744073709551615", "9"),
            Ordering::Less
        );
    }
}
