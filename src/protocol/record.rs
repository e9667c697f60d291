//! [`Record`] and [`RecordKind`]: the record kinds.
//!
//! Each kind is a variant of both enums, and each concern is one `match`
//! over them: the `type` name ([`RecordKind::as_str`], which serde's
//! `snake_case` renaming of [`Record`]'s variants agrees with, as a test
//! holds), the kind of a record and the request id it names
//! ([`Record::kind`]), its checks ([`Record::validate`]) and the
//! deserializer's per-kind step (`Record::read_body`, used by `tag.rs`). A
//! new kind is a variant here, an arm of each of those matches (the
//! compiler lists the ones missing), an entry of
//! [`RecordKind::RECORD_TYPES`] and its body type.

use serde::{Deserialize, Deserializer, Serialize};

use super::engine::{EngineConfig, Operation, SchedulerStats, SleepState};
use super::plugin::{IterationStats, PluginDrops};
use super::request::{Abort, OutputBatch, RequestStart};
use super::validate::{InputLimits, InvalidRecord};

/// One input record: a line of a JSONL trace, or one message of the ingest stream.
///
/// Serialized as an object tagged by `"type"` ([`RecordKind::as_str`]) with
/// the body's fields. Deserializing reads the record in one pass when
/// `"type"` is its first key (as every writer of this format puts it, and
/// as serializing does); an object with the tag elsewhere is buffered first,
/// as serde's internally tagged enums always do.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// A request arrived at the frontend.
    Request(RequestStart),
    /// One engine step's outputs.
    Outputs(OutputBatch),
    /// The frontend aborted a request (client went away, cancel).
    Abort(Abort),
    /// Scheduler state after one engine step.
    SchedulerStats(Box<SchedulerStats>),
    /// An engine started, with this configuration.
    EngineConfig(EngineConfig),
    /// An engine went to sleep or woke up.
    SleepState(SleepState),
    /// The API server completed a sleep-mode or weight-update operation.
    Operation(Operation),
    /// One engine step as vLLM's Python frontend saw it, from the vLLM
    /// stat-logger plugin (applied with the Python logger's rules).
    IterationStats(Box<IterationStats>),
    /// The vLLM stat-logger plugin dropped records.
    PluginDrops(PluginDrops),
}

/// What kind of record (or part of one) an input was: a record's `type`,
/// or one engine-core output inside an `outputs` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordKind {
    /// A `request` record.
    Request,
    /// An `outputs` record.
    Outputs,
    /// An `abort` record.
    Abort,
    /// A `scheduler_stats` record.
    SchedulerStats,
    /// An `engine_config` record.
    EngineConfig,
    /// A `sleep_state` record.
    SleepState,
    /// An `operation` record.
    Operation,
    /// An `iteration_stats` record.
    IterationStats,
    /// A `plugin_drops` record.
    PluginDrops,
    /// One engine-core output of an `outputs` record.
    Output,
    /// One finished request of an `iteration_stats` record.
    FinishedRequest,
    /// One value of a per-request list of an `iteration_stats`
    /// record (`time_to_first_tokens_iter`, ...).
    IterationValue,
}

impl RecordKind {
    /// The kinds a record's `type` names, in the wire format's order (every
    /// kind but the parts of a record: [`RecordKind::is_part`]).
    pub const RECORD_TYPES: [RecordKind; 9] = [
        RecordKind::Request,
        RecordKind::Outputs,
        RecordKind::Abort,
        RecordKind::SchedulerStats,
        RecordKind::EngineConfig,
        RecordKind::SleepState,
        RecordKind::Operation,
        RecordKind::IterationStats,
        RecordKind::PluginDrops,
    ];

    /// The `type` names, in the order of [`RecordKind::RECORD_TYPES`].
    pub(super) const TYPE_NAMES: [&'static str; RecordKind::RECORD_TYPES.len()] = {
        let mut names = [""; RecordKind::RECORD_TYPES.len()];
        let mut i = 0;
        while i < names.len() {
            names[i] = RecordKind::RECORD_TYPES[i].as_str();
            i += 1;
        }
        names
    };

