//! The tracker's rules (docs/SEMANTICS.md §3), one test per rule, read back through the
//! Prometheus bridge and checked sample by sample.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
}

use std::collections::BTreeMap;

use vllm_otel_metrics::catalog::{self, RejectReason};
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::{
    Abort, EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, OutputBatch, PrefillStats,
    Record, RequestStart, SchedulerStats,
};
use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams, Tracker};

fn pipeline() -> (PrometheusBridge, Tracker) {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder().with_reader(reader).build();
    (bridge, Tracker::new(instruments))
}

fn exposition(bridge: &PrometheusBridge) -> BTreeMap<String, f64> {
    common::exposition::samples(&bridge.encode(Format::Text))
}

fn start(
    id: &str,
    engine: u32,
    arrival: f64,
    prompt_len: u32,
    max_tokens: Option<u32>,
) -> RequestStart {
    RequestStart {
        request_id: id.into(),
        model_name: "m".into(),
        engine,
        arrival_time: arrival,
        prompt_len,
        max_tokens,
        n: 1,
        traceparent: None,
        operation_name: None,
        stop_strings: false,
        lora_name: None,
        priority: None,
    }
}

fn event(kind: EventType, timestamp: f64) -> EngineCoreEvent {
    EngineCoreEvent {
        kind,
        timestamp,
        reason: None,
    }
}

fn output(id: &str, tokens: usize) -> EngineCoreOutput {
    EngineCoreOutput {
        request_id: id.into(),
        new_token_ids: vec![7; tokens],
        ..Default::default()
    }
}

fn stats(prompt: u32, computed: u32, cached: u32, local: u32, external: u32) -> PrefillStats {
    PrefillStats {
        num_prompt_tokens: prompt,
        num_computed_tokens: computed,
        num_cached_tokens: cached,
        num_local_cached_tokens: local,
        num_external_cached_tokens: external,
    }
}

fn batch(
    engine: u32,
    timestamp: f64,
    received_at: f64,
    outputs: Vec<EngineCoreOutput>,
) -> OutputBatch {
    OutputBatch {
        engine,
        timestamp,
        received_at,
        outputs,
    }
}

fn value(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    *samples.get(key).unwrap_or_else(|| {
        panic!(
            "no sample {key}; have:\n{}",
            samples.keys().cloned().collect::<Vec<_>>().join("\n")
        )
    })
}

const M4: &str = r#"model_name="m",engine="4""#;
const M0: &str = r#"model_name="m",engine="0""#;

fn hist(s: &BTreeMap<String, f64>, family: &str, labels: &str) -> (f64, f64) {
    (
        value(s, &format!("vllm:{family}_sum{{{labels}}}")),
        value(s, &format!("vllm:{family}_count{{{labels}}}")),
    )
}

