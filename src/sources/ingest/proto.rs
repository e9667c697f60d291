//! The gRPC wire types (generated from `proto/vllm_otel_metrics/v1/ingest.proto`)
//! and their conversions to and from [`Record`].

use crate::protocol::{
    shown, Abort, EngineConfig, EngineCoreEvent, EngineCoreOutput, EventType, ExternalHitsBySource,
    FinishReason, FinishedRequest, GenAiOperation, IterationStats, KvCacheEvictionEvent,
    KvConnectorStats, KvFetchStages, NixlStats, OffloadingStats, Operation, OperationKind,
    OutputBatch, PerfStats, PluginDrops, PreemptionReason, PrefillStats, PromptTokenStats, Record,
    RequestStart, SaveOutcomes, SchedulerStats, SimpleCpuOffloadStats, SleepState,
    SpecDecodingStats,
};

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

fn event_type(value: i32) -> Result<EventType, ConversionError> {
    match pb::EventType::try_from(value) {
        Ok(pb::EventType::Queued) => Ok(EventType::Queued),
        Ok(pb::EventType::Scheduled) => Ok(EventType::Scheduled),
        Ok(pb::EventType::Preempted) => Ok(EventType::Preempted),
        Ok(pb::EventType::Unspecified) => Err(ConversionError::UntypedEvent),
        Err(_) => Err(ConversionError::UnknownEventType(value)),
    }
}

fn finish_reason(value: i32) -> Result<Option<FinishReason>, ConversionError> {
    Ok(match pb::FinishReason::try_from(value) {
        Ok(pb::FinishReason::Unspecified) => None,
        Ok(pb::FinishReason::Stop) => Some(FinishReason::Stop),
        Ok(pb::FinishReason::Length) => Some(FinishReason::Length),
        Ok(pb::FinishReason::Abort) => Some(FinishReason::Abort),
        Ok(pb::FinishReason::Error) => Some(FinishReason::Error),
        Ok(pb::FinishReason::Repetition) => Some(FinishReason::Repetition),
        Err(_) => return Err(ConversionError::UnknownFinishReason(value)),
    })
}

impl From<pb::PrefillStats> for PrefillStats {
    fn from(s: pb::PrefillStats) -> Self {
        PrefillStats {
            num_prompt_tokens: s.num_prompt_tokens,
            num_computed_tokens: s.num_computed_tokens,
            num_cached_tokens: s.num_cached_tokens,
            num_local_cached_tokens: s.num_local_cached_tokens,
            num_external_cached_tokens: s.num_external_cached_tokens,
        }
    }
}

impl From<PrefillStats> for pb::PrefillStats {
    fn from(s: PrefillStats) -> Self {
        pb::PrefillStats {
            num_prompt_tokens: s.num_prompt_tokens,
            num_computed_tokens: s.num_computed_tokens,
            num_cached_tokens: s.num_cached_tokens,
            num_local_cached_tokens: s.num_local_cached_tokens,
            num_external_cached_tokens: s.num_external_cached_tokens,
        }
    }
}

