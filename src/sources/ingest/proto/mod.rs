//! The gRPC wire types (generated from `proto/vllm_otel_metrics/v1/ingest.proto`)
//! and their conversions to and from [`Record`]: the rules here, the field
//! copies in `wire.rs`.

use crate::protocol::{
    shown, Abort, EngineConfig, EngineCoreEvent, EngineCoreOutput, FinishReason, FinishedRequest,
    GenAiOperation, IterationStats, Operation, OutputBatch, PluginDrops, PreemptionReason,
    PromptTokenStats, Record, RequestStart, SchedulerStats, SleepState,
};

mod wire;

use wire::{FromWire, ToWire};

/// Generated message, enum, client and server types.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("vllm_otel_metrics.v1");
}

/// Why a wire record cannot become a [`Record`]: what is missing or
/// unknown, and the request it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConversionError {
    /// No field of the record's oneof is set.
    #[error("empty record (no field of the oneof set)")]
    Empty,
    /// A request, output or abort without its request id.
    #[error("{0} without a request_id")]
    MissingRequestId(&'static str),
    /// An event whose type is unset.
    #[error("event without a type")]
    UntypedEvent,
    /// An event type this version does not know.
    #[error("unknown event type {0}")]
    UnknownEventType(i32),
    /// A finish reason this version does not know.
    #[error("unknown finish reason {0}")]
    UnknownFinishReason(i32),
    /// A preemption reason this version does not know.
    #[error("unknown preemption reason '{0}' (expected kv_full, priority or prefix_cache_reset)")]
    UnknownPreemptionReason(String),
    /// A GenAI operation name this version does not know.
    #[error("unknown operation_name '{0}' (expected one of chat, create_agent, embeddings, execute_tool, generate_content, invoke_agent, text_completion)")]
    UnknownOperationName(String),
    /// A batch inside a batch.
    #[error("a batch inside a batch")]
    NestedBatch,
    /// Engine-core frames, which are many records, not one.
    #[error("engine-core frames are decoded into records by the server, not converted as one")]
    Frames,
    /// An operation whose kind is unset.
    #[error("operation without a kind")]
    UnkindedOperation,
    /// An operation kind this version does not know.
    #[error("unknown operation kind {0}")]
    UnknownOperationKind(i32),
    /// A problem in the output of one request.
    #[error("request {request_id}: {source}")]
    InRequest {
        /// The request.
        request_id: String,
        /// The problem.
        source: Box<ConversionError>,
    },
    /// A finished request of an `iteration_stats` record without a finish reason.
    #[error("no finish reason (FINISH_REASON_UNSPECIFIED)")]
    MissingFinishReason,
    /// A problem in one finished request of an `iteration_stats` record.
    #[error("finished_requests[{index}] (request '{request_id}'): {source}")]
    InFinishedRequest {
        /// Its position in `finished_requests`.
        index: usize,
        /// Its id (shortened when long).
        request_id: String,
        /// The problem.
        source: Box<ConversionError>,
    },
}

fn required_id(what: &'static str, id: String) -> Result<String, ConversionError> {
    if id.is_empty() {
        Err(ConversionError::MissingRequestId(what))
    } else {
        Ok(id)
    }
}

/// A wire enum's value, `None` when unset; `unknown` names a number this
/// version does not know.
fn wire_enum<W, T>(
    value: i32,
    unknown: fn(i32) -> ConversionError,
) -> Result<Option<T>, ConversionError>
where
    W: TryFrom<i32>,
    Option<T>: FromWire<W>,
{
    W::try_from(value)
        .map(Option::<T>::from_wire)
        .map_err(|_| unknown(value))
}

/// A wire enum that must be set: [`wire_enum`], and `unset` when it is not.
fn required_enum<W, T>(
    value: i32,
    unset: ConversionError,
    unknown: fn(i32) -> ConversionError,
) -> Result<T, ConversionError>
where
    W: TryFrom<i32>,
    Option<T>: FromWire<W>,
{
    wire_enum::<W, T>(value, unknown)?.ok_or(unset)
}

/// The wire value of a finish reason that may be absent.
fn proto_finish_reason(reason: Option<FinishReason>) -> i32 {
    reason.map_or(pb::FinishReason::Unspecified as i32, |reason| {
        reason.to_wire()
    })
}

/// An optional text that proto3 writes as empty when unset.
fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

