//! SLO attainment and goodput (`--slo`) against outcomes computed apart.
//!
//! A simulator run is applied twice through the tracker. Beside the
//! tracker, this file computes each request's values from the records
//! alone (time to first token, time per output token, e2e, by the rules of
//! docs/SEMANTICS.md §3) and judges them with its own reading of §3e. The
//! first pass, without an SLO, gives the bounds: the medians of TTFT and
//! TPOT and the 40th percentile of e2e, so that requests fall on both sides
//! of each. The second pass judges the run against those bounds: the
//! counts by outcome, the goodput tokens and each request's span outcome
//! must be the ones computed here, exactly. The plugin path (vLLM's finished-request stats) is checked on
//! records written to straddle each bound.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
    pub mod spans;
}

use std::collections::BTreeMap;

use common::spans::{number, KeptSpans};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};
use vllm_otel_metrics::catalog::slo::SLO_OUTCOMES;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::spans::{keys, RequestSpans, SPAN_NAME};
use vllm_otel_metrics::instruments::{Instruments, Slo};
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::sources::sim::{simulate, SimConfig};
use vllm_otel_metrics::tracker::Tracker;

fn text(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// One request's values, from its span.
#[derive(Debug)]
struct Request {
    reason: String,
    tokens: f64,
    ttft: Option<f64>,
    tpot: Option<f64>,
    e2e: f64,
    outcome: Option<String>,
}

impl Request {
    fn of(span: &SpanData) -> Request {
        let tokens = number(span, keys::USAGE_COMPLETION_TOKENS).unwrap();
        let decode = number(span, keys::LATENCY_TIME_IN_MODEL_DECODE).unwrap();
        Request {
            reason: text(span, keys::FINISHED_REASON).unwrap(),
            tokens,
            ttft: (tokens > 0.0).then(|| number(span, keys::LATENCY_TIME_TO_FIRST_TOKEN).unwrap()),
            tpot: (tokens > 1.0).then(|| decode / (tokens - 1.0)),
            e2e: number(span, keys::LATENCY_E2E).unwrap(),
            outcome: text(span, keys::SLO_OUTCOME),
        }
    }

    /// The outcome, judged here: an abort is `aborted`; no first token
    /// misses TTFT; one token or none meets TPOT; e2e decides only when
    /// TTFT and TPOT were met; a value at its bound meets it.
    fn judged(&self, ttft: f64, tpot: f64, e2e: f64) -> &'static str {
        if self.reason == "abort" {
            return "aborted";
        }
        let slow_first = match self.ttft {
            None => true,
            Some(t) => t > ttft,
        };
        let slow_rest = matches!(self.tpot, Some(t) if t > tpot);
        if slow_first && slow_rest {
            "missed_both"
        } else if slow_first {
            "missed_ttft"
        } else if slow_rest {
            "missed_tpot"
        } else if self.e2e > e2e {
            "missed_e2e"
        } else {
            "met"
        }
    }
}

/// A request in flight, as the records tell it.
#[derive(Debug, Clone, Copy)]
struct Live {
    arrival: f64,
    tokens: f64,
    ttft: Option<f64>,
    first_ts: f64,
    last_ts: f64,
}

/// Follows the records: each terminated request's values, by request id.
#[derive(Default)]
struct FromRecords {
    live: BTreeMap<String, Live>,
    ended: BTreeMap<String, Request>,
}

impl FromRecords {
    fn apply(&mut self, record: &Record) {
        match record {
            Record::Request(r) => {
                let live = Live {
                    arrival: r.arrival_time,
                    tokens: 0.0,
                    ttft: None,
                    first_ts: 0.0,
                    last_ts: 0.0,
                };
                self.live.insert(r.request_id.clone(), live);
            }
            Record::Outputs(batch) => {
                for output in &batch.outputs {
                    let Some(live) = self.live.get_mut(&output.request_id) else {
                        continue;
                    };
                    let tokens = output.new_token_ids.len() as f64;
                    if tokens > 0.0 {
                        // The first token's output, on the frontend's clock;
                        // the decode time on the engine's.
                        if live.ttft.is_none() {
                            live.ttft = Some(batch.received_at - live.arrival);
                            live.first_ts = batch.timestamp;
                        }
                        live.last_ts = batch.timestamp;
                        live.tokens += tokens;
                    }
                    if let Some(reason) = output.finish_reason {
                        self.end(&output.request_id, reason.as_str(), batch.received_at);
                    }
                }
            }
            Record::Abort(abort) => self.end(&abort.request_id, "abort", abort.received_at),
            _ => {}
        }
    }