/// Upstream scenario 1 (vLLM PR 57033's `generate_records_request_metrics_in_prometheus_output`):
/// engine 4, prefill Queued@8 Scheduled@9 and a token at ts 10, then two tokens
/// at 11.5 finishing `length` with Preempted@10.5.
#[test]
fn upstream_preempted_request_on_engine_4() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(
        tracker.start_request(&start("r1", 4, 100.0, 64, Some(128))),
        vec![]
    );
    let mut first = output("r1", 1);
    first.events = vec![
        event(EventType::Queued, 8.0),
        event(EventType::Scheduled, 9.0),
    ];
    first.prefill_stats = Some(stats(64, 60, 4, 4, 0));
    assert!(tracker
        .observe_batch(&batch(4, 10.0, 100.2, vec![first]))
        .is_empty());
    let mut last = output("r1", 2);
    last.events = vec![event(EventType::Preempted, 10.5)];
    last.finish_reason = Some(FinishReason::Length);
    assert!(tracker
        .observe_batch(&batch(4, 11.5, 101.7, vec![last]))
        .is_empty());

    let s = exposition(&bridge);
    assert_eq!(hist(&s, "request_num_preemptions", M4), (1.0, 1.0));
    assert_eq!(
        value(&s, &format!("vllm:num_preemptions_total{{{M4}}}")),
        1.0
    );
    assert_eq!(
        value(&s, &format!("vllm:generation_tokens_total{{{M4}}}")),
        3.0
    );
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_success_total{{{M4},finished_reason="length"}}"#)
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_num_preemptions_bucket{{{M4},le="1.0"}}"#)
        ),
        1.0
    );
    // Timing: TTFT rx-arrival, ITL 11.5-10, queue 9-8, prefill 10-9, decode 11.5-10,
    // inference 11.5-9, per-output-token 1.5/(3-1).
    let ttft = hist(&s, "time_to_first_token_seconds", M4);
    assert!((ttft.0 - 0.2).abs() < 1e-9 && ttft.1 == 1.0, "{ttft:?}");
    assert_eq!(hist(&s, "inter_token_latency_seconds", M4), (1.5, 1.0));
    assert_eq!(hist(&s, "request_queue_time_seconds", M4), (1.0, 1.0));
    assert_eq!(hist(&s, "request_prefill_time_seconds", M4), (1.0, 1.0));
    assert_eq!(hist(&s, "request_decode_time_seconds", M4), (1.5, 1.0));
    assert_eq!(hist(&s, "request_inference_time_seconds", M4), (2.5, 1.0));
    assert_eq!(
        hist(&s, "request_time_per_output_token_seconds", M4),
        (0.75, 1.0)
    );
    assert_eq!(
        hist(&s, "request_prefill_kv_computed_tokens", M4),
        (60.0, 1.0)
    );
    assert_eq!(hist(&s, "request_params_max_tokens", M4), (128.0, 1.0));
    assert_eq!(hist(&s, "request_generation_tokens", M4), (3.0, 1.0));
    assert_eq!(
        hist(&s, "request_max_num_generation_tokens", M4),
        (3.0, 1.0)
    );
    assert_eq!(hist(&s, "request_prompt_tokens", M4), (64.0, 1.0));
    assert_eq!(hist(&s, "request_params_n", M4), (1.0, 1.0));
    let e2e = hist(&s, "e2e_request_latency_seconds", M4);
    assert!((e2e.0 - 1.7).abs() < 1e-9 && e2e.1 == 1.0, "{e2e:?}");
    // Iteration tokens: 1 token + 60 computed, then 2 tokens.
    assert_eq!(hist(&s, "iteration_tokens_total", M4), (63.0, 2.0));
}

/// Upstream scenario 2 (`dropping_stream_records_abort_terminal_request_metrics`):
/// a request on engine 5 dropped after one token records `abort` and a zero
/// preemption count.
#[test]
fn upstream_dropped_request_on_engine_5_records_abort() {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder().with_reader(reader).build();
    let params = RequestParams {
        arrival_time: 100.0,
        prompt_len: 16,
        max_tokens: None,
        n: 1,
    };
    let mut request = RequestMetrics::start(&instruments, "m", 5, params);
    assert!(!request.observe_output(10.0, 100.1, &output("r", 1)));
    drop(request);

    let s = exposition(&bridge);
    let m5 = r#"model_name="m",engine="5""#;
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_success_total{{{m5},finished_reason="abort"}}"#)
        ),
        1.0
    );
    assert_eq!(hist(&s, "request_num_preemptions", m5), (0.0, 1.0));
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_num_preemptions_bucket{{{m5},le="1.0"}}"#)
        ),
        1.0
    );
    // No max_tokens: the series exists with no observation.
    assert_eq!(hist(&s, "request_params_max_tokens", m5), (0.0, 0.0));
}

