//! Prometheus text expositions as the tests read them: their samples, the
//! `vllm:` ones, sums over a family, samples with their labels normalized
//! for comparing two encoders' output, and the catalog's bucket boundaries
//! an exposition's histograms are checked against.

use std::collections::BTreeMap;

/// The `vllm:` families only vLLM's own logger has, beside the plugin-fed
/// sidecar's, each for a reason docs/SEMANTICS.md §3b gives.
pub const ONLY_VLLM: &[&str] = &[
    // Frontend admission control: vLLM hands it to plugins through
    // `record_admission_rejection`, which no record type carries yet.
    "vllm:admission_rejections",
];

/// Whether `got` is `want` to rounding (within 1e-9 of it, relative): a
/// count exactly, a float sum added up in another order.
pub fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-9 * want.abs().max(1.0)
}

/// Samples of a text exposition: `name{labels}` exactly as written → value.
/// Panics on a line that is neither a comment nor a `key value` sample.
pub fn samples(exposition: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in exposition.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample line: {line:?}"));
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|e| panic!("bad value in {line:?}: {e}")),
        };
        assert!(
            out.insert(key.to_owned(), value).is_none(),
            "duplicate sample {key}"
        );
    }
    out
}

/// The `vllm:` samples of a text exposition, keyed as written.
pub fn vllm_samples(exposition: &str) -> BTreeMap<String, f64> {
    only_vllm(samples(exposition))
}

/// The samples of `vllm:` families only.
pub fn only_vllm(samples: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    samples
        .into_iter()
        .filter(|(key, _)| key.starts_with("vllm:"))
        .collect()
}

/// The sum of the samples of `name` (any labels) in a text exposition.
pub fn sum_of(exposition: &str, name: &str) -> f64 {
    samples(exposition)
        .iter()
        .filter(|(key, _)| key.split('{').next() == Some(name))
        .map(|(_, value)| value)
        .sum()
}

/// The sum of the samples of `name` whose label `label` is `value`.
pub fn sum_where(exposition: &str, name: &str, label: &str, value: &str) -> f64 {
    let with = format!("{label}=\"{value}\"");
    samples(exposition)
        .iter()
        .filter(|(key, _)| {
            key.split_once('{')
                .is_some_and(|(family, labels)| family == name && labels.contains(&with))
        })
        .map(|(_, value)| value)
        .sum()
}

/// A sample with its labels parsed: family-agnostic key for comparing
/// expositions written by different encoders (label order, `le` spelling).
pub fn normalized_samples(exposition: &str, drop_labels: &[&str]) -> BTreeMap<String, f64> {
    samples(exposition)
        .into_iter()
        .map(|(key, value)| (normalized_key(&key, drop_labels), value))
        .collect()
}

/// The samples of a text exposition with `drop_labels` summed away: the
/// samples that differ in those labels alone add up, under
/// [`normalized_samples`]' keys.
pub fn summed_away(exposition: &str, drop_labels: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (key, value) in samples(exposition) {
        *out.entry(normalized_key(&key, drop_labels)).or_insert(0.0) += value;
    }
    out
}

/// `name{labels}` with its labels sorted, `drop_labels` left out and `le`
/// written as a float.
fn normalized_key(key: &str, drop_labels: &[&str]) -> String {
    let (name, labels) = match key.split_once('{') {
        Some((name, rest)) => (name, rest.trim_end_matches('}')),
        None => (key, ""),
    };
    let mut pairs: Vec<(String, String)> = split_labels(labels)
        .into_iter()
        .filter(|(k, _)| !drop_labels.contains(&k.as_str()))
        .map(|(k, v)| {
            let v = if k == "le" && v != "+Inf" {
                format!("{:?}", v.parse::<f64>().expect("numeric le"))
            } else {
                v
            };
            (k, v)
        })
        .collect();
    pairs.sort();
    let labels: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// The value of the label `name` of a sample keyed `family{labels}` (as
/// [`samples`] keys them), unescaped; `None` when it has no such label.
pub fn label(key: &str, name: &str) -> Option<String> {
    let labels = key.split_once('{')?.1.trim_end_matches('}');
    split_labels(labels)
        .into_iter()
        .find_map(|(k, v)| (k == name).then_some(v))
}

fn split_labels(labels: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = labels.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'));
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.push(chars.next().unwrap()),
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((name.trim_start_matches(',').to_owned(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    out
}

/// The bucket boundaries the catalog gives the family `/metrics` names
/// `vllm_name`, at the default `--max-model-len`.
pub fn catalog_bounds(vllm_name: &str) -> Vec<f64> {
    let catalog = vllm_otel_metrics::catalog::by_vllm_name(vllm_name);
    catalog
        .unwrap_or_else(|| panic!("no catalog family {vllm_name}"))
        .buckets
        .boundaries(vllm_otel_metrics::catalog::DEFAULT_MAX_MODEL_LEN)
}