    fn end(&mut self, id: &str, reason: &str, at: f64) {
        let Some(live) = self.live.remove(id) else {
            return;
        };
        let tokens = live.tokens;
        let request = Request {
            reason: reason.to_owned(),
            tokens,
            ttft: (tokens > 0.0).then_some(live.ttft.unwrap_or(0.0)),
            tpot: (tokens > 1.0).then(|| (live.last_ts - live.first_ts) / (tokens - 1.0)),
            e2e: (at - live.arrival).max(0.0),
            outcome: None,
        };
        self.ended.insert(id.to_owned(), request);
    }
}

/// A simulator run applied through a tracker with `slo`: each request's
/// span (by request id), the same requests as the records alone tell them,
/// and the exposition.
fn run(slo: Option<&str>) -> (BTreeMap<String, Request>, BTreeMap<String, Request>, String) {
    let kept = KeptSpans::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(kept.clone())
        .build();
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut builder = Instruments::builder().with_reader(reader);
    if let Some(slo) = slo {
        builder = builder.with_slo(Slo::from_json(slo).unwrap());
    }
    let mut tracker = Tracker::new(builder.build()).with_spans(RequestSpans::new(&provider));
    let mut config = SimConfig::default();
    config.duration = 80.0;
    config.rate = 8.0;
    config.abort_rate = 0.05;
    let mut from_records = FromRecords::default();
    simulate(
        &config,
        &mut |record: &Record| {
            tracker.apply(record);
            from_records.apply(record);
        },
        &mut |_| {},
    );
    let exposition = bridge.encode(Format::Text);
    let spans = kept.0.lock().unwrap();
    let requests = spans
        .iter()
        .filter(|s| s.name == SPAN_NAME)
        .map(|span| (text(span, keys::REQUEST_ID).unwrap(), Request::of(span)))
        .collect();
    (requests, from_records.ended, exposition)
}

fn median(mut values: Vec<f64>, q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q) as usize]
}

