//! Attribution (`--attribute lora,priority`, docs/SEMANTICS.md §6d): vLLM's
//! families are exactly what they are without attribution, and beside each
//! per-request family its series by class (`vllm_class:…`) carry each
//! request's adapter and priority class and sum to it; the per-step family
//! stays unclassed; the labels stay within their caps under churn, and no
//! request leaves the totals.
//!
//! The records are a simulated two-engine run's (preemptions, aborts), each
//! request given an adapter and a priority from its id, replayed into
//! instruments with attribution on and off.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
}

use std::collections::{BTreeMap, BTreeSet};

use common::exposition::{close, label, samples, summed_away};
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::{Attribution, Instruments, PriorityClasses};
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::sources::sim::{simulate, SimConfig};
use vllm_otel_metrics::tracker::Tracker;

/// A simulated run's records: about 300 requests on two engines, a KV
/// cache small enough to preempt, some aborted.
fn simulated() -> Vec<Record> {
    simulated_at(5.0, 60.0)
}

/// [`simulated`] at `rate` requests per second for `duration` seconds.
fn simulated_at(rate: f64, duration: f64) -> Vec<Record> {
    let mut config = SimConfig::default();
    config.rate = rate;
    config.duration = duration;
    config.engines = 2;
    config.kv_blocks = 96;
    config.abort_rate = 0.05;
    let mut records = Vec::new();
    simulate(
        &config,
        &mut |record: &Record| records.push(record.clone()),
        &mut |_| {},
    );
    records
}