    /// The record's `type` (`output` for one output of a batch).
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordKind::Request => "request",
            RecordKind::Outputs => "outputs",
            RecordKind::Abort => "abort",
            RecordKind::SchedulerStats => "scheduler_stats",
            RecordKind::EngineConfig => "engine_config",
            RecordKind::SleepState => "sleep_state",
            RecordKind::Operation => "operation",
            RecordKind::IterationStats => "iteration_stats",
            RecordKind::PluginDrops => "plugin_drops",
            RecordKind::Output => "output",
            RecordKind::FinishedRequest => "finished_request",
            RecordKind::IterationValue => "iteration_value",
        }
    }

    /// Whether this is a part of a record (an output, a finished
    /// request, one value of a list) rather than a record: a part
    /// is rejected alone, and the rest of its record is applied.
    pub const fn is_part(self) -> bool {
        matches!(
            self,
            RecordKind::Output | RecordKind::FinishedRequest | RecordKind::IterationValue
        )
    }

    /// The kind whose `type` is `name`, if a record can have it.
    pub fn from_type(name: &str) -> Option<RecordKind> {
        RecordKind::RECORD_TYPES
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for RecordKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Record {
    /// The record's kind, and the request id it names (empty for the kinds
    /// that name none).
    pub fn kind(&self) -> (RecordKind, &str) {
        match self {
            Record::Request(request) => (RecordKind::Request, &request.request_id),
            Record::Outputs(_) => (RecordKind::Outputs, ""),
            Record::Abort(abort) => (RecordKind::Abort, &abort.request_id),
            Record::SchedulerStats(_) => (RecordKind::SchedulerStats, ""),
            Record::EngineConfig(_) => (RecordKind::EngineConfig, ""),
            Record::SleepState(_) => (RecordKind::SleepState, ""),
            Record::Operation(_) => (RecordKind::Operation, ""),
            Record::IterationStats(_) => (RecordKind::IterationStats, ""),
            Record::PluginDrops(_) => (RecordKind::PluginDrops, ""),
        }
    }

    /// Checks what the wire format cannot: every time is a finite,
    /// non-negative number, the KV-cache usage a fraction between 0 and 1,
    /// counts that are parts of others are not larger than them (or add up
    /// to them), lists within their bounds, and label values and request ids
    /// within `limits`.
    ///
    /// ```
    /// use vllm_otel_metrics::protocol::{Abort, InputLimits, Record};
    /// let limits = InputLimits::default();
    /// let bad = Record::Abort(Abort { request_id: "r".into(), received_at: f64::NAN });
    /// assert!(bad.validate(&limits).is_err());
    /// let long = Record::Abort(Abort { request_id: "r".repeat(600), received_at: 1.0 });
    /// assert!(long.validate(&limits).unwrap_err().0.starts_with("request_id is 600 bytes"));
    /// ```
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        match self {
            Record::Request(body) => body.validate(limits),
            Record::Outputs(body) => body.validate(limits),
            Record::Abort(body) => body.validate(limits),
            Record::SchedulerStats(body) => body.validate(limits),
            Record::EngineConfig(body) => body.validate(limits),
            Record::SleepState(body) => body.validate(limits),
            Record::Operation(body) => body.validate(limits),
            Record::IterationStats(body) => body.validate(limits),
            Record::PluginDrops(body) => body.validate(limits),
        }
    }

    /// Reads the body of a record of `kind` from `from` (the tag already read).
    pub(super) fn read_body<'de, D: Deserializer<'de>>(
        kind: RecordKind,
        from: D,
    ) -> Result<Record, D::Error> {
        Ok(match kind {
            RecordKind::Request => Record::Request(Deserialize::deserialize(from)?),
            RecordKind::Outputs => Record::Outputs(Deserialize::deserialize(from)?),
            RecordKind::Abort => Record::Abort(Deserialize::deserialize(from)?),
            RecordKind::SchedulerStats => Record::SchedulerStats(Deserialize::deserialize(from)?),
            RecordKind::EngineConfig => Record::EngineConfig(Deserialize::deserialize(from)?),
            RecordKind::SleepState => Record::SleepState(Deserialize::deserialize(from)?),
            RecordKind::Operation => Record::Operation(Deserialize::deserialize(from)?),
            RecordKind::IterationStats => Record::IterationStats(Deserialize::deserialize(from)?),
            RecordKind::PluginDrops => Record::PluginDrops(Deserialize::deserialize(from)?),
            // Not a record's type: the tag's reader never yields it.
            RecordKind::Output | RecordKind::FinishedRequest | RecordKind::IterationValue => {
                return Err(serde::de::Error::unknown_variant(
                    kind.as_str(),
                    &RecordKind::TYPE_NAMES,
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::plugin::FinishedRequest;
    use crate::protocol::request::FinishReason;

    /// A record of each kind, as a JSONL line with `"type"` first; `None`
    /// for the parts of a record. A kind added to [`RecordKind`] does not
    /// compile here until it has a line (or is a part).
    fn line(kind: RecordKind) -> Option<&'static str> {
        Some(match kind {
            RecordKind::Request => {
                r#"{"type":"request","request_id":"r","model_name":"m","engine":0,"arrival_time":1.5,"prompt_len":4,"max_tokens":null,"n":1}"#
            }
            RecordKind::Outputs => {
                r#"{"type":"outputs","engine":0,"timestamp":2.0,"received_at":3.0,"outputs":[{"request_id":"r","new_token_ids":[1]}]}"#
            }
            RecordKind::Abort => r#"{"type":"abort","request_id":"r","received_at":2.5}"#,
            RecordKind::SchedulerStats => {
                r#"{"type":"scheduler_stats","model_name":"m","engine":0,"num_running_reqs":1,"num_waiting_reqs":0,"kv_cache_usage":0.5,"prefix_cache_queries":0,"prefix_cache_hits":0,"kv_connector_stats":{"nixl":{"num_failed_transfers":2}}}"#
            }
            RecordKind::EngineConfig => {
                r#"{"type":"engine_config","model_name":"m","engine":0,"cache_config":{"block_size":"16"}}"#
            }
            RecordKind::SleepState => {
                r#"{"type":"sleep_state","model_name":"m","engine":0,"level":1}"#
            }
            RecordKind::Operation => r#"{"type":"operation","operation":"init","duration":1.0}"#,
            RecordKind::IterationStats => {
                r#"{"type":"iteration_stats","model_name":"m","engine":0}"#
            }
            RecordKind::PluginDrops => r#"{"type":"plugin_drops","dropped":5}"#,
            RecordKind::Output | RecordKind::FinishedRequest | RecordKind::IterationValue => {
                return None
            }
        })
    }

    /// Every kind maps back and forth: its `type` names it, a record of it
    /// reads as that kind, and serde writes the same `type` first.
    #[test]
    fn every_kind_maps_back_and_forth() {
        let parts = [
            RecordKind::Output,
            RecordKind::FinishedRequest,
            RecordKind::IterationValue,
        ];
        for kind in RecordKind::RECORD_TYPES {
            assert!(!kind.is_part(), "{kind}");
            assert_eq!(RecordKind::from_type(kind.as_str()), Some(kind));
            let line = line(kind).unwrap_or_else(|| panic!("no record line of {kind}"));
            let record: Record = serde_json::from_str(line).unwrap();
            assert_eq!(record.kind().0, kind);
            let written = serde_json::to_string(&record).unwrap();
            let tag = format!(r#"{{"type":"{kind}""#);
            assert!(written.starts_with(&tag), "{written}");
            assert_eq!(serde_json::from_str::<Record>(&written).unwrap(), record);
        }
        assert_eq!(
            RecordKind::TYPE_NAMES
                .map(RecordKind::from_type)
                .map(Option::unwrap),
            RecordKind::RECORD_TYPES
        );
        for part in parts {
            assert!(part.is_part(), "{part}");
            assert_eq!(line(part), None);
            assert_eq!(RecordKind::from_type(part.as_str()), None);
        }
    }

    /// Absent optional fields are left out, but `max_tokens` is written even
    /// when null: traces written before `skip_serializing_none` read the same.
    #[test]
    fn absent_fields_are_left_out_but_max_tokens() {
        for kind in [
            RecordKind::Request,
            RecordKind::Outputs,
            RecordKind::SchedulerStats,
        ] {
            let line = line(kind).unwrap();
            let record: Record = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&record).unwrap(), line);
        }
    }

    #[test]
    fn plugin_records_take_their_defaults_when_fields_are_absent_or_null() {
        let line = r#"{"type":"iteration_stats","model_name":"m","engine":3,"received_at":null,
            "num_generation_tokens":null,"prompt_token_stats":null,"num_preempted_reqs":null,
            "n_params_iter":null,"finished_requests":[{"finish_reason":"length","e2e_latency":null,
            "request_id":null,"max_tokens_param":null}]}"#;
        let Record::IterationStats(parsed) = serde_json::from_str(line).unwrap() else {
            panic!("not iteration_stats");
        };
        let expected = IterationStats {
            model_name: "m".into(),
            engine: 3,
            finished_requests: vec![FinishedRequest {
                request_id: String::new(),
                finish_reason: FinishReason::Length,
                e2e_latency: 0.0,
                queued_time: 0.0,
                prefill_time: 0.0,
                inference_time: 0.0,
                decode_time: 0.0,
                mean_time_per_output_token: 0.0,
                num_prompt_tokens: 0,
                num_generation_tokens: 0,
                num_preemptions: 0,
                num_cached_tokens: 0,
                max_tokens_param: None,
            }],
            ..Default::default()
        };
        assert_eq!(*parsed, expected);
        let drops: Record = serde_json::from_str(r#"{"type":"plugin_drops"}"#).unwrap();
        assert_eq!(drops, Record::PluginDrops(PluginDrops { dropped: 0 }));
    }

    #[test]
    fn a_finished_request_needs_its_finish_reason() {
        let error = serde_json::from_str::<Record>(
            r#"{"type":"iteration_stats","model_name":"m","engine":0,"finished_requests":[{"request_id":"r"}]}"#,
        )
        .unwrap_err();
        // Located: the record streams into its variant, nothing is buffered.
        assert_eq!(
            error.to_string(),
            "missing field `finish_reason` at line 1 column 93"
        );
    }
}