/// Every series of a label set exists zero-valued from its first request's
/// start, except `request_success`, which vLLM creates per finish reason.
#[test]
fn series_exist_from_request_start() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(
        tracker.start_request(&start("r", 0, 1.0, 8, Some(8))),
        vec![]
    );
    let text = bridge.encode(Format::Text);
    let s = common::exposition::samples(&text);
    for family in [
        "iteration_tokens_total",
        "request_num_preemptions",
        "e2e_request_latency_seconds",
        "request_prompt_tokens",
        "time_to_first_token_seconds",
    ] {
        assert_eq!(hist(&s, family, M0), (0.0, 0.0), "{family}");
    }
    for source in ["local_compute", "local_cache_hit", "external_kv_transfer"] {
        assert_eq!(
            value(
                &s,
                &format!(r#"vllm:prompt_tokens_by_source_total{{{M0},source="{source}"}}"#)
            ),
            0.0
        );
    }
    assert_eq!(
        value(&s, &format!("vllm:num_preemptions_total{{{M0}}}")),
        0.0
    );
    // Every finish reason's `request_success` series, at 0, as vLLM's
    // Python logger creates them; no by-reason preemption series yet.
    for reason in ["stop", "length", "abort", "error", "repetition"] {
        let key = format!(r#"vllm:request_success_total{{{M0},finished_reason="{reason}"}}"#);
        assert_eq!(value(&s, &key), 0.0);
    }
    assert!(
        !text.contains("vllm:num_preemptions_by_reason_total{"),
        "{text}"
    );
    // Each per-request histogram and the iteration-token one: its buckets,
    // +Inf, sum and count; 5 counters with 3 sources = 7; 5 finish
    // reasons; self-telemetry 4 rejection and 2 eviction reasons, and the
    // plugin's dropped records.
    let iteration_tokens = catalog::by_vllm_name("vllm:iteration_tokens_total").unwrap();
    let histogram_lines: usize = catalog::per_request_histograms()
        .chain([iteration_tokens])
        .map(|def| def.buckets.boundaries(catalog::DEFAULT_MAX_MODEL_LEN).len() + 3)
        .sum();
    assert_eq!(s.len(), histogram_lines + 7 + 5 + 4 + 2 + 1);
}

/// `scheduled` sets the scheduled time only the first time; a re-admission
/// after a preemption does not move the queue or prefill times.
#[test]
fn rescheduling_keeps_first_scheduled_time() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(
        tracker.start_request(&start("r", 0, 50.0, 10, None)),
        vec![]
    );
    let mut first = output("r", 0);
    first.events = vec![
        event(EventType::Queued, 1.0),
        event(EventType::Scheduled, 2.0),
        event(EventType::Preempted, 3.0),
        event(EventType::Scheduled, 5.0),
    ];
    tracker.observe_batch(&batch(0, 3.0, 51.0, vec![first]));
    let mut token = output("r", 1);
    token.finish_reason = Some(FinishReason::Stop);
    tracker.observe_batch(&batch(0, 6.0, 52.0, vec![token]));
    let s = exposition(&bridge);
    assert_eq!(hist(&s, "request_queue_time_seconds", M0), (1.0, 1.0));
    assert_eq!(hist(&s, "request_prefill_time_seconds", M0), (4.0, 1.0));
    assert_eq!(hist(&s, "request_num_preemptions", M0), (1.0, 1.0));
    // A single token: decode 0, per-output-token 0, no ITL.
    assert_eq!(hist(&s, "request_decode_time_seconds", M0), (0.0, 1.0));
    assert_eq!(
        hist(&s, "request_time_per_output_token_seconds", M0),
        (0.0, 1.0)
    );
    assert_eq!(hist(&s, "inter_token_latency_seconds", M0), (0.0, 0.0));
}

/// An output without tokens records no TTFT or ITL, and its prefill stats
/// only update the cached-token count used at the end.
#[test]
fn tokenless_outputs_record_no_token_timing() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(
        tracker.start_request(&start("r", 0, 10.0, 100, None)),
        vec![]
    );
    let mut empty = output("r", 0);
    empty.prefill_stats = Some(stats(100, 40, 60, 60, 0));
    tracker.observe_batch(&batch(0, 1.0, 10.5, vec![empty]));
    let s = exposition(&bridge);
    assert_eq!(hist(&s, "time_to_first_token_seconds", M0), (0.0, 0.0));
    assert_eq!(value(&s, &format!("vllm:prompt_tokens_total{{{M0}}}")), 0.0);
    // The prefill computed 40 tokens: iteration tokens count them.
    assert_eq!(hist(&s, "iteration_tokens_total", M0), (40.0, 1.0));

    let mut first = output("r", 1);
    first.prefill_stats = Some(stats(100, 30, 70, 50, 20));
    tracker.observe_batch(&batch(0, 2.0, 11.0, vec![first]));
    let mut finish = output("r", 0);
    finish.finish_reason = Some(FinishReason::Error);
    tracker.observe_batch(&batch(0, 3.0, 12.0, vec![finish]));
    let s = exposition(&bridge);
    assert_eq!(hist(&s, "time_to_first_token_seconds", M0), (1.0, 1.0));
    assert_eq!(hist(&s, "inter_token_latency_seconds", M0), (0.0, 0.0));
    assert_eq!(
        value(&s, &format!("vllm:prompt_tokens_total{{{M0}}}")),
        100.0
    );
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:prompt_tokens_by_source_total{{{M0},source="local_compute"}}"#)
        ),
        30.0
    );
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:prompt_tokens_by_source_total{{{M0},source="local_cache_hit"}}"#)
        ),
        50.0
    );
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:prompt_tokens_by_source_total{{{M0},source="external_kv_transfer"}}"#)
        ),
        20.0
    );
    assert_eq!(
        value(&s, &format!("vllm:prompt_tokens_cached_total{{{M0}}}")),
        70.0
    );
    assert_eq!(
        hist(&s, "request_prefill_kv_computed_tokens", M0),
        (30.0, 1.0)
    );
    // Without queued/scheduled events every phase time is 0 (diff-or-zero).
    assert_eq!(hist(&s, "request_queue_time_seconds", M0), (0.0, 1.0));
    assert_eq!(hist(&s, "request_inference_time_seconds", M0), (0.0, 1.0));
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_success_total{{{M0},finished_reason="error"}}"#)
        ),
        1.0
    );
    // The token-less finishing output adds no tokens, but its batch is not
    // empty: it observes 0, as vLLM's Rust frontend does.
    assert_eq!(hist(&s, "iteration_tokens_total", M0), (71.0, 3.0));
}