/// A label value that may be unset (empty): `None`, its value, or the
/// error `unknown` makes of a value this version does not know.
fn known<T>(
    text: Option<String>,
    parse: fn(&str) -> Option<T>,
    unknown: fn(String) -> ConversionError,
) -> Result<Option<T>, ConversionError> {
    non_empty(text)
        .map(|text| parse(&text).ok_or_else(|| unknown(shown(&text))))
        .transpose()
}

fn output_from_proto(mut o: pb::EngineCoreOutput) -> Result<EngineCoreOutput, ConversionError> {
    let request_id = required_id("output", std::mem::take(&mut o.request_id))?;
    let in_request = |e: ConversionError| ConversionError::InRequest {
        request_id: request_id.clone(),
        source: Box::new(e),
    };
    let events = std::mem::take(&mut o.events)
        .into_iter()
        .map(|e| {
            Ok(EngineCoreEvent {
                kind: required_enum::<pb::EventType, _>(
                    e.r#type,
                    ConversionError::UntypedEvent,
                    ConversionError::UnknownEventType,
                )?,
                timestamp: e.timestamp,
                reason: known(
                    e.reason,
                    PreemptionReason::from_label,
                    ConversionError::UnknownPreemptionReason,
                )?,
            })
        })
        .collect::<Result<Vec<_>, ConversionError>>()
        .map_err(in_request)?;
    let finish_reason =
        wire_enum::<pb::FinishReason, _>(o.finish_reason, ConversionError::UnknownFinishReason)
            .map_err(in_request)?;
    Ok(EngineCoreOutput::from_wire_with(
        o,
        request_id,
        events,
        finish_reason,
    ))
}

fn output_to_proto(o: &EngineCoreOutput) -> pb::EngineCoreOutput {
    let events = o
        .events
        .iter()
        .map(|e| pb::EngineCoreEvent {
            r#type: e.kind.to_wire(),
            timestamp: e.timestamp,
            reason: e.reason.map(|r| r.as_str().to_owned()),
        })
        .collect();
    o.to_wire_with(
        o.request_id.clone(),
        events,
        proto_finish_reason(o.finish_reason),
    )
}

fn iteration_stats_from_proto(
    mut s: pb::IterationStats,
    skipped: &mut Vec<ConversionError>,
) -> IterationStats {
    let prompt = PromptTokenStats::from_wire(s.prompt_token_stats.take().unwrap_or_default());
    let finished_requests = std::mem::take(&mut s.finished_requests)
        .into_iter()
        .enumerate()
        .filter_map(|(index, r)| {
            let finish_reason = required_enum::<pb::FinishReason, _>(
                r.finish_reason,
                ConversionError::MissingFinishReason,
                ConversionError::UnknownFinishReason,
            )
            .map_err(|source| ConversionError::InFinishedRequest {
                index,
                request_id: shown(&r.request_id),
                source: Box::new(source),
            });
            match finish_reason {
                Ok(reason) => Some(FinishedRequest::from_wire_with(r, reason)),
                Err(e) => {
                    skipped.push(e);
                    None
                }
            }
        })
        .collect();
    // `received_at` stays absent when the sender left it out: the tracker
    // takes the clock when it applies the record.
    IterationStats::from_wire_with(s, prompt, finished_requests)
}

fn iteration_stats_to_proto(s: &IterationStats) -> pb::IterationStats {
    let finished = s
        .finished_requests
        .iter()
        .map(|r| r.to_wire_with(r.finish_reason.to_wire()))
        .collect();
    s.to_wire_with(Some(s.prompt_token_stats.to_wire()), finished)
}

fn scheduler_stats_from_proto(s: pb::SchedulerStats, now: f64) -> SchedulerStats {
    let lora_listed = s.running_lora_adapters.is_some() || s.waiting_lora_adapters.is_some();
    let mut stats = SchedulerStats::from_wire(s);
    // Only the LoRA series reads it: filled in where it is needed, as the
    // other receive times are.
    stats.received_at = stats.received_at.or(lora_listed.then_some(now));
    stats
}

/// Converts a wire record; `now` (the server's wall clock) fills receive
/// times the sender left out. Every number is then checked like a JSONL line.
/// Strict: a record with one part that does not convert (an output, a
/// finished request) is an error; the server uses [`record_from_proto_parts`].
pub fn record_from_proto(record: pb::Record, now: f64) -> Result<Record, ConversionError> {
    let mut skipped = Vec::new();
    let record = record_from_proto_parts(record, now, &mut skipped)?;
    match skipped.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(record),
    }
}

