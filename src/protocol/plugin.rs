//! The vLLM stat-logger plugin's records: one engine step's Python
//! `IterationStats` with its finished requests, and the plugin's count of
//! records it dropped.
//!
//! They mirror what vLLM's Python `PrometheusStatLogger.record()` reads
//! (`vllm/v1/metrics/stats.py`: `IterationStats`, `PromptTokenStats`,
//! `FinishedRequestStats`). Every field but `model_name`, `engine` and a
//! finished request's `finish_reason` is optional: absent or null, it is 0,
//! empty or none.
//!
//! ```
//! use vllm_otel_metrics::protocol::{FinishReason, InputLimits, Record};
//!
//! let line = r#"{"type":"iteration_stats","model_name":"m","engine":0,
//!   "num_generation_tokens":12,"time_to_first_tokens_iter":[0.25],
//!   "finished_requests":[{"request_id":"r1","finish_reason":"stop","e2e_latency":1.5}]}"#;
//! let record: Record = serde_json::from_str(line).unwrap();
//! let Record::IterationStats(stats) = &record else { unreachable!() };
//! assert_eq!(stats.finished_requests[0].finish_reason, FinishReason::Stop);
//! assert_eq!(stats.finished_requests[0].max_tokens_param, None);
//! assert!(record.validate(&InputLimits::default()).is_ok());
//! ```

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use super::defaults::null_as_default;
use super::request::FinishReason;
use super::validate::{bounded, finite, time, InputLimits, InvalidRecord};

/// Most entries of each list of one `iteration_stats` record (its
/// per-request lists and its finished requests): far more than the
/// requests of one engine step, so a real step always fits, while one
/// record cannot grow the process without bound.
pub const MAX_ITERATION_ENTRIES: usize = 65_536;

/// One engine step as vLLM's Python frontend saw it (vLLM's
/// `IterationStats`), for the label set `(model_name, engine)`.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct IterationStats {
    /// The served model name (label `model_name`).
    pub model_name: String,
    /// Engine index (label `engine`).
    pub engine: u32,
    /// Frontend wall clock when the stats were made, seconds: the end of the
    /// finished requests' spans (absent: the time the record is applied).
    #[serde(default)]
    pub received_at: Option<f64>,
    /// Tokens generated in the step.
    #[serde(default, deserialize_with = "null_as_default")]
    pub num_generation_tokens: u64,
    /// The step's prompt tokens by source.
    #[serde(default, deserialize_with = "null_as_default")]
    pub prompt_token_stats: PromptTokenStats,
    /// Requests preempted in the step.
    #[serde(default, deserialize_with = "null_as_default")]
    pub num_preempted_reqs: u64,
    /// The `max_tokens` (or generated-token bound) of each request that
    /// finished its prefill in the step.
    #[serde(default, deserialize_with = "null_as_default")]
    pub max_num_generation_tokens_iter: Vec<u64>,
    /// The `n` parameter of each request that finished its prefill in the step.
    #[serde(default, deserialize_with = "null_as_default")]
    pub n_params_iter: Vec<u64>,
    /// Times to first token of the step, seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub time_to_first_tokens_iter: Vec<f64>,
    /// Inter-token latencies of the step, seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub inter_token_latencies_iter: Vec<f64>,
    /// Requests that finished in the step.
    #[serde(default, deserialize_with = "null_as_default")]
    pub finished_requests: Vec<FinishedRequest>,
}

/// The prompt tokens of one step by where their KV came from (vLLM's
/// `PromptTokenStats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptTokenStats {
    /// Computed in the step (`source="local_compute"`).
    #[serde(deserialize_with = "null_as_default")]
    pub computed: u64,
    /// Found in the local prefix cache (`source="local_cache_hit"`).
    #[serde(deserialize_with = "null_as_default")]
    pub local_cache_hit: u64,
    /// Transferred from an external KV store (`source="external_kv_transfer"`).
    #[serde(deserialize_with = "null_as_default")]
    pub external_kv_transfer: u64,
    /// Found cached (`vllm:prompt_tokens_cached`); at most `total`.
    #[serde(deserialize_with = "null_as_default")]
    pub cached_tokens: u64,
    /// All of them: `computed + local_cache_hit + external_kv_transfer`.
    #[serde(deserialize_with = "null_as_default")]
    pub total: u64,
}

/// One request that finished in the step (vLLM's `FinishedRequestStats`).
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishedRequest {
    /// The request's id, for its span (empty: the span has none).
    #[serde(default, deserialize_with = "null_as_default")]
    pub request_id: String,
    /// Why it finished. Required.
    pub finish_reason: FinishReason,
    /// From arrival to finish, seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub e2e_latency: f64,
    /// In the waiting queue, seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub queued_time: f64,
    /// In prefill, seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub prefill_time: f64,
    /// Running (prefill and decode), seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub inference_time: f64,
    /// In decode, seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub decode_time: f64,
    /// Mean time per output token after the first, seconds.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mean_time_per_output_token: f64,
    /// Prompt tokens.
    #[serde(default, deserialize_with = "null_as_default")]
    pub num_prompt_tokens: u32,
    /// Generated tokens.
    #[serde(default, deserialize_with = "null_as_default")]
    pub num_generation_tokens: u32,
    /// Times the request was preempted.
    #[serde(default, deserialize_with = "null_as_default")]
    pub num_preemptions: u32,
    /// Prompt tokens found cached (may exceed the prompt: vLLM saturates).
    #[serde(default, deserialize_with = "null_as_default")]
    pub num_cached_tokens: u32,
    /// The `max_tokens` sampling parameter, if the request set one.
    #[serde(default)]
    pub max_tokens_param: Option<u32>,
}