/// The outputs that carry only tokens take a shorter path once a request
/// decodes; the rules stay the general ones. A first token stamped 0 gives
/// the next token no inter-token latency (a token time of 0 is no time to
/// measure from), a token-less output none either, and an output after the
/// finish finds the request terminated.
#[test]
fn decoding_steps_follow_the_general_rules() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(tracker.start_request(&start("r", 0, 10.0, 5, None)), vec![]);
    for (timestamp, received_at, tokens) in [
        (0.0, 10.5, 1), // the first token, stamped 0
        (1.0, 11.0, 1), // no latency from a token time of 0
        (1.5, 11.5, 0), // token-less: no latency
        (2.0, 12.0, 2), // 1.0 from the token at 1.0
    ] {
        tracker.observe_batch(&batch(0, timestamp, received_at, vec![output("r", tokens)]));
    }
    let mut last = output("r", 1);
    last.finish_reason = Some(FinishReason::Stop);
    tracker.observe_batch(&batch(0, 3.5, 13.5, vec![last]));
    let s = exposition(&bridge);
    assert_eq!(hist(&s, "time_to_first_token_seconds", M0), (0.5, 1.0));
    assert_eq!(hist(&s, "inter_token_latency_seconds", M0), (2.5, 2.0));
    assert_eq!(
        value(&s, &format!("vllm:generation_tokens_total{{{M0}}}")),
        5.0
    );
    assert_eq!(hist(&s, "request_generation_tokens", M0), (5.0, 1.0));
    assert_eq!(hist(&s, "request_decode_time_seconds", M0), (0.0, 1.0));

    // Directly, without a tracker: an output after the finish finds the
    // request terminated.
    let instruments = Instruments::builder()
        .with_reader(PrometheusBridge::builder().build().1)
        .build();
    let params = RequestParams {
        arrival_time: 10.0,
        prompt_len: 5,
        max_tokens: None,
        n: 1,
    };
    let mut request = RequestMetrics::start(&instruments, "m", 0, params);
    assert!(!request.observe_output(1.0, 11.0, &output("r", 1)));
    assert!(!request.observe_output(2.0, 12.0, &output("r", 1)));
    request.finish(12.5, FinishReason::Stop);
    assert!(request.observe_output(3.0, 13.0, &output("r", 1)));
    assert!(request.is_terminated());
}

/// Prefill stats after a decode-time preemption do not count prompt tokens
/// again, but their cached count is the one used at termination.
#[test]
fn prefill_after_decode_preemption_is_not_recounted() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(tracker.start_request(&start("r", 0, 1.0, 20, None)), vec![]);
    let mut first = output("r", 1);
    first.prefill_stats = Some(stats(20, 20, 0, 0, 0));
    tracker.observe_batch(&batch(0, 1.0, 2.0, vec![first]));
    let mut again = output("r", 1);
    again.events = vec![
        event(EventType::Preempted, 1.5),
        event(EventType::Scheduled, 1.7),
    ];
    again.prefill_stats = Some(stats(21, 5, 16, 16, 0));
    again.finish_reason = Some(FinishReason::Repetition);
    tracker.observe_batch(&batch(0, 2.0, 3.0, vec![again]));
    let s = exposition(&bridge);
    assert_eq!(
        value(&s, &format!("vllm:prompt_tokens_total{{{M0}}}")),
        20.0
    );
    assert_eq!(
        hist(&s, "request_prefill_kv_computed_tokens", M0),
        (4.0, 1.0)
    );
    assert_eq!(hist(&s, "inter_token_latency_seconds", M0), (1.0, 1.0));
    assert_eq!(hist(&s, "request_num_preemptions", M0), (1.0, 1.0));
}