/// [`record_from_proto`], leaving out each part of the record that does not
/// convert (an output of an `outputs` record, a finished request of an
/// `iteration_stats` record) and pushing why onto `skipped`: one bad part
/// does not cost the other requests of the engine step their samples.
pub fn record_from_proto_parts(
    record: pb::Record,
    now: f64,
    skipped: &mut Vec<ConversionError>,
) -> Result<Record, ConversionError> {
    use pb::record::Record as R;
    let record = match record.record.ok_or(ConversionError::Empty)? {
        R::Request(mut r) => {
            let request_id = required_id("request", std::mem::take(&mut r.request_id))?;
            let n = r.n.unwrap_or(1);
            let traceparent = non_empty(r.traceparent.take());
            let operation_name = known(
                r.operation_name.take(),
                GenAiOperation::from_name,
                ConversionError::UnknownOperationName,
            )?;
            Record::Request(RequestStart::from_wire_with(
                r,
                request_id,
                n,
                traceparent,
                operation_name,
            ))
        }
        R::Outputs(mut b) => {
            let received_at = b.received_at.unwrap_or(now);
            let outputs = std::mem::take(&mut b.outputs)
                .into_iter()
                .filter_map(|o| match output_from_proto(o) {
                    Ok(output) => Some(output),
                    Err(e) => {
                        skipped.push(e);
                        None
                    }
                })
                .collect();
            Record::Outputs(OutputBatch::from_wire_with(b, received_at, outputs))
        }
        R::Abort(a) => Record::Abort(Abort {
            request_id: required_id("abort", a.request_id)?,
            received_at: a.received_at.unwrap_or(now),
        }),
        R::SchedulerStats(s) => {
            Record::SchedulerStats(Box::new(scheduler_stats_from_proto(*s, now)))
        }
        R::EngineConfig(c) => Record::EngineConfig(EngineConfig::from_wire(c)),
        R::SleepState(s) => {
            let level = u8::try_from(s.level).unwrap_or(u8::MAX);
            Record::SleepState(SleepState::from_wire_with(s, level))
        }
        R::Operation(o) => {
            let operation = required_enum::<pb::OperationKind, _>(
                o.operation,
                ConversionError::UnkindedOperation,
                ConversionError::UnknownOperationKind,
            )?;
            Record::Operation(Operation::from_wire_with(o, operation))
        }
        R::IterationStats(s) => {
            Record::IterationStats(Box::new(iteration_stats_from_proto(s, skipped)))
        }
        R::PluginDrops(d) => Record::PluginDrops(PluginDrops::from_wire(d)),
        // The server opens a batch before converting its records.
        R::Batch(_) => return Err(ConversionError::NestedBatch),
        // The server decodes frames into records (sources::tap) itself.
        R::Frames(_) => return Err(ConversionError::Frames),
    };
    Ok(record)
}

/// Converts a record for the wire (receive times always set).
pub fn record_to_proto(record: &Record) -> pb::Record {
    use pb::record::Record as R;
    let inner = match record {
        Record::Request(r) => R::Request(r.to_wire_with(
            r.request_id.clone(),
            Some(r.n),
            r.traceparent.clone(),
            r.operation_name.map(|o| o.as_str().to_owned()),
        )),
        Record::Outputs(b) => R::Outputs(b.to_wire_with(
            Some(b.received_at),
            b.outputs.iter().map(output_to_proto).collect(),
        )),
        Record::Abort(a) => R::Abort(pb::Abort {
            request_id: a.request_id.clone(),
            received_at: Some(a.received_at),
        }),
        Record::SchedulerStats(s) => R::SchedulerStats(Box::new(s.to_wire())),
        Record::EngineConfig(c) => R::EngineConfig(c.to_wire()),
        Record::SleepState(s) => R::SleepState(s.to_wire_with(u32::from(s.level))),
        Record::Operation(o) => R::Operation(o.to_wire_with(o.operation.to_wire())),
        Record::IterationStats(s) => R::IterationStats(iteration_stats_to_proto(s)),
        Record::PluginDrops(d) => R::PluginDrops(d.to_wire()),
    };
    pb::Record {
        record: Some(inner),
    }
}

#[cfg(test)]
mod tests;