/// The plugin dropped records (its queue was full or the sidecar
/// unreachable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PluginDrops {
    /// How many, since its previous `plugin_drops` record.
    #[serde(default, deserialize_with = "null_as_default")]
    pub dropped: u64,
}

impl PluginDrops {
    /// Nothing to check: a count of any size is one the plugin can have dropped.
    pub(super) fn validate(&self, _limits: &InputLimits) -> Result<(), InvalidRecord> {
        Ok(())
    }
}

/// At most [`MAX_ITERATION_ENTRIES`] entries in the list `what`.
fn entries(what: &str, len: usize) -> Result<(), InvalidRecord> {
    if len <= MAX_ITERATION_ENTRIES {
        Ok(())
    } else {
        Err(InvalidRecord(format!(
            "{what} has {len} entries, more than {MAX_ITERATION_ENTRIES} (MAX_ITERATION_ENTRIES)"
        )))
    }
}

impl IterationStats {
    /// [`Record::validate`](super::Record::validate) of an `iteration_stats`
    /// record: its label and time, and its lists within their bounds. Each
    /// finished request ([`FinishedRequest::validate`]) and each value of a
    /// per-request list is checked on its own when the record is applied:
    /// a bad one is rejected alone and the rest of the step is recorded.
    pub(super) fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("model_name", &self.model_name, limits.max_label_bytes)?;
        if let Some(at) = self.received_at {
            time("received_at", at)?;
        }
        entries(
            "max_num_generation_tokens_iter",
            self.max_num_generation_tokens_iter.len(),
        )?;
        entries("n_params_iter", self.n_params_iter.len())?;
        entries(
            "time_to_first_tokens_iter",
            self.time_to_first_tokens_iter.len(),
        )?;
        entries(
            "inter_token_latencies_iter",
            self.inter_token_latencies_iter.len(),
        )?;
        entries("finished_requests", self.finished_requests.len())
    }
}

impl FinishedRequest {
    /// Checks one finished request of an `iteration_stats` record: its id
    /// within `limits`, its durations finite. A negative duration is kept:
    /// vLLM's Python logger observes the durations it computed as they are,
    /// and the plugin path records what it would.
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("request_id", &self.request_id, limits.max_request_id_bytes)?;
        for (what, value) in [
            ("e2e_latency", self.e2e_latency),
            ("queued_time", self.queued_time),
            ("prefill_time", self.prefill_time),
            ("inference_time", self.inference_time),
            ("decode_time", self.decode_time),
            (
                "mean_time_per_output_token",
                self.mean_time_per_output_token,
            ),
        ] {
            finite(what, value)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> IterationStats {
        IterationStats {
            model_name: "m".into(),
            prompt_token_stats: PromptTokenStats {
                computed: 100,
                local_cache_hit: 16,
                external_kv_transfer: 0,
                cached_tokens: 16,
                total: 116,
            },
            finished_requests: vec![FinishedRequest {
                request_id: "r1".into(),
                finish_reason: FinishReason::Stop,
                e2e_latency: 1.5,
                queued_time: 0.1,
                prefill_time: 0.2,
                inference_time: 1.3,
                decode_time: 1.1,
                mean_time_per_output_token: 0.04,
                num_prompt_tokens: 116,
                num_generation_tokens: 30,
                num_preemptions: 1,
                num_cached_tokens: 200,
                max_tokens_param: None,
            }],
            ..Default::default()
        }
    }

    fn invalid(stats: IterationStats) -> String {
        stats.validate(&InputLimits::default()).unwrap_err().0
    }

    #[test]
    fn what_vllms_logger_would_observe_is_valid() {
        // More cached than prompt tokens, prompt counts that do not add up,
        // negative durations: vLLM's Python logger observes them as they are.
        let mut s = stats();
        s.prompt_token_stats.cached_tokens = 117;
        s.prompt_token_stats.total = 1;
        s.inter_token_latencies_iter = vec![0.1, -0.5];
        s.finished_requests[0].queued_time = -0.25;
        assert!(s.validate(&InputLimits::default()).is_ok());
    }

    #[test]
    fn invalid_values_are_named() {
        let mut s = stats();
        s.received_at = Some(-1.0);
        assert_eq!(invalid(s), "received_at is negative (-1)");
        let mut s = stats();
        s.n_params_iter = vec![1; MAX_ITERATION_ENTRIES + 1];
        assert_eq!(
            invalid(s),
            "n_params_iter has 65537 entries, more than 65536 (MAX_ITERATION_ENTRIES)"
        );
        let mut s = stats();
        s.n_params_iter = vec![1; MAX_ITERATION_ENTRIES];
        assert!(s.validate(&InputLimits::default()).is_ok());
        // A part is checked on its own, as the tracker applies the record:
        // the record itself stays valid.
        let mut s = stats();
        s.time_to_first_tokens_iter = vec![f64::INFINITY];
        s.finished_requests[0].decode_time = f64::NAN;
        let part = s.finished_requests[0].validate(&InputLimits::default());
        assert!(s.validate(&InputLimits::default()).is_ok());
        assert_eq!(
            part.unwrap_err().0,
            "decode_time is not a finite number (NaN)"
        );
        let mut s = stats();
        s.finished_requests[0].request_id = "x".repeat(513);
        let long = format!("{}… (513 bytes)", "x".repeat(64));
        assert_eq!(
            s.finished_requests[0]
                .validate(&InputLimits::default())
                .unwrap_err()
                .0,
            format!("request_id is 513 bytes, more than the limit of 512 ('{long}')")
        );
        let mut s = stats();
        s.model_name = "m".repeat(257);
        assert_eq!(
            invalid(s),
            format!(
                "model_name is 257 bytes, more than the limit of 256 ('{}… (257 bytes)')",
                "m".repeat(64)
            )
        );
    }
}