/// Terminal recording happens once; later outputs and aborts of the request
/// are rejected and counted, and a duplicate start changes nothing.
#[test]
fn terminal_recording_happens_once_and_misfits_are_counted() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(
        tracker.start_request(&start("r", 0, 1.0, 5, Some(3))),
        vec![]
    );
    let [dup] = &tracker.start_request(&start("r", 7, 1.0, 5, Some(3)))[..] else {
        panic!("one rejection for a duplicate start");
    };
    assert_eq!(dup.reason, RejectReason::DuplicateRequest);
    let mut finish = output("r", 2);
    finish.finish_reason = Some(FinishReason::Stop);
    tracker.observe_batch(&batch(0, 1.0, 2.0, vec![finish.clone()]));
    let late = tracker.observe_batch(&batch(0, 2.0, 3.0, vec![finish, output("ghost", 1)]));
    assert_eq!(late.len(), 2);
    assert!(late
        .iter()
        .all(|r| r.reason == RejectReason::UnknownRequest));
    let [abort] = &tracker.abort(&Abort {
        request_id: "r".into(),
        received_at: 9.0,
    })[..] else {
        panic!("one rejection for an abort of a finished request");
    };
    assert_eq!(
        abort.to_string(),
        "abort for unknown or already finished request 'r'"
    );

    let text = bridge.encode(Format::Text);
    let s = common::exposition::samples(&text);
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_success_total{{{M0},finished_reason="stop"}}"#)
        ),
        1.0
    );
    assert_eq!(hist(&s, "request_num_preemptions", M0), (0.0, 1.0));
    assert_eq!(
        value(&s, &format!("vllm:generation_tokens_total{{{M0}}}")),
        2.0
    );
    assert!(
        !text.contains(r#"engine="7""#),
        "a duplicate start must not create series"
    );
    assert_eq!(
        value(
            &s,
            r#"vllm_otel_metrics_rejected_inputs_total{reason="unknown_request"}"#
        ),
        3.0
    );
    assert_eq!(
        value(
            &s,
            r#"vllm_otel_metrics_rejected_inputs_total{reason="duplicate_request"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#
        ),
        0.0
    );
}

/// An explicit abort terminates at the abort's receive time.
#[test]
fn abort_record_terminates_at_its_receive_time() {
    let (bridge, mut tracker) = pipeline();
    tracker.apply(&Record::Request(start("r", 0, 100.0, 5, None)));
    assert!(tracker
        .apply(&Record::Abort(Abort {
            request_id: "r".into(),
            received_at: 103.0
        }))
        .is_empty());
    let s = exposition(&bridge);
    assert_eq!(hist(&s, "e2e_request_latency_seconds", M0), (3.0, 1.0));
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_success_total{{{M0},finished_reason="abort"}}"#)
        ),
        1.0
    );
    assert_eq!(tracker.in_flight(), 0);
}