fn output_from_proto(o: pb::EngineCoreOutput) -> Result<EngineCoreOutput, ConversionError> {
    let request_id = required_id("output", o.request_id)?;
    let in_request = |e: ConversionError| ConversionError::InRequest {
        request_id: request_id.clone(),
        source: Box::new(e),
    };
    let events = o
        .events
        .into_iter()
        .map(|e| {
            Ok(EngineCoreEvent {
                kind: event_type(e.r#type)?,
                timestamp: e.timestamp,
                reason: match e.reason.as_deref() {
                    None | Some("") => None,
                    Some(reason) => {
                        Some(PreemptionReason::from_label(reason).ok_or_else(|| {
                            ConversionError::UnknownPreemptionReason(shown(reason))
                        })?)
                    }
                },
            })
        })
        .collect::<Result<Vec<_>, ConversionError>>()
        .map_err(in_request)?;
    let finish_reason = finish_reason(o.finish_reason).map_err(in_request)?;
    Ok(EngineCoreOutput {
        request_id,
        new_token_ids: o.new_token_ids,
        events,
        prefill_stats: o.prefill_stats.map(PrefillStats::from),
        finish_reason,
    })
}

/// Converts a wire record; `now` (the server's wall clock) fills receive
/// times the sender left out. Every number is then checked like a JSONL line.
pub fn record_from_proto(record: pb::Record, now: f64) -> Result<Record, ConversionError> {
    use pb::record::Record as R;
    let record = match record.record.ok_or(ConversionError::Empty)? {
        R::Request(r) => Record::Request(RequestStart {
            request_id: required_id("request", r.request_id)?,
            model_name: r.model_name,
            engine: r.engine,
            arrival_time: r.arrival_time,
            prompt_len: r.prompt_len,
            max_tokens: r.max_tokens,
            n: r.n.unwrap_or(1),
            traceparent: r.traceparent.filter(|t| !t.is_empty()),
            operation_name: match r.operation_name.as_deref() {
                None | Some("") => None,
                Some(name) => Some(
                    GenAiOperation::from_name(name)
                        .ok_or_else(|| ConversionError::UnknownOperationName(shown(name)))?,
                ),
            },
        }),
        R::Outputs(b) => Record::Outputs(OutputBatch {
            engine: b.engine,
            timestamp: b.timestamp,
            received_at: b.received_at.unwrap_or(now),
            outputs: b
                .outputs
                .into_iter()
                .map(output_from_proto)
                .collect::<Result<_, _>>()?,
        }),
        R::Abort(a) => Record::Abort(Abort {
            request_id: required_id("abort", a.request_id)?,
            received_at: a.received_at.unwrap_or(now),
        }),
        R::SchedulerStats(s) => {
            Record::SchedulerStats(Box::new(scheduler_stats_from_proto(s, now)))
        }
        R::EngineConfig(c) => Record::EngineConfig(EngineConfig {
            model_name: c.model_name,
            engine: c.engine,
            cache_config: c.cache_config.into_iter().collect(),
            max_loras: c.max_loras,
            max_model_len: c.max_model_len,
        }),
        R::SleepState(s) => Record::SleepState(SleepState {
            model_name: s.model_name,
            engine: s.engine,
            level: u8::try_from(s.level).unwrap_or(u8::MAX),
        }),
        R::Operation(o) => Record::Operation(Operation {
            operation: operation_kind(o.operation)?,
            duration: o.duration,
        }),
        R::IterationStats(s) => Record::IterationStats(Box::new(iteration_stats_from_proto(s)?)),
        R::PluginDrops(d) => Record::PluginDrops(PluginDrops { dropped: d.dropped }),
        // The server opens a batch before converting its records.
        R::Batch(_) => return Err(ConversionError::NestedBatch),
    };
    Ok(record)
}

fn iteration_stats_from_proto(s: pb::IterationStats) -> Result<IterationStats, ConversionError> {
    let prompt = s.prompt_token_stats.unwrap_or_default();
    let finished_requests = s
        .finished_requests
        .into_iter()
        .enumerate()
        .map(|(index, r)| {
            let finish_reason = finish_reason(r.finish_reason)
                .and_then(|reason| reason.ok_or(ConversionError::MissingFinishReason))
                .map_err(|source| ConversionError::InFinishedRequest {
                    index,
                    request_id: shown(&r.request_id),
                    source: Box::new(source),
                })?;
            Ok(FinishedRequest {
                request_id: r.request_id,
                finish_reason,
                e2e_latency: r.e2e_latency,
                queued_time: r.queued_time,
                prefill_time: r.prefill_time,
                inference_time: r.inference_time,
                decode_time: r.decode_time,
                mean_time_per_output_token: r.mean_time_per_output_token,
                num_prompt_tokens: r.num_prompt_tokens,
                num_generation_tokens: r.num_generation_tokens,
                num_preemptions: r.num_preemptions,
                num_cached_tokens: r.num_cached_tokens,
                max_tokens_param: r.max_tokens_param,
            })
        })
        .collect::<Result<_, ConversionError>>()?;
    Ok(IterationStats {
        model_name: s.model_name,
        engine: s.engine,
        // Left absent: the tracker takes the clock when it applies the record.
        received_at: s.received_at,
        num_generation_tokens: s.num_generation_tokens,
        prompt_token_stats: PromptTokenStats {
            computed: prompt.computed,
            local_cache_hit: prompt.local_cache_hit,
            external_kv_transfer: prompt.external_kv_transfer,
            cached_tokens: prompt.cached_tokens,
            total: prompt.total,
        },
        num_preempted_reqs: s.num_preempted_reqs,
        max_num_generation_tokens_iter: s.max_num_generation_tokens_iter,
        n_params_iter: s.n_params_iter,
        time_to_first_tokens_iter: s.time_to_first_tokens_iter,
        inter_token_latencies_iter: s.inter_token_latencies_iter,
        finished_requests,
    })
}

fn iteration_stats_to_proto(s: &IterationStats) -> pb::IterationStats {
    let p = &s.prompt_token_stats;
    pb::IterationStats {
        model_name: s.model_name.clone(),
        engine: s.engine,
        received_at: s.received_at,
        num_generation_tokens: s.num_generation_tokens,
        prompt_token_stats: Some(pb::PromptTokenStats {
            computed: p.computed,
            local_cache_hit: p.local_cache_hit,
            external_kv_transfer: p.external_kv_transfer,
            cached_tokens: p.cached_tokens,
            total: p.total,
        }),
        num_preempted_reqs: s.num_preempted_reqs,
        max_num_generation_tokens_iter: s.max_num_generation_tokens_iter.clone(),
        n_params_iter: s.n_params_iter.clone(),
        time_to_first_tokens_iter: s.time_to_first_tokens_iter.clone(),
        inter_token_latencies_iter: s.inter_token_latencies_iter.clone(),
        finished_requests: s
            .finished_requests
            .iter()
            .map(|r| pb::FinishedRequest {
                request_id: r.request_id.clone(),
                finish_reason: proto_finish_reason(Some(r.finish_reason)) as i32,
                e2e_latency: r.e2e_latency,
                queued_time: r.queued_time,
                prefill_time: r.prefill_time,
                inference_time: r.inference_time,
                decode_time: r.decode_time,
                mean_time_per_output_token: r.mean_time_per_output_token,
                num_prompt_tokens: r.num_prompt_tokens,
                num_generation_tokens: r.num_generation_tokens,
                num_preemptions: r.num_preemptions,
                num_cached_tokens: r.num_cached_tokens,
                max_tokens_param: r.max_tokens_param,
            })
            .collect(),
    }
}

fn operation_kind(value: i32) -> Result<OperationKind, ConversionError> {
    use pb::OperationKind as P;
    Ok(match P::try_from(value) {
        Ok(P::Sleep) => OperationKind::Sleep,
        Ok(P::ReleaseKvCacheMemory) => OperationKind::ReleaseKvCacheMemory,
        Ok(P::Wake) => OperationKind::Wake,
        Ok(P::Init) => OperationKind::Init,
        Ok(P::Start) => OperationKind::Start,
        Ok(P::StartDraft) => OperationKind::StartDraft,
        Ok(P::Update) => OperationKind::Update,
        Ok(P::Finish) => OperationKind::Finish,
        Ok(P::Unspecified) => return Err(ConversionError::UnkindedOperation),
        Err(_) => return Err(ConversionError::UnknownOperationKind(value)),
    })
}

fn proto_operation_kind(kind: OperationKind) -> pb::OperationKind {
    use pb::OperationKind as P;
    match kind {
        OperationKind::Sleep => P::Sleep,
        OperationKind::ReleaseKvCacheMemory => P::ReleaseKvCacheMemory,
        OperationKind::Wake => P::Wake,
        OperationKind::Init => P::Init,
        OperationKind::Start => P::Start,
        OperationKind::StartDraft => P::StartDraft,
        OperationKind::Update => P::Update,
        OperationKind::Finish => P::Finish,
    }
}

fn scheduler_stats_from_proto(s: pb::SchedulerStats, now: f64) -> SchedulerStats {
    let lora_listed = s.running_lora_adapters.is_some() || s.waiting_lora_adapters.is_some();
    SchedulerStats {
        model_name: s.model_name,
        engine: s.engine,
        num_running_reqs: s.num_running_reqs,
        num_waiting_reqs: s.num_waiting_reqs,
        kv_cache_usage: s.kv_cache_usage,
        prefix_cache_queries: s.prefix_cache_queries,
        prefix_cache_hits: s.prefix_cache_hits,
        // Only the LoRA series reads it: filled in where it is needed, as
        // the other receive times are.
        received_at: s.received_at.or(lora_listed.then_some(now)),
        num_skipped_waiting_reqs: s.num_skipped_waiting_reqs,
        num_kv_fetch_reqs_by_stage: s.num_kv_fetch_reqs_by_stage.map(|k| KvFetchStages {
            waiting_to_start: k.waiting_to_start,
            in_progress: k.in_progress,
            completed_waiting: k.completed_waiting,
        }),
        external_prefix_cache_queries: s.external_prefix_cache_queries,
        external_prefix_cache_hits: s.external_prefix_cache_hits,
        external_prefix_cache_hits_by_source: s.external_prefix_cache_hits_by_source.map(|h| {
            ExternalHitsBySource {
                host: h.host,
                p2p: h.p2p,
                disk: h.disk,
                external_unspecified: h.external_unspecified,
            }
        }),
        mm_cache_queries: s.mm_cache_queries,
        mm_cache_hits: s.mm_cache_hits,
        kv_cache_eviction_events: s
            .kv_cache_eviction_events
            .into_iter()
            .map(|e| KvCacheEvictionEvent {
                lifetime_seconds: e.lifetime_seconds,
                idle_seconds: e.idle_seconds,
                reuse_gaps_seconds: e.reuse_gaps_seconds,
            })
            .collect(),
        perf_stats: s.perf_stats.map(|p| PerfStats {
            num_flops_per_gpu: p.num_flops_per_gpu,
            num_read_bytes_per_gpu: p.num_read_bytes_per_gpu,
            num_write_bytes_per_gpu: p.num_write_bytes_per_gpu,
        }),
        spec_decoding: s.spec_decoding.map(|d| SpecDecodingStats {
            num_drafts: d.num_drafts,
            num_draft_tokens: d.num_draft_tokens,
            num_accepted_tokens: d.num_accepted_tokens,
            num_accepted_tokens_per_pos: d.num_accepted_tokens_per_pos,
        }),
        running_lora_adapters: s.running_lora_adapters.map(|a| a.names),
        waiting_lora_adapters: s.waiting_lora_adapters.map(|a| a.names),
        kv_connector_stats: s.kv_connector_stats.map(kv_connector_from_proto),
    }
}

fn observations(o: Option<pb::Observations>) -> Option<Vec<f64>> {
    o.map(|o| o.values)
}

fn proto_observations(o: &Option<Vec<f64>>) -> Option<pb::Observations> {
    o.as_ref().map(|values| pb::Observations {
        values: values.clone(),
    })
}

fn kv_connector_from_proto(k: pb::KvConnectorStats) -> KvConnectorStats {
    KvConnectorStats {
        nixl: k.nixl.map(|n| NixlStats {
            transfer_duration: observations(n.transfer_duration),
            post_duration: observations(n.post_duration),
            bytes_transferred: observations(n.bytes_transferred),
            num_descriptors: observations(n.num_descriptors),
            num_failed_transfers: n.num_failed_transfers,
            num_failed_handshakes: n.num_failed_handshakes,
            num_failed_notifications: n.num_failed_notifications,
            num_kv_expired_reqs: n.num_kv_expired_reqs,
            num_notifications_after_expiry: n.num_notifications_after_expiry,
        }),
        offloading: k.offloading.map(|o| OffloadingStats {
            load_bytes: o.load_bytes,
            load_time: o.load_time,
            load_sizes: observations(o.load_sizes),
            store_bytes: o.store_bytes,
            store_time: o.store_time,
            store_sizes: observations(o.store_sizes),
            lookup_sync_delays: observations(o.lookup_sync_delays),
            lookup_async_delays: observations(o.lookup_async_delays),
            allocation_failures: o.allocation_failures,
            stores_skipped: o.stores_skipped,
            cpu_cache_usage: o.cpu_cache_usage,
            cpu_cache_write_usage: o.cpu_cache_write_usage,
            cpu_cache_read_usage: o.cpu_cache_read_usage,
        }),
        simple_cpu_offload: k.simple_cpu_offload.map(|s| SimpleCpuOffloadStats {
            save_outcomes: s.save_outcomes.map(|o| SaveOutcomes {
                stored: o.stored,
                dropped_cpu_full: o.dropped_cpu_full,
                dropped_request_gone: o.dropped_request_gone,
                dropped_null_block: o.dropped_null_block,
                dropped_not_hashed: o.dropped_not_hashed,
                skipped_already_cached: o.skipped_already_cached,
                skipped_in_flight: o.skipped_in_flight,
            }),
            load_blocks: s.load_blocks,
            used_blocks: s.used_blocks,
            pending_store_blocks: s.pending_store_blocks,
        }),
    }
}

fn kv_connector_to_proto(k: &KvConnectorStats) -> pb::KvConnectorStats {
    pb::KvConnectorStats {
        nixl: k.nixl.as_ref().map(|n| pb::NixlStats {
            transfer_duration: proto_observations(&n.transfer_duration),
            post_duration: proto_observations(&n.post_duration),
            bytes_transferred: proto_observations(&n.bytes_transferred),
            num_descriptors: proto_observations(&n.num_descriptors),
            num_failed_transfers: n.num_failed_transfers,
            num_failed_handshakes: n.num_failed_handshakes,
            num_failed_notifications: n.num_failed_notifications,
            num_kv_expired_reqs: n.num_kv_expired_reqs,
            num_notifications_after_expiry: n.num_notifications_after_expiry,
        }),
        offloading: k.offloading.as_ref().map(|o| pb::OffloadingStats {
            load_bytes: o.load_bytes,
            load_time: o.load_time,
            load_sizes: proto_observations(&o.load_sizes),
            store_bytes: o.store_bytes,
            store_time: o.store_time,
            store_sizes: proto_observations(&o.store_sizes),
            lookup_sync_delays: proto_observations(&o.lookup_sync_delays),
            lookup_async_delays: proto_observations(&o.lookup_async_delays),
            allocation_failures: o.allocation_failures,
            stores_skipped: o.stores_skipped,
            cpu_cache_usage: o.cpu_cache_usage,
            cpu_cache_write_usage: o.cpu_cache_write_usage,
            cpu_cache_read_usage: o.cpu_cache_read_usage,
        }),
        simple_cpu_offload: k
            .simple_cpu_offload
            .as_ref()
            .map(|s| pb::SimpleCpuOffloadStats {
                save_outcomes: s.save_outcomes.map(|o| pb::SaveOutcomes {
                    stored: o.stored,
                    dropped_cpu_full: o.dropped_cpu_full,
                    dropped_request_gone: o.dropped_request_gone,
                    dropped_null_block: o.dropped_null_block,
                    dropped_not_hashed: o.dropped_not_hashed,
                    skipped_already_cached: o.skipped_already_cached,
                    skipped_in_flight: o.skipped_in_flight,
                }),
                load_blocks: s.load_blocks,
                used_blocks: s.used_blocks,
                pending_store_blocks: s.pending_store_blocks,
            }),
    }
}

fn scheduler_stats_to_proto(s: &SchedulerStats) -> pb::SchedulerStats {
    pb::SchedulerStats {
        model_name: s.model_name.clone(),
        engine: s.engine,
        num_running_reqs: s.num_running_reqs,
        num_waiting_reqs: s.num_waiting_reqs,
        kv_cache_usage: s.kv_cache_usage,
        prefix_cache_queries: s.prefix_cache_queries,
        prefix_cache_hits: s.prefix_cache_hits,
        received_at: s.received_at,
        num_skipped_waiting_reqs: s.num_skipped_waiting_reqs,
        num_kv_fetch_reqs_by_stage: s.num_kv_fetch_reqs_by_stage.map(|k| pb::KvFetchStages {
            waiting_to_start: k.waiting_to_start,
            in_progress: k.in_progress,
            completed_waiting: k.completed_waiting,
        }),
        external_prefix_cache_queries: s.external_prefix_cache_queries,
        external_prefix_cache_hits: s.external_prefix_cache_hits,
        external_prefix_cache_hits_by_source: s.external_prefix_cache_hits_by_source.map(|h| {
            pb::ExternalHitsBySource {
                host: h.host,
                p2p: h.p2p,
                disk: h.disk,
                external_unspecified: h.external_unspecified,
            }
        }),
        mm_cache_queries: s.mm_cache_queries,
        mm_cache_hits: s.mm_cache_hits,
        kv_cache_eviction_events: s
            .kv_cache_eviction_events
            .iter()
            .map(|e| pb::KvCacheEvictionEvent {
                lifetime_seconds: e.lifetime_seconds,
                idle_seconds: e.idle_seconds,
                reuse_gaps_seconds: e.reuse_gaps_seconds.clone(),
            })
            .collect(),
        perf_stats: s.perf_stats.map(|p| pb::PerfStats {
            num_flops_per_gpu: p.num_flops_per_gpu,
            num_read_bytes_per_gpu: p.num_read_bytes_per_gpu,
            num_write_bytes_per_gpu: p.num_write_bytes_per_gpu,
        }),
        spec_decoding: s.spec_decoding.as_ref().map(|d| pb::SpecDecodingStats {
            num_drafts: d.num_drafts,
            num_draft_tokens: d.num_draft_tokens,
            num_accepted_tokens: d.num_accepted_tokens,
            num_accepted_tokens_per_pos: d.num_accepted_tokens_per_pos.clone(),
        }),
        running_lora_adapters: s
            .running_lora_adapters
            .as_ref()
            .map(|names| pb::AdapterList {
                names: names.clone(),
            }),
        waiting_lora_adapters: s
            .waiting_lora_adapters
            .as_ref()
            .map(|names| pb::AdapterList {
                names: names.clone(),
            }),
        kv_connector_stats: s.kv_connector_stats.as_ref().map(kv_connector_to_proto),
    }
}

fn proto_event_type(kind: EventType) -> pb::EventType {
    match kind {
        EventType::Queued => pb::EventType::Queued,
        EventType::Scheduled => pb::EventType::Scheduled,
        EventType::Preempted => pb::EventType::Preempted,
    }
}

fn proto_finish_reason(reason: Option<FinishReason>) -> pb::FinishReason {
    match reason {
        None => pb::FinishReason::Unspecified,
        Some(FinishReason::Stop) => pb::FinishReason::Stop,
        Some(FinishReason::Length) => pb::FinishReason::Length,
        Some(FinishReason::Abort) => pb::FinishReason::Abort,
        Some(FinishReason::Error) => pb::FinishReason::Error,
        Some(FinishReason::Repetition) => pb::FinishReason::Repetition,
    }
}

/// Converts a record for the wire (receive times always set).
pub fn record_to_proto(record: &Record) -> pb::Record {
    use pb::record::Record as R;
    let inner = match record {
        Record::Request(r) => R::Request(pb::RequestStarted {
            request_id: r.request_id.clone(),
            model_name: r.model_name.clone(),
            engine: r.engine,
            arrival_time: r.arrival_time,
            prompt_len: r.prompt_len,
            max_tokens: r.max_tokens,
            n: Some(r.n),
            traceparent: r.traceparent.clone(),
            operation_name: r.operation_name.map(|o| o.as_str().to_owned()),
        }),
        Record::Outputs(b) => R::Outputs(pb::OutputBatch {
            engine: b.engine,
            timestamp: b.timestamp,
            received_at: Some(b.received_at),
            outputs: b
                .outputs
                .iter()
                .map(|o| pb::EngineCoreOutput {
                    request_id: o.request_id.clone(),
                    new_token_ids: o.new_token_ids.clone(),
                    events: o
                        .events
                        .iter()
                        .map(|e| pb::EngineCoreEvent {
                            r#type: proto_event_type(e.kind) as i32,
                            timestamp: e.timestamp,
                            reason: e.reason.map(|r| r.as_str().to_owned()),
                        })
                        .collect(),
                    prefill_stats: o.prefill_stats.map(pb::PrefillStats::from),
                    finish_reason: proto_finish_reason(o.finish_reason) as i32,
                })
                .collect(),
        }),
        Record::Abort(a) => R::Abort(pb::Abort {
            request_id: a.request_id.clone(),
            received_at: Some(a.received_at),
        }),
        Record::SchedulerStats(s) => R::SchedulerStats(scheduler_stats_to_proto(s)),
        Record::EngineConfig(c) => R::EngineConfig(pb::EngineConfig {
            model_name: c.model_name.clone(),
            engine: c.engine,
            cache_config: c
                .cache_config
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            max_loras: c.max_loras,
            max_model_len: c.max_model_len,
        }),
        Record::SleepState(s) => R::SleepState(pb::SleepState {
            model_name: s.model_name.clone(),
            engine: s.engine,
            level: u32::from(s.level),
        }),
        Record::Operation(o) => R::Operation(pb::Operation {
            operation: proto_operation_kind(o.operation) as i32,
            duration: o.duration,
        }),
        Record::IterationStats(s) => R::IterationStats(iteration_stats_to_proto(s)),
        Record::PluginDrops(d) => R::PluginDrops(pb::PluginDrops { dropped: d.dropped }),
    };
    pb::Record {
        record: Some(inner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_the_wire_types() {
        let trace = include_str!("../../../tests/data/lifecycle.jsonl");
        let mut converted = 0;
        for line in trace.lines() {
            let Ok(record) = serde_json::from_str::<Record>(line) else {
                continue;
            };
            if record.validate(&Default::default()).is_err() {
                continue;
            }
            assert_eq!(record_from_proto(record_to_proto(&record), 0.0), Ok(record));
            converted += 1;
        }
        assert!(converted > 20);
    }

    #[test]
    fn plugin_records_round_trip_through_the_wire_types() {
        let lines = [
            r#"{"type":"iteration_stats","model_name":"m","engine":2,"received_at":1700000000.5,"num_generation_tokens":12,"prompt_token_stats":{"computed":100,"local_cache_hit":16,"external_kv_transfer":0,"cached_tokens":16,"total":116},"num_preempted_reqs":1,"max_num_generation_tokens_iter":[30],"n_params_iter":[1],"time_to_first_tokens_iter":[0.25],"inter_token_latencies_iter":[0.02,0.03],"finished_requests":[{"request_id":"r1","finish_reason":"stop","e2e_latency":1.5,"queued_time":0.1,"prefill_time":0.2,"inference_time":1.3,"decode_time":1.1,"mean_time_per_output_token":0.04,"num_prompt_tokens":116,"num_generation_tokens":30,"num_preemptions":1,"num_cached_tokens":16,"max_tokens_param":64},{"finish_reason":"abort"}]}"#,
            r#"{"type":"iteration_stats","model_name":"m","engine":0}"#,
            r#"{"type":"plugin_drops","dropped":5}"#,
            r#"{"type":"engine_config","model_name":"m","engine":0,"max_model_len":4096}"#,
        ];
        for line in lines {
            let record: Record = serde_json::from_str(line).unwrap();
            assert_eq!(
                record_from_proto(record_to_proto(&record), 0.0),
                Ok(record.clone()),
                "{line}"
            );
            let json = serde_json::to_string(&record).unwrap();
            assert_eq!(
                serde_json::from_str::<Record>(&json).unwrap(),
                record,
                "{json}"
            );
        }
        let unfinished = pb::Record {
            record: Some(pb::record::Record::IterationStats(pb::IterationStats {
                model_name: "m".into(),
                finished_requests: vec![
                    pb::FinishedRequest {
                        request_id: "r0".into(),
                        finish_reason: pb::FinishReason::Stop as i32,
                        ..Default::default()
                    },
                    pb::FinishedRequest {
                        request_id: "r1".into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            })),
        };
        let error = record_from_proto(unfinished, 0.0).unwrap_err();
        assert_eq!(
            error.to_string(),
            "finished_requests[1] (request 'r1'): no finish reason (FINISH_REASON_UNSPECIFIED)"
        );
        let unknown = pb::Record {
            record: Some(pb::record::Record::IterationStats(pb::IterationStats {
                finished_requests: vec![pb::FinishedRequest {
                    finish_reason: 42,
                    ..Default::default()
                }],
                ..Default::default()
            })),
        };
        assert_eq!(
            record_from_proto(unknown, 0.0).unwrap_err().to_string(),
            "finished_requests[0] (request ''): unknown finish reason 42"
        );
    }

    #[test]
    fn invalid_wire_records_are_named() {
        let empty = pb::Record { record: None };
        assert_eq!(
            record_from_proto(empty, 0.0).unwrap_err(),
            ConversionError::Empty
        );
        let bad_event = pb::Record {
            record: Some(pb::record::Record::Outputs(pb::OutputBatch {
                engine: 0,
                timestamp: 1.0,
                received_at: None,
                outputs: vec![pb::EngineCoreOutput {
                    request_id: "r7".into(),
                    events: vec![pb::EngineCoreEvent {
                        r#type: 9,
                        timestamp: 1.0,
                        reason: None,
                    }],
                    ..Default::default()
                }],
            })),
        };
        let error = record_from_proto(bad_event, 0.0).unwrap_err();
        assert_eq!(
            error,
            ConversionError::InRequest {
                request_id: "r7".into(),
                source: Box::new(ConversionError::UnknownEventType(9)),
            }
        );
        assert_eq!(error.to_string(), "request r7: unknown event type 9");
        let nan = pb::Record {
            record: Some(pb::record::Record::Abort(pb::Abort {
                request_id: "r".into(),
                received_at: Some(f64::NAN),
            })),
        };
        // Converted as it is; the tracker's check refuses it.
        assert!(record_from_proto(nan, 0.0)
            .unwrap()
            .validate(&Default::default())
            .unwrap_err()
            .0
            .contains("not a finite number"));
        let defaulted = pb::Record {
            record: Some(pb::record::Record::Abort(pb::Abort {
                request_id: "r".into(),
                received_at: None,
            })),
        };
        assert_eq!(
            record_from_proto(defaulted, 42.0),
            Ok(Record::Abort(Abort {
                request_id: "r".into(),
                received_at: 42.0
            }))
        );
    }

    #[test]
    fn preemption_reasons_and_operation_names_cross_the_wire() {
        let line = r#"{"type":"request","request_id":"r","model_name":"m","engine":0,"arrival_time":1.0,"prompt_len":4,"operation_name":"chat"}"#;
        let record: Record = serde_json::from_str(line).unwrap();
        assert_eq!(record_from_proto(record_to_proto(&record), 0.0), Ok(record));
        let line = r#"{"type":"outputs","engine":0,"timestamp":2.0,"received_at":3.0,"outputs":[{"request_id":"r","new_token_ids":[1],"events":[{"type":"preempted","timestamp":1.5,"reason":"priority"},{"type":"preempted","timestamp":1.6}]}]}"#;
        let record: Record = serde_json::from_str(line).unwrap();
        assert_eq!(record_from_proto(record_to_proto(&record), 0.0), Ok(record));

        let event = |reason: &str| pb::Record {
            record: Some(pb::record::Record::Outputs(pb::OutputBatch {
                outputs: vec![pb::EngineCoreOutput {
                    request_id: "r7".into(),
                    events: vec![pb::EngineCoreEvent {
                        r#type: pb::EventType::Preempted as i32,
                        timestamp: 1.0,
                        reason: Some(reason.into()),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            })),
        };
        // Empty is no reason, as proto3 writes an unset string.
        let Ok(Record::Outputs(batch)) = record_from_proto(event(""), 0.0) else {
            panic!()
        };
        assert_eq!(batch.outputs[0].events[0].reason, None);
        assert_eq!(
            record_from_proto(event("kv_cache_full"), 0.0)
                .unwrap_err()
                .to_string(),
            "request r7: unknown preemption reason 'kv_cache_full' (expected kv_full, priority or prefix_cache_reset)"
        );
        let request = pb::Record {
            record: Some(pb::record::Record::Request(pb::RequestStarted {
                request_id: "r".into(),
                operation_name: Some("summarize".into()),
                ..Default::default()
            })),
        };
        assert_eq!(
            record_from_proto(request, 0.0).unwrap_err().to_string(),
            "unknown operation_name 'summarize' (expected one of chat, create_agent, embeddings, execute_tool, generate_content, invoke_agent, text_completion)"
        );
    }
}