#[test]
fn outcomes_agree_with_the_requests_judged_apart() {
    let (_, first, exposition) = run(None);
    assert!(
        !exposition.contains("slo"),
        "no SLO, no SLO family:\n{exposition}"
    );
    assert!(first.len() >= 500, "{} requests", first.len());
    let ttft = median(first.values().filter_map(|r| r.ttft).collect(), 0.5);
    let tpot = median(first.values().filter_map(|r| r.tpot).collect(), 0.5);
    let e2e = median(first.values().map(|r| r.e2e).collect(), 0.4);
    let slo = format!(r#"{{"ttft": {ttft}, "tpot": {tpot}, "e2e": {e2e}}}"#);
    let (spans, from_records, exposition) = run(Some(&slo));
    assert_eq!(
        spans.keys().collect::<Vec<_>>(),
        from_records.keys().collect::<Vec<_>>(),
        "one span per request the records terminate"
    );

    let mut expected: BTreeMap<&str, f64> = BTreeMap::new();
    let mut goodput = 0.0;
    for (id, request) in &from_records {
        let outcome = request.judged(ttft, tpot, e2e);
        assert_eq!(
            spans[id].outcome.as_deref(),
            Some(outcome),
            "{id}: the span {:?}, the records {request:?}",
            spans[id]
        );
        *expected.entry(outcome).or_default() += 1.0;
        if outcome == "met" {
            goodput += request.tokens;
        }
    }
    let mut counted: BTreeMap<&str, f64> = BTreeMap::new();
    for outcome in SLO_OUTCOMES {
        let total = common::exposition::sum_where(
            &exposition,
            "vllm_otel_metrics_slo_requests_total",
            "outcome",
            outcome,
        );
        counted.insert(outcome, total);
        assert!(
            total > 0.0,
            "no request {outcome}: the bounds straddle nothing"
        );
    }
    eprintln!("bounds ttft {ttft:.4} s, tpot {tpot:.4} s, e2e {e2e:.3} s; outcomes {counted:?}; goodput {goodput} tokens");
    assert_eq!(counted, expected);
    let goodput_counted =
        common::exposition::sum_of(&exposition, "vllm_otel_metrics_slo_goodput_tokens_total");
    assert_eq!(goodput_counted, goodput);
}

/// The plugin path: vLLM's finished-request stats carry no time to first
/// token; queued plus prefill time stands in for it.
#[test]
fn the_plugin_paths_finished_requests_are_judged_alike() {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let slo =
        Slo::from_json(r#"{"ttft": 1, "tpot": 0.1, "models": {"big": {"ttft": 3}}}"#).unwrap();
    let mut tracker = Tracker::new(
        Instruments::builder()
            .with_slo(slo)
            .with_reader(reader)
            .build(),
    );
    let finished = |id: &str, reason: &str, queued: f64, prefill: f64, tpot: f64, tokens: u32| {
        format!(
            r#"{{"request_id":"{id}","finish_reason":"{reason}","e2e_latency":5.0,"queued_time":{queued},"prefill_time":{prefill},"inference_time":1.0,"decode_time":1.0,"mean_time_per_output_token":{tpot},"num_prompt_tokens":10,"num_generation_tokens":{tokens},"num_preemptions":0,"num_cached_tokens":0}}"#
        )
    };
    let record = |model: &str, requests: Vec<String>| -> Record {
        serde_json::from_str(&format!(
            r#"{{"type":"iteration_stats","model_name":"{model}","engine":0,"received_at":1700000000.0,"num_generation_tokens":0,"finished_requests":[{}]}}"#,
            requests.join(",")
        ))
        .unwrap()
    };
    for r in [
        record(
            "small",
            vec![
                finished("a", "stop", 0.5, 0.5, 0.1, 20), // at both bounds: met
                finished("b", "stop", 0.5, 0.6, 0.05, 20), // TTFT 1.1
                finished("c", "length", 0.1, 0.1, 0.2, 20), // TPOT 0.2
                finished("d", "stop", 1.0, 1.0, 0.2, 20), // both
                finished("e", "abort", 0.0, 0.1, 0.01, 20), // aborted
                finished("f", "stop", 0.1, 0.1, 9.0, 1),  // one token: no TPOT
                finished("g", "error", 0.1, 0.1, 0.0, 0), // no token: no TTFT
            ],
        ),
        record("big", vec![finished("h", "stop", 1.0, 1.5, 0.05, 7)]),
    ] {
        assert_eq!(tracker.apply(&r), vec![]);
    }
    let samples = common::exposition::samples(&bridge.encode(Format::Text));
    let outcomes: BTreeMap<String, f64> = samples
        .into_iter()
        .filter(|(k, v)| k.starts_with("vllm_otel_metrics_slo") && *v != 0.0)
        .collect();
    let expected: BTreeMap<String, f64> = [
        (r#"vllm_otel_metrics_slo_goodput_tokens_total{model_name="big",engine="0"}"#, 7.0),
        (r#"vllm_otel_metrics_slo_goodput_tokens_total{model_name="small",engine="0"}"#, 21.0),
        (r#"vllm_otel_metrics_slo_requests_total{model_name="big",engine="0",outcome="met"}"#, 1.0),
        (r#"vllm_otel_metrics_slo_requests_total{model_name="small",engine="0",outcome="aborted"}"#, 1.0),
        (r#"vllm_otel_metrics_slo_requests_total{model_name="small",engine="0",outcome="met"}"#, 2.0),
        (r#"vllm_otel_metrics_slo_requests_total{model_name="small",engine="0",outcome="missed_both"}"#, 1.0),
        (r#"vllm_otel_metrics_slo_requests_total{model_name="small",engine="0",outcome="missed_tpot"}"#, 1.0),
        (r#"vllm_otel_metrics_slo_requests_total{model_name="small",engine="0",outcome="missed_ttft"}"#, 2.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(outcomes, expected);
}