/// An abort of a request with stop strings is the frontend's stop-string
/// match (the engine core cannot tell it from a client's abort): `stop`.
#[test]
fn an_abort_of_a_request_with_stop_strings_counts_as_stop() {
    let (bridge, mut tracker) = pipeline();
    let mut with_stop = start("s", 0, 100.0, 5, None);
    with_stop.stop_strings = true;
    tracker.apply(&Record::Request(with_stop));
    tracker.apply(&Record::Request(start("plain", 0, 100.0, 5, None)));
    for id in ["s", "plain"] {
        let abort = Abort {
            request_id: id.into(),
            received_at: 102.0,
        };
        assert!(tracker.apply(&Record::Abort(abort)).is_empty());
    }
    let s = exposition(&bridge);
    for reason in ["stop", "abort"] {
        assert_eq!(
            value(
                &s,
                &format!(r#"vllm:request_success_total{{{M0},finished_reason="{reason}"}}"#)
            ),
            1.0,
            "{reason}"
        );
    }
    assert_eq!(hist(&s, "e2e_request_latency_seconds", M0), (4.0, 2.0));
}

/// Iteration tokens: one observation per label set present in the batch,
/// a sum of 0 included; a batch of only requests no longer tracked observes
/// 0 under its engine's labels (vLLM's Rust frontend labels by engine).
#[test]
fn iteration_tokens_are_summed_per_label_set() {
    let (bridge, mut tracker) = pipeline();
    assert_eq!(tracker.start_request(&start("a", 0, 1.0, 5, None)), vec![]);
    assert_eq!(tracker.start_request(&start("b", 0, 1.0, 5, None)), vec![]);
    assert_eq!(tracker.start_request(&start("c", 1, 1.0, 5, None)), vec![]);
    let mut a = output("a", 1);
    a.prefill_stats = Some(stats(5, 5, 0, 0, 0));
    tracker.observe_batch(&batch(
        0,
        1.0,
        2.0,
        vec![a, output("b", 3), output("c", 2), output("x", 9)],
    ));
    // A non-empty batch without tokens observes 0.
    tracker.observe_batch(&batch(0, 2.0, 3.0, vec![output("a", 0)]));
    // A batch of unknown requests only observes 0 under engine 0's labels;
    // on an engine that never had a request, nothing.
    tracker.observe_batch(&batch(0, 3.0, 4.0, vec![output("x", 2)]));
    tracker.observe_batch(&batch(7, 3.0, 4.0, vec![output("y", 2)]));
    let s = exposition(&bridge);
    assert_eq!(hist(&s, "iteration_tokens_total", M0), (9.0, 3.0));
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:iteration_tokens_total_bucket{{{M0},le="1.0"}}"#)
        ),
        2.0
    );
    assert!(!s.keys().any(|k| k.contains(r#"engine="7""#)), "{s:?}");
    assert_eq!(
        hist(&s, "iteration_tokens_total", r#"model_name="m",engine="1""#),
        (2.0, 1.0)
    );
}

/// The scheduler tier: gauges keep the latest value, counters add.
#[test]
fn scheduler_stats_set_gauges_and_add_counters() {
    let (bridge, mut tracker) = pipeline();
    for (running, usage, queries) in [(3, 0.5, 100), (2, 0.25, 50)] {
        let rejections = tracker.record_scheduler_stats(&SchedulerStats {
            model_name: "m".into(),
            engine: 0,
            num_running_reqs: running,
            num_waiting_reqs: 7,
            kv_cache_usage: usage,
            prefix_cache_queries: queries,
            prefix_cache_hits: queries / 2,
            ..SchedulerStats::default()
        });
        assert_eq!(rejections, vec![]);
    }
    let text = bridge.encode(Format::Text);
    assert!(
        text.contains(&format!("vllm:num_requests_running{{{M0}}} 2\n")),
        "{text}"
    );
    assert!(text.contains(&format!("vllm:num_requests_waiting{{{M0}}} 7\n")));
    assert!(text.contains(&format!("vllm:kv_cache_usage_perc{{{M0}}} 0.25\n")));
    assert!(text.contains(&format!("vllm:prefix_cache_queries_total{{{M0}}} 150\n")));
    assert!(text.contains(&format!("vllm:prefix_cache_hits_total{{{M0}}} 75\n")));
    // Scheduler stats alone create no per-request series.
    assert!(!text.contains("vllm:request_num_preemptions_count{"));
}

/// Explicit `finish`/`abort` on the library API are idempotent.
#[test]
fn request_metrics_finish_is_idempotent() {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder().with_reader(reader).build();
    let params = RequestParams {
        arrival_time: 1.0,
        prompt_len: 1,
        max_tokens: Some(1),
        n: 3,
    };
    let mut request = RequestMetrics::start(&instruments, "m", 0, params);
    request.finish(2.0, FinishReason::Length);
    request.abort(3.0);
    assert!(request.is_terminated());
    drop(request);
    let s = exposition(&bridge);
    assert_eq!(hist(&s, "request_params_n", M0), (3.0, 1.0));
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_success_total{{{M0},finished_reason="length"}}"#)
        ),
        1.0
    );
    // The abort after the finish changed nothing: its series stays at 0.
    assert_eq!(
        value(
            &s,
            &format!(r#"vllm:request_success_total{{{M0},finished_reason="abort"}}"#)
        ),
        0.0
    );
}

/// Beyond `max_label_sets` label sets, requests of new sets are still
/// counted, in one overflow series per family (`otel_metric_overflow="true"`,
/// plus the family's own extra label), while the first sets keep theirs.
#[test]
fn label_sets_beyond_the_limit_share_the_overflow_series() {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder()
        .with_max_label_sets(2)
        .with_reader(reader)
        .build();
    let params = RequestParams {
        arrival_time: 100.0,
        prompt_len: 16,
        max_tokens: None,
        n: 1,
    };
    for engine in 0..5 {
        let mut request = RequestMetrics::start(&instruments, "m", engine, params);
        let mut last = output("r", 1);
        last.finish_reason = Some(FinishReason::Stop);
        assert!(request.observe_output(10.0, 101.0, &last));
    }
    let s = exposition(&bridge);
    let count = |labels: &str| s[&format!("vllm:request_num_preemptions_count{{{labels}}}")];
    assert_eq!(count("model_name=\"m\",engine=\"0\""), 1.0);
    assert_eq!(count("model_name=\"m\",engine=\"1\""), 1.0);
    assert_eq!(count("otel_metric_overflow=\"true\""), 3.0);
    assert_eq!(
        s["vllm:request_success_total{otel_metric_overflow=\"true\",finished_reason=\"stop\"}"],
        3.0
    );
    let engines: Vec<&String> = s
        .keys()
        .filter(|k| k.starts_with("vllm:e2e_request_latency_seconds_count"))
        .collect();
    assert_eq!(
        engines.len(),
        3,
        "two label sets and the overflow: {engines:?}"
    );
}

/// Each preemption counts under its reason (none named: `kv_full`), a
/// reason's series appears with its first preemption, and the reasons sum
/// to `vllm:num_preemptions`, batched outputs and single requests alike.
#[test]
fn preemptions_count_by_reason_and_sum_to_the_total() {
    use vllm_otel_metrics::protocol::PreemptionReason;
    let (bridge, mut tracker) = pipeline();
    let preempted = |timestamp: f64, reason: Option<PreemptionReason>| EngineCoreEvent {
        reason,
        ..event(EventType::Preempted, timestamp)
    };
    for id in ["a", "b"] {
        assert_eq!(tracker.start_request(&start(id, 0, 100.0, 8, None)), vec![]);
    }
    let mut a = output("a", 1);
    a.events = vec![
        preempted(1.0, None),
        preempted(1.1, Some(PreemptionReason::Priority)),
        preempted(1.2, Some(PreemptionReason::KvFull)),
    ];
    let mut b = output("b", 1);
    b.events = vec![preempted(1.3, Some(PreemptionReason::Priority))];
    assert!(tracker
        .observe_batch(&batch(0, 2.0, 101.0, vec![a, b]))
        .is_empty());
    let s = exposition(&bridge);
    let reason = |r: &str| format!(r#"vllm:num_preemptions_by_reason_total{{{M0},reason="{r}"}}"#);
    assert_eq!(value(&s, &reason("kv_full")), 2.0);
    assert_eq!(value(&s, &reason("priority")), 2.0);
    assert!(
        !s.contains_key(&reason("prefix_cache_reset")),
        "no such preemption yet"
    );
    assert_eq!(
        value(&s, &format!("vllm:num_preemptions_total{{{M0}}}")),
        4.0
    );

    // A single request's output, outside a batch.
    let (bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder().with_reader(reader).build();
    let params = RequestParams {
        arrival_time: 100.0,
        prompt_len: 8,
        max_tokens: None,
        n: 1,
    };
    let mut request = RequestMetrics::start(&instruments, "m", 0, params);
    let mut out = output("c", 1);
    out.events = vec![preempted(1.0, Some(PreemptionReason::PrefixCacheReset))];
    request.observe_output(2.0, 101.0, &out);
    let s = exposition(&bridge);
    assert_eq!(value(&s, &reason("prefix_cache_reset")), 1.0);
    assert!(!s.contains_key(&reason("kv_full")));
    assert_eq!(
        value(&s, &format!("vllm:num_preemptions_total{{{M0}}}")),
        1.0
    );
}

/// JSONL names the reasons as vLLM PR #58037 does; an unknown one makes the
/// line invalid, naming the accepted values.
#[test]
fn preemption_reasons_in_jsonl() {
    let line = |reason: &str| {
        format!(
            r#"{{"type":"outputs","engine":0,"timestamp":2.0,"received_at":101.0,"outputs":[{{"request_id":"a","new_token_ids":[1],"events":[{{"type":"preempted","timestamp":1.0,"reason":{reason}}}]}}]}}"#
        )
    };
    for (reason, expected) in [
        ("null", None),
        (r#""kv_full""#, Some("kv_full")),
        (r#""priority""#, Some("priority")),
        (r#""prefix_cache_reset""#, Some("prefix_cache_reset")),
    ] {
        let Record::Outputs(batch) = serde_json::from_str(&line(reason)).unwrap() else {
            panic!()
        };
        let parsed = batch.outputs[0].events[0].reason;
        assert_eq!(parsed.map(|r| r.as_str()), expected);
    }
    let error = serde_json::from_str::<Record>(&line(r#""kv_cache_full""#)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown variant `kv_cache_full`, expected one of `kv_full`, `priority`, `prefix_cache_reset` at line 1 column 184"
    );
}

/// The tracker's public methods check their input as `apply` does: an
/// invalid start, batch, abort or scheduler record changes nothing and comes
/// back as one `invalid_record` rejection naming its record kind.
#[test]
fn public_methods_validate_like_apply() {
    use vllm_otel_metrics::protocol::RecordKind;
    let (bridge, mut tracker) = pipeline();
    let before = bridge.encode(Format::Text);
    let invalid = |rejections: Vec<vllm_otel_metrics::tracker::Rejection>, kind: RecordKind| {
        let [only] = &rejections[..] else {
            panic!("one rejection, not {rejections:?}");
        };
        assert_eq!(
            (only.reason, only.record),
            (RejectReason::InvalidRecord, kind)
        );
        only.detail.clone()
    };
    let detail = invalid(
        tracker.start_request(&start("r", 0, f64::NAN, 5, None)),
        RecordKind::Request,
    );
    assert!(detail.starts_with("arrival_time "), "{detail}");
    let long_id = "x".repeat(600);
    let detail = invalid(
        tracker.start_request(&start(&long_id, 0, 1.0, 5, None)),
        RecordKind::Request,
    );
    assert!(detail.starts_with("request_id is 600 bytes"), "{detail}");
    assert_eq!(tracker.in_flight(), 0, "nothing started");
    invalid(
        tracker.observe_batch(&batch(0, f64::INFINITY, 2.0, vec![output("r", 1)])),
        RecordKind::Outputs,
    );
    invalid(
        tracker.abort(&Abort {
            request_id: "r".into(),
            received_at: -1.0,
        }),
        RecordKind::Abort,
    );
    invalid(
        tracker.record_scheduler_stats(&SchedulerStats {
            model_name: "m".into(),
            kv_cache_usage: 1.5,
            ..SchedulerStats::default()
        }),
        RecordKind::SchedulerStats,
    );
    // Only the rejections were counted.
    let counted = |text: &str| {
        common::exposition::samples(text)
            .get(r#"vllm_otel_metrics_rejected_inputs_total{reason="invalid_record"}"#)
            .copied()
    };
    assert_eq!(counted(&before), Some(0.0));
    assert_eq!(counted(&bridge.encode(Format::Text)), Some(5.0));
}

/// The in-flight limit evicts the oldest request even when its start pruned
/// the queue of ended requests (the queue is pruned every ~1,024 starts; the
/// request that triggered it used to be pruned with them, never evictable).
#[test]
fn the_in_flight_limit_evicts_a_request_whose_start_pruned_the_queue() {
    let (bridge, tracker) = pipeline();
    let mut tracker = tracker.with_start_order();
    for n in 0..1_024 {
        let id = format!("ended-{n}");
        tracker.apply(&Record::Request(start(&id, 0, 1.0, 4, None)));
        tracker.apply(&Record::Abort(Abort {
            request_id: id,
            received_at: 2.0,
        }));
    }
    tracker.apply(&Record::Request(start("live", 0, 3.0, 4, None)));
    assert_eq!(tracker.in_flight(), 1);
    assert_eq!(tracker.evict_oldest(0, 4.0), 1);
    assert_eq!(tracker.in_flight(), 0);
    let samples = exposition(&bridge);
    assert_eq!(
        value(
            &samples,
            "vllm_otel_metrics_evicted_requests_total{reason=\"inflight_limit\"}"
        ),
        1.0
    );
}
