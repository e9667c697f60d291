//! [`Record`] and [`RecordKind`]: the record kinds, each written once.
//!
//! One `records!` list names every kind: its variant, its body type, its
//! `"type"` name and the field holding the request id it names, if any. The
//! enum, the kinds, their names, the dispatch of [`Record::kind`] and
//! [`Record::validate`], and the deserializer's per-kind step
//! ([`super::tag`]) all come from that list, so a new kind is one line here
//! plus its body type.

use serde::{Deserialize, Deserializer, Serialize};

use super::{
    Abort, EngineConfig, InputLimits, InvalidRecord, IterationStats, Operation, OutputBatch,
    PluginDrops, RequestStart, SchedulerStats, SleepState,
};

/// Writes [`Record`], [`RecordKind`] and their dispatch from one list.
macro_rules! records {
    ($(
        $(#[$doc:meta])*
        $variant:ident($body:ty) = $name:literal $(, request_id: $id:ident)?;
    )*) => {
        /// One input record: a line of a JSONL trace, or one message of the ingest stream.
        ///
        /// Deserializing reads the record in one pass when `"type"` is its first key
        /// (as every writer of this format puts it, and as serializing does); an
        /// object with the tag elsewhere is buffered first, as serde's internally
        /// tagged enums always do.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(tag = "type")]
        pub enum Record {
            $(
                $(#[$doc])*
                #[serde(rename = $name)]
                $variant($body),
            )*
        }

        /// What kind of record (or part of one) an input was: a record's `type`,
        /// or one engine-core output inside an `outputs` record.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum RecordKind {
            $(
                #[doc = concat!("A `", $name, "` record.")]
                $variant,
            )*
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
            pub const RECORD_TYPES: [RecordKind; [$($name),*].len()] =
                [$(RecordKind::$variant),*];

            /// The `type` names, in the order of [`RecordKind::RECORD_TYPES`].
            pub(super) const TYPE_NAMES: [&'static str; [$($name),*].len()] = [$($name),*];

            /// The record's `type` (`output` for one output of a batch).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(RecordKind::$variant => $name,)*
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
        }

        impl Record {
            /// The record's kind, and the request id it names (empty for the kinds
            /// that name none).
            pub fn kind(&self) -> (RecordKind, &str) {
                match self {
                    $(Record::$variant(_body) => {
                        (RecordKind::$variant, records!(@id _body $($id)?))
                    })*
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
                    $(Record::$variant(body) => body.validate(limits),)*
                }
            }

            /// Reads the body of a record of `kind` from `from` (the tag already read).
            pub(super) fn read_body<'de, D: Deserializer<'de>>(
                kind: RecordKind,
                from: D,
            ) -> Result<Record, D::Error> {
                Ok(match kind {
                    $(RecordKind::$variant => Record::$variant(Deserialize::deserialize(from)?),)*
                    // Not a record's type: the tag's reader never yields it.
                    part => {
                        return Err(serde::de::Error::unknown_variant(
                            part.as_str(),
                            &RecordKind::TYPE_NAMES,
                        ))
                    }
                })
            }
        }
    };
    (@id $body:ident $id:ident) => { &$body.$id };
    (@id $body:ident) => { "" };
}

records! {
    /// A request arrived at the frontend.
    Request(RequestStart) = "request", request_id: request_id;
    /// One engine step's outputs.
    Outputs(OutputBatch) = "outputs";
    /// The frontend aborted a request (client went away, cancel).
    Abort(Abort) = "abort", request_id: request_id;
    /// Scheduler state after one engine step.
    SchedulerStats(Box<SchedulerStats>) = "scheduler_stats";
    /// An engine started, with this configuration.
    EngineConfig(EngineConfig) = "engine_config";
    /// An engine went to sleep or woke up.
    SleepState(SleepState) = "sleep_state";
    /// The API server completed a sleep-mode or weight-update operation.
    Operation(Operation) = "operation";
    /// One engine step as vLLM's Python frontend saw it, from the vLLM
    /// stat-logger plugin (applied with the Python logger's rules).
    IterationStats(Box<IterationStats>) = "iteration_stats";
    /// The vLLM stat-logger plugin dropped records.
    PluginDrops(PluginDrops) = "plugin_drops";
}

impl RecordKind {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Absent optional fields are left out, but `max_tokens` is written even
    /// when null: traces written before `skip_serializing_none` read the same.
    #[test]
    fn absent_fields_are_left_out_but_max_tokens() {
        let request = r#"{"type":"request","request_id":"r","model_name":"m","engine":0,"arrival_time":1.5,"prompt_len":4,"max_tokens":null,"n":1}"#;
        let outputs = r#"{"type":"outputs","engine":0,"timestamp":2.0,"received_at":3.0,"outputs":[{"request_id":"r","new_token_ids":[1]}]}"#;
        let stats = r#"{"type":"scheduler_stats","model_name":"m","engine":0,"num_running_reqs":1,"num_waiting_reqs":0,"kv_cache_usage":0.5,"prefix_cache_queries":0,"prefix_cache_hits":0,"kv_connector_stats":{"nixl":{"num_failed_transfers":2}}}"#;
        for line in [request, outputs, stats] {
            let record: Record = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&record).unwrap(), line);
        }
    }
}