/// A number from a request id, the same every run.
fn digest(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The records with each request's class set by `class` from its id.
fn classed(
    records: &[Record],
    class: impl Fn(&str) -> (Option<String>, Option<i64>),
) -> Vec<Record> {
    let mut records = records.to_vec();
    for record in &mut records {
        if let Record::Request(start) = record {
            (start.lora_name, start.priority) = class(&start.request_id);
        }
    }
    records
}

/// Three adapters and the base model, priorities -3 to 12.
fn three_adapters(id: &str) -> (Option<String>, Option<i64>) {
    let d = digest(id);
    let lora = ["sql", "chat", "code"]
        .get((d % 4) as usize)
        .map(|s| (*s).to_owned());
    (lora, Some((d / 4 % 16) as i64 - 3))
}

fn replay(records: &[Record], attribution: Option<Attribution>) -> String {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut builder = Instruments::builder().with_reader(reader);
    if let Some(attribution) = attribution {
        builder = builder.with_attribution(attribution);
    }
    let mut tracker = Tracker::new(builder.build());
    for record in records {
        tracker.apply(record);
    }
    bridge.encode(Format::Text)
}

/// Every label set (the labels but `le`, `finished_reason` and the like)
/// of `family`'s samples.
fn label_values(exposition: &str, family: &str, name: &str) -> BTreeSet<String> {
    samples(exposition)
        .keys()
        .filter(|key| key.split('{').next() == Some(family))
        .filter_map(|key| label(key, name))
        .collect()
}

fn both() -> Attribution {
    Attribution::default()
        .with_lora()
        .with_adapter_min_requests(1)
        .with_priority("0,5,10".parse().unwrap())
}

/// Every key of `got` is in `want` with the same value: counts exactly,
/// latency sums to rounding (summed in another order).
fn assert_close(got: &BTreeMap<String, f64>, want: &BTreeMap<String, f64>, what: &str) {
    for (key, value) in got {
        let Some(wanted) = want.get(key) else {
            panic!("{what}: {key} is not in the run without attribution");
        };
        assert!(
            close(*value, *wanted),
            "{what}: {key}: {value} with attribution, {wanted} without"
        );
    }
}

/// With attribution, vLLM's families are sample for sample what they are
/// without it (the class summed away at scrape time), and their by-class
/// twins (`vllm_class:`), summed over `lora_name` and `priority`, are too.
/// Returns the by-class twins' families.
fn assert_same_totals(on: &str, off: &str) -> BTreeSet<String> {
    // Keys with their labels in one order, the same on both sides.
    let off = summed_away(off, &[]);
    let vllm: BTreeMap<String, f64> = summed_away(on, &[])
        .into_iter()
        .filter(|(key, _)| !key.starts_with("vllm_class:"))
        .collect();
    assert_eq!(
        vllm.keys().collect::<Vec<_>>(),
        off.keys().collect::<Vec<_>>(),
        "vLLM's families have the same series with attribution as without"
    );
    assert_close(&vllm, &off, "vLLM's families");
    let by_class: BTreeMap<String, f64> = summed_away(on, &["lora_name", "priority"])
        .into_iter()
        .filter_map(|(key, value)| {
            Some((format!("vllm:{}", key.strip_prefix("vllm_class:")?), value))
        })
        .collect();
    assert_close(
        &by_class,
        &off,
        "the by-class families summed over the class",
    );
    let families: BTreeSet<String> = by_class
        .keys()
        .map(|key| key.split('{').next().unwrap().to_owned())
        .collect();
    // Every family of the twins' has all of its series there.
    let of_families: BTreeMap<String, f64> = off
        .into_iter()
        .filter(|(key, _)| families.contains(key.split('{').next().unwrap()))
        .collect();
    assert_eq!(
        by_class.keys().collect::<Vec<_>>(),
        of_families.keys().collect::<Vec<_>>(),
        "each by-class family holds all of its vLLM family's series"
    );
    families
}

#[test]
fn summed_over_the_classes_every_family_is_as_without_attribution() {
    let records = classed(&simulated(), three_adapters);
    let off = replay(&records, None);
    let on = replay(&records, Some(both()));
    assert!(
        samples(&off)
            .iter()
            .any(|(k, v)| k.starts_with("vllm:num_preemptions_total") && *v >= 10.0),
        "the run preempts"
    );
    let twins = assert_same_totals(&on, &off);
    assert!(
        twins.contains("vllm:request_num_preemptions_count")
            && twins.contains("vllm:e2e_request_latency_seconds_bucket")
            && twins.contains("vllm:request_success_total"),
        "the per-request families have their series by class: {twins:?}"
    );
    assert!(
        !twins
            .iter()
            .any(|f| f.starts_with("vllm:iteration_tokens_total")),
        "the per-step family is not classed: {twins:?}"
    );
    // No sample of vLLM's families carries a class label.
    assert!(
        samples(&on).keys().all(|key| key.starts_with("vllm_class:")
            || (label(key, "lora_name").is_none() && label(key, "priority").is_none())),
        "class labels only on the by-class families"
    );
    // With attribution off, the class fields change nothing at all.
    assert_eq!(off, replay(&simulated(), None));
}

/// The snapshot a host reads (and the command line's summaries) holds the
/// same families as the exposition, the `vllm_class:` ones included.
#[test]
fn the_snapshot_encodes_to_the_exposition_with_classes() {
    let records = classed(&simulated(), three_adapters);
    let (bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder()
        .with_reader(reader)
        .with_attribution(both())
        .build();
    let mut tracker = Tracker::new(instruments.clone());
    for record in &records {
        tracker.apply(record);
    }
    let snapshot = bridge.snapshot();
    assert!(snapshot
        .iter()
        .any(|f| f.name == "vllm_class:request_num_preemptions" && !f.series.is_empty()));
    for format in [Format::Text, Format::OpenMetrics] {
        assert_eq!(
            vllm_otel_metrics::export::prometheus::encode(&snapshot, format),
            bridge.encode(format)
        );
    }
}

#[test]
fn each_class_counts_its_own_requests() {
    let records = classed(&simulated(), three_adapters);
    let on = replay(&records, Some(both()));
    let classes = PriorityClasses::new(vec![0, 5, 10]).unwrap();
    // What was sent, per (adapter, class) and engine.
    let mut sent: BTreeMap<(String, String, u32), f64> = BTreeMap::new();
    for record in &records {
        if let Record::Request(start) = record {
            let lora = start.lora_name.clone().unwrap_or_else(|| "none".into());
            let class = classes.labels()[classes.class_of(start.priority.unwrap())].to_owned();
            *sent.entry((lora, class, start.engine)).or_default() += 1.0;
        }
    }
    let mut counted: BTreeMap<(String, String, u32), f64> = BTreeMap::new();
    for (key, value) in samples(&on) {
        if !key.starts_with("vllm_class:request_num_preemptions_count{") {
            continue;
        }
        let of = |name: &str| label(&key, name).unwrap_or_else(|| panic!("{key}: no {name}"));
        let engine = of("engine").parse().unwrap();
        counted.insert((of("lora_name"), of("priority"), engine), value);
    }
    assert_eq!(
        counted, sent,
        "one preemption observation per request, in its class"
    );
    assert_eq!(
        sent.len(),
        4 * 4 * 2,
        "every adapter, class and engine has requests"
    );
    // The class labels follow the family's own labels, and the by-class
    // family follows vLLM's.
    let text = on.as_str();
    assert!(text.contains(
        "vllm_class:request_success_total{model_name=\"sim-model-0\",engine=\"0\",finished_reason=\"stop\",lora_name=\"sql\",priority=\"<0\"}"
    ), "{}", text.lines().filter(|l| l.starts_with("vllm_class:request_success_total{")).collect::<Vec<_>>().join("\n"));
    let at = |line: &str| text.find(line).unwrap_or_else(|| panic!("no {line}"));
    assert!(
        at("# TYPE vllm:request_success_total counter\n")
            < at("# TYPE vllm_class:request_success_total counter\n")
    );
    assert!(
        at("# TYPE vllm_class:request_success_total counter\n")
            < at("# TYPE vllm:request_prompt_tokens histogram\n")
            || at("# TYPE vllm:request_prompt_tokens histogram\n")
                < at("# TYPE vllm:request_success_total counter\n")
    );
    assert!(text.contains(
        "# HELP vllm_class:request_success_total Count of successfully processed requests. By request class (--attribute).\n"
    ));
    // The per-step family is not classed.
    assert_eq!(
        label_values(&on, "vllm:iteration_tokens_total_count", "priority"),
        BTreeSet::new()
    );
}

#[test]
fn thousands_of_adapters_and_any_priority_stay_within_the_caps() {
    let churn = |id: &str| {
        let d = digest(id);
        // Two busy adapters; every other request a new one, seen once.
        let lora = match d % 4 {
            0 => "busy-a".to_owned(),
            1 => "busy-b".to_owned(),
            _ => format!("one-off-{id}"),
        };
        (Some(lora), Some((d >> 8) as i64 - (1 << 40)))
    };
    // About 4,000 requests: thousands of adapters.
    let records = classed(&simulated_at(40.0, 100.0), churn);
    let adapters: BTreeSet<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Request(s) => s.lora_name.clone(),
            _ => None,
        })
        .collect();
    assert!(adapters.len() > 1000, "{} adapters", adapters.len());
    let attribution = Attribution::default()
        .with_lora()
        .with_max_adapters(3)
        .with_adapter_min_requests(5)
        .with_priority(PriorityClasses::default());
    let on = replay(&records, Some(attribution));
    let family = "vllm_class:request_num_preemptions_count";
    // The busy adapters have their own label; no one-off took one.
    assert_eq!(
        label_values(&on, family, "lora_name"),
        ["busy-a", "busy-b", "other"].map(String::from).into()
    );
    assert!(label_values(&on, family, "priority").len() <= 5);
    // No request lost: the same totals as without attribution.
    assert_same_totals(&on, &replay(&records, None));
}
