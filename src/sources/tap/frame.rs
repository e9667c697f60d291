//! One frame of the engine-core tap: vLLM's msgpack `EngineCoreOutputs`, as
//! the engine core's output thread encoded it for its frontend, decoded into
//! an `outputs` record and the step's `scheduler_stats`.
//!
//! vLLM's structs are `msgspec.Struct(array_like=True, omit_defaults=True)`:
//! positional arrays whose trailing default fields are left out. Positions
//! move between vLLM versions, so they are never hard-coded here: the tap
//! sends the field names of each struct as its vLLM defines them
//! ([`Layout`]), and fields are found by name. The dataclasses inside
//! (`SchedulerStats`, `PrefillStats`, ...) and the plain `msgspec.Struct`s
//! (`EngineCoreEvent`) are msgpack maps keyed by field name.

use super::msgpack::{MsgpackError, Reader};
use crate::protocol::{
    EngineCoreEvent, EngineCoreOutput, EventType, ExternalHitsBySource, FinishReason,
    KvCacheEvictionEvent, KvFetchStages, OutputBatch, PerfStats, PreemptionReason, PrefillStats,
    SchedulerStats, SpecDecodingStats,
};
use crate::sources::budget;

/// Fields of `EngineCoreOutputs` the decoder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputsField {
    EngineIndex,
    Outputs,
    SchedulerStats,
    Timestamp,
    Other,
}

/// Fields of `EngineCoreOutput` the decoder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputField {
    RequestId,
    NewTokenIds,
    FinishReason,
    Events,
    PrefillStats,
    Other,
}

/// The field names each struct must have for the decoder to read it, by
/// struct: the tap checks vLLM's own struct fields against these before it
/// turns on (`python/src/vllm_otel_metrics/tap.py` holds the same list).
pub const REQUIRED_FIELDS: [(&str, &[&str]); 2] = [
    ("EngineCoreOutputs", &["outputs", "timestamp"]),
    (
        "EngineCoreOutput",
        &["request_id", "new_token_ids", "finish_reason", "events"],
    ),
];

/// Where each field is in vLLM's array-like structs, from the names the tap
/// sends (`EngineCoreOutputs.__struct_fields__` and
/// `EngineCoreOutput.__struct_fields__` of the running vLLM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    outputs: Vec<OutputsField>,
    output: Vec<OutputField>,
}

/// A layout the decoder cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A field the decoder needs is not in vLLM's struct.
    #[error("vLLM's {structure} has no field '{field}' (its fields: {fields})")]
    Missing {
        /// The struct.
        structure: &'static str,
        /// The missing field.
        field: &'static str,
        /// The fields it has, comma-separated.
        fields: String,
    },
    /// More field names than any struct has.
    #[error("vLLM's {structure} is said to have {count} fields, more than the limit of {MAX_LAYOUT_FIELDS}")]
    TooMany {
        /// The struct.
        structure: &'static str,
        /// The number of names sent.
        count: usize,
    },
}

/// Most fields a struct's layout may name.
const MAX_LAYOUT_FIELDS: usize = 256;

impl Layout {
    /// The layout of these field lists, or the first required field missing.
    ///
    /// ```
    /// use vllm_otel_metrics::sources::tap::Layout;
    /// let outputs = ["engine_index", "outputs", "scheduler_stats", "timestamp"];
    /// let output = ["request_id", "new_token_ids", "finish_reason", "events"];
    /// assert!(Layout::new(&outputs, &output).is_ok());
    /// let err = Layout::new(&outputs, &output[..2]).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "vLLM's EngineCoreOutput has no field 'finish_reason' (its fields: request_id, new_token_ids)"
    /// );
    /// ```
    pub fn new<S: AsRef<str>>(
        engine_core_outputs: &[S],
        engine_core_output: &[S],
    ) -> std::result::Result<Layout, LayoutError> {
        for (structure, names) in [
            ("EngineCoreOutputs", engine_core_outputs),
            ("EngineCoreOutput", engine_core_output),
        ] {
            if names.len() > MAX_LAYOUT_FIELDS {
                return Err(LayoutError::TooMany {
                    structure,
                    count: names.len(),
                });
            }
            let required = REQUIRED_FIELDS
                .iter()
                .find(|(s, _)| *s == structure)
                .map_or(&[][..], |(_, f)| f);
            for field in required {
                if !names.iter().any(|n| n.as_ref() == *field) {
                    return Err(LayoutError::Missing {
                        structure,
                        field,
                        fields: names
                            .iter()
                            .map(|n| crate::protocol::shown(n.as_ref()))
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            }
        }
        let outputs = engine_core_outputs
            .iter()
            .map(|n| match n.as_ref() {
                "engine_index" => OutputsField::EngineIndex,
                "outputs" => OutputsField::Outputs,
                "scheduler_stats" => OutputsField::SchedulerStats,
                "timestamp" => OutputsField::Timestamp,
                _ => OutputsField::Other,
            })
            .collect();
        let output = engine_core_output
            .iter()
            .map(|n| match n.as_ref() {
                "request_id" => OutputField::RequestId,
                "new_token_ids" => OutputField::NewTokenIds,
                "finish_reason" => OutputField::FinishReason,
                "events" => OutputField::Events,
                "prefill_stats" => OutputField::PrefillStats,
                _ => OutputField::Other,
            })
            .collect();
        Ok(Layout { outputs, output })
    }
}

/// How the tap's engine is set up, for the records a frame becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineSetup<'a> {
    /// The served model name (label `model_name`).
    pub model_name: &'a str,
    /// The engine consumes KV from a connector: its scheduler stats carry
    /// the KV fetch stages (vLLM has `vllm:num_requests_kv_fetch_by_stage`
    /// on KV consumers only).
    pub kv_consumer: bool,
    /// LoRA is enabled: the scheduler stats carry the adapters.
    pub lora_enabled: bool,
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The step's outputs (possibly none: a utility call's answer).
    pub batch: OutputBatch,
    /// The step's scheduler stats, when the engine logs stats.
    pub scheduler_stats: Option<SchedulerStats>,
    /// The outputs left out, each with why (`outputs[i]: ...`): an output
    /// whose value is whole but not one vLLM sends (no request id, an
    /// unknown event type) is rejected alone; the others are applied.
    pub skipped: Vec<MsgpackError>,
}

/// The bounds a frame is decoded within, besides its memory budget
/// ([`crate::sources::budget`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameLimits {
    /// Most outputs in one frame (`--max-outputs-per-batch`, as for an
    /// `outputs` record).
    pub max_outputs: usize,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            max_outputs: budget::DEFAULT_MAX_OUTPUTS_PER_BATCH,
        }
    }
}

/// The fewest bytes an `EngineCoreOutput` that decodes takes: an array
/// holding a one-character request id (`[\"x\"]`).
const MIN_OUTPUT_BYTES: u64 = 3;
/// The fewest bytes an `EngineCoreEvent` that decodes takes: `{"type": 1}`.
const MIN_EVENT_BYTES: u64 = 7;

type Result<T> = std::result::Result<T, MsgpackError>;

/// Decodes one frame sent at `sent_at` (wall clock, seconds), within
/// `limits` and the frame's memory budget (2 × its size + 1 MiB: see
/// [`crate::sources::budget`]), charged before each allocation.
pub fn decode(
    bytes: &[u8],
    layout: &Layout,
    setup: EngineSetup<'_>,
    sent_at: f64,
    limits: &FrameLimits,
) -> Result<Frame> {
    let mut r = Reader::with_budget(
        bytes,
        budget::share(bytes.len(), budget::FRAME_PER_BYTE, budget::FRAME_BASE),
    );
    let fields = r.array()?;
    if fields > layout.outputs.len() {
        return Err(r.error(format!(
            "EngineCoreOutputs has {fields} fields, the layout names {}",
            layout.outputs.len()
        )));
    }
    let mut batch = OutputBatch {
        engine: 0,
        timestamp: 0.0,
        received_at: sent_at,
        outputs: Vec::new(),
    };
    let mut stats = None;
    let mut skipped = Vec::new();
    for field in &layout.outputs[..fields] {
        match field {
            OutputsField::EngineIndex => {
                batch.engine = count_u32(&mut r).map_err(|e| e.within("engine_index"))?;
            }
            OutputsField::Outputs => {
                let n = r.array_of(MIN_OUTPUT_BYTES)?;
                if n > limits.max_outputs {
                    return Err(r.error(format!(
                        "{n} outputs in one frame, more than {} (--max-outputs-per-batch)",
                        limits.max_outputs
                    )));
                }
                r.charge_for::<EngineCoreOutput>(n)?;
                batch.outputs.reserve_exact(n);
                for i in 0..n {
                    let start = r.offset();
                    match output(&mut r, layout) {
                        Ok(output) => batch.outputs.push(output),
                        // A value that is whole is left out alone; one
                        // that is not (or a frame past its budget) cannot
                        // be read on.
                        Err(e) if !r.over_budget() => {
                            let e = e.within(&format!("outputs[{i}]"));
                            r.seek(start);
                            r.skip().map_err(|_| e.clone())?;
                            r.charge(std::mem::size_of::<MsgpackError>() + e.what.len())?;
                            skipped.push(e);
                        }
                        Err(e) => return Err(e.within(&format!("outputs[{i}]"))),
                    }
                }
            }
            OutputsField::SchedulerStats => {
                if !r.nil()? {
                    stats = Some(
                        scheduler_stats(&mut r, setup, sent_at)
                            .map_err(|e| e.within("scheduler_stats"))?,
                    );
                }
            }
            OutputsField::Timestamp => batch.timestamp = r.float()?,
            OutputsField::Other => r.skip()?,
        }
    }
    if !r.at_end() {
        return Err(r.error("bytes after the end of EngineCoreOutputs"));
    }
    if let Some(stats) = &mut stats {
        stats.engine = batch.engine;
    }
    Ok(Frame {
        batch,
        scheduler_stats: stats,
        skipped,
    })
}

fn output(r: &mut Reader<'_>, layout: &Layout) -> Result<EngineCoreOutput> {
    let fields = r.array()?;
    if fields > layout.output.len() {
        return Err(r.error(format!(
            "EngineCoreOutput has {fields} fields, the layout names {}",
            layout.output.len()
        )));
    }
    let mut out = EngineCoreOutput::default();
    for field in &layout.output[..fields] {
        match field {
            OutputField::RequestId => {
                let id = r.str()?;
                r.charge(id.len())?;
                out.request_id = id.to_owned();
            }
            OutputField::NewTokenIds => {
                let n = r.array()?;
                r.charge_for::<u32>(n)?;
                out.new_token_ids.reserve_exact(n);
                for _ in 0..n {
                    // Only their number is used; an id beyond u32 is kept
                    // as its low bits rather than failing the output.
                    out.new_token_ids.push(r.count()? as u32);
                }
            }
            OutputField::FinishReason => {
                if !r.nil()? {
                    let at = r.offset();
                    let value = r.int()?;
                    out.finish_reason = Some(
                        usize::try_from(value)
                            .ok()
                            .and_then(|i| FinishReason::ALL.get(i).copied())
                            .ok_or_else(|| MsgpackError {
                                offset: at,
                                what: format!("unknown finish reason {value}"),
                            })?,
                    );
                }
            }
            OutputField::Events => {
                if !r.nil()? {
                    let n = r.array_of(MIN_EVENT_BYTES)?;
                    r.charge_for::<EngineCoreEvent>(n)?;
                    out.events.reserve_exact(n);
                    for _ in 0..n {
                        out.events.push(event(r)?);
                    }
                }
            }
            OutputField::PrefillStats => {
                if !r.nil()? {
                    out.prefill_stats = Some(prefill_stats(r)?);
                }
            }
            OutputField::Other => r.skip()?,
        }
    }
    if out.request_id.is_empty() {
        return Err(r.error("an output without a request_id"));
    }
    Ok(out)
}

/// Reads a map's entries (string keys: field names, or enum values written
/// as strings), calling `field` with each key; `field` reads the value of a
/// key it knows and says whether it did (the rest are skipped).
fn map_fields<'a>(
    r: &mut Reader<'a>,
    mut field: impl FnMut(&str, &mut Reader<'a>) -> Result<bool>,
) -> Result<()> {
    let n = r.map()?;
    for _ in 0..n {
        let key = r.str()?;
        let at = r.offset();
        if !field(key, r).map_err(|e| MsgpackError {
            offset: e.offset.max(at),
            ..e.within(key)
        })? {
            r.skip()?;
        }
    }
    Ok(())
}

fn event(r: &mut Reader<'_>) -> Result<EngineCoreEvent> {
    let mut kind = None;
    let mut timestamp = 0.0;
    let mut reason = None;
    map_fields(r, |key, r| {
        match key {
            "type" => {
                let at = r.offset();
                kind = Some(match r.int()? {
                    1 => EventType::Queued,
                    2 => EventType::Scheduled,
                    3 => EventType::Preempted,
                    other => {
                        return Err(MsgpackError {
                            offset: at,
                            what: format!("unknown event type {other}"),
                        })
                    }
                });
            }
            "timestamp" => timestamp = r.float()?,
            "reason" => {
                if !r.nil()? {
                    let at = r.offset();
                    let name = r.str()?;
                    reason = Some(match name {
                        "kv_full" => PreemptionReason::KvFull,
                        "priority" => PreemptionReason::Priority,
                        "prefix_cache_reset" => PreemptionReason::PrefixCacheReset,
                        other => {
                            return Err(MsgpackError {
                                offset: at,
                                what: format!(
                                    "unknown preemption reason '{}'",
                                    crate::protocol::shown(other)
                                ),
                            })
                        }
                    });
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let kind = kind.ok_or_else(|| r.error("an event without a type"))?;
    Ok(EngineCoreEvent {
        kind,
        timestamp,
        reason,
    })
}

fn prefill_stats(r: &mut Reader<'_>) -> Result<PrefillStats> {
    let mut p = PrefillStats::default();
    map_fields(r, |key, r| {
        let slot = match key {
            "num_prompt_tokens" => &mut p.num_prompt_tokens,
            "num_computed_tokens" => &mut p.num_computed_tokens,
            "num_cached_tokens" => &mut p.num_cached_tokens,
            "num_local_cached_tokens" => &mut p.num_local_cached_tokens,
            "num_external_cached_tokens" => &mut p.num_external_cached_tokens,
            _ => return Ok(false),
        };
        *slot = count_u32(r)?;
        Ok(true)
    })?;
    Ok(p)
}

fn count_u32(r: &mut Reader<'_>) -> Result<u32> {
    let at = r.offset();
    let n = r.count()?;
    u32::try_from(n).map_err(|_| MsgpackError {
        offset: at,
        what: format!("{n} is beyond 2^32"),
    })
}

/// vLLM's `PrefixCacheStats`: `(queries, hits, hits by external source)`.
fn cache_stats(r: &mut Reader<'_>) -> Result<(u64, u64, Option<ExternalHitsBySource>)> {
    let (mut queries, mut hits, mut by_source) = (0, 0, None);
    map_fields(r, |key, r| {
        match key {
            "queries" => queries = r.count()?,
            "hits" => hits = r.count()?,
            "hits_by_source" => {
                let mut split = ExternalHitsBySource::default();
                let mut any = false;
                map_fields(r, |source, r| {
                    let tokens = r.count()?;
                    any = true;
                    match source {
                        // The local prefix cache: prefix_cache_hits already.
                        "device" => {}
                        "host" => split.host = split.host.saturating_add(tokens),
                        "p2p" => split.p2p = split.p2p.saturating_add(tokens),
                        "disk" => split.disk = split.disk.saturating_add(tokens),
                        _ => {
                            split.external_unspecified =
                                split.external_unspecified.saturating_add(tokens)
                        }
                    }
                    Ok(true)
                })?;
                if any {
                    by_source = Some(split);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((queries, hits, by_source))
}

fn scheduler_stats(
    r: &mut Reader<'_>,
    setup: EngineSetup<'_>,
    sent_at: f64,
) -> Result<SchedulerStats> {
    r.charge(setup.model_name.len())?;
    let mut s = SchedulerStats {
        model_name: setup.model_name.to_owned(),
        received_at: Some(sent_at),
        ..SchedulerStats::default()
    };
    let mut waiting_not_deferred = 0u64;
    map_fields(r, |key, r| {
        match key {
            "num_running_reqs" => s.num_running_reqs = r.count()?,
            "num_waiting_reqs" => waiting_not_deferred = r.count()?,
            "num_skipped_waiting_reqs" => s.num_skipped_waiting_reqs = r.count()?,
            "kv_cache_usage" => s.kv_cache_usage = r.float()?,
            "prefix_cache_stats" => {
                let (queries, hits, _) = cache_stats(r)?;
                s.prefix_cache_queries = queries;
                s.prefix_cache_hits = hits;
            }
            "connector_prefix_cache_stats" => {
                if !r.nil()? {
                    let (queries, hits, by_source) = cache_stats(r)?;
                    s.external_prefix_cache_queries = queries;
                    s.external_prefix_cache_hits = hits;
                    s.external_prefix_cache_hits_by_source = by_source;
                }
            }
            "num_kv_fetch_reqs_by_stage" => {
                let mut stages = KvFetchStages::default();
                let mut any = false;
                map_fields(r, |stage, r| {
                    let n = r.count()?;
                    any = true;
                    match stage {
                        "waiting_to_start" => stages.waiting_to_start = n,
                        "in_progress" => stages.in_progress = n,
                        "completed_waiting" => stages.completed_waiting = n,
                        _ => {}
                    }
                    Ok(true)
                })?;
                if setup.kv_consumer && any {
                    s.num_kv_fetch_reqs_by_stage = Some(stages);
                }
            }
            "kv_cache_eviction_events" => {
                let n = r.array()?;
                r.charge_for::<KvCacheEvictionEvent>(n)?;
                s.kv_cache_eviction_events.reserve_exact(n);
                for _ in 0..n {
                    let mut e = KvCacheEvictionEvent::default();
                    map_fields(r, |key, r| {
                        match key {
                            "lifetime_seconds" => e.lifetime_seconds = r.float()?,
                            "idle_seconds" => e.idle_seconds = r.float()?,
                            "reuse_gaps_seconds" => {
                                let gaps = r.array()?;
                                r.charge_for::<f64>(gaps)?;
                                e.reuse_gaps_seconds.reserve_exact(gaps);
                                for _ in 0..gaps {
                                    e.reuse_gaps_seconds.push(r.float()?);
                                }
                            }
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                    s.kv_cache_eviction_events.push(e);
                }
            }
            "perf_stats" => {
                if !r.nil()? {
                    let mut p = PerfStats::default();
                    map_fields(r, |key, r| {
                        match key {
                            "num_flops_per_gpu" => p.num_flops_per_gpu = r.float()?,
                            "num_read_bytes_per_gpu" => p.num_read_bytes_per_gpu = r.float()?,
                            "num_write_bytes_per_gpu" => p.num_write_bytes_per_gpu = r.float()?,
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                    s.perf_stats = Some(p);
                }
            }
            "spec_decoding_stats" => {
                if !r.nil()? {
                    let mut d = SpecDecodingStats::default();
                    map_fields(r, |key, r| {
                        match key {
                            "num_drafts" => d.num_drafts = r.count()?,
                            "num_draft_tokens" => d.num_draft_tokens = r.count()?,
                            "num_accepted_tokens" => d.num_accepted_tokens = r.count()?,
                            "num_accepted_tokens_per_pos" => {
                                let n = r.array()?;
                                r.charge_for::<u64>(n)?;
                                d.num_accepted_tokens_per_pos.reserve_exact(n);
                                for _ in 0..n {
                                    d.num_accepted_tokens_per_pos.push(r.count()?);
                                }
                            }
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                    s.spec_decoding = Some(d);
                }
            }
            "running_lora_adapters" | "waiting_lora_adapters" => {
                // vLLM's `dict[str, int]`: the names are kept, the counts not.
                let n = r.map()?;
                r.charge_for::<String>(n)?;
                let mut names = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = r.str()?;
                    r.skip()?;
                    r.charge(name.len())?;
                    names.push(name.to_owned());
                }
                if setup.lora_enabled {
                    if key == "running_lora_adapters" {
                        s.running_lora_adapters = Some(names);
                    } else {
                        s.waiting_lora_adapters = Some(names);
                    }
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    // vLLM 0.33 counts deferred requests apart from num_waiting_reqs;
    // vllm:num_requests_waiting is their sum (as the plugin path sends it).
    s.num_waiting_reqs = waiting_not_deferred.saturating_add(s.num_skipped_waiting_reqs);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn str(out: &mut Vec<u8>, s: &str) {
        out.push(0xa0 | s.len() as u8);
        out.extend_from_slice(s.as_bytes());
    }

    fn layout() -> Layout {
        Layout::new(
            &["engine_index", "outputs", "scheduler_stats", "timestamp"],
            &["request_id", "new_token_ids", "finish_reason", "events"],
        )
        .expect("the fields the decoder needs")
    }

    /// `EngineCoreOutputs(0, outputs, scheduler_stats, 1.0)`.
    fn frame(outputs: &[u8], stats: &[u8]) -> Vec<u8> {
        let mut f = vec![0x94, 0x00];
        f.extend_from_slice(outputs);
        f.extend_from_slice(stats);
        f.extend_from_slice(&[0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0]);
        f
    }

    fn decoded(bytes: &[u8]) -> Result<Frame> {
        decode(
            bytes,
            &layout(),
            EngineSetup::default(),
            1.0,
            &FrameLimits::default(),
        )
    }

    #[test]
    fn hits_by_source_add_up_without_overflowing() {
        // {"connector_prefix_cache_stats": {"hits_by_source":
        //   {"host": 2^64-1, "host": 2^64-1}}}
        let mut stats = vec![0x81];
        str(&mut stats, "connector_prefix_cache_stats");
        stats.push(0x81);
        str(&mut stats, "hits_by_source");
        stats.push(0x82);
        for _ in 0..2 {
            str(&mut stats, "host");
            stats.push(0xcf);
            stats.extend_from_slice(&u64::MAX.to_be_bytes());
        }
        let frame = decoded(&frame(&[0x90], &stats)).expect("decodes");
        let by_source = frame
            .scheduler_stats
            .and_then(|s| s.external_prefix_cache_hits_by_source)
            .expect("hits by source");
        assert_eq!(by_source.host, u64::MAX);
    }

    #[test]
    fn a_bad_output_is_left_out_and_its_neighbours_kept() {
        // [["a", [1]], ["b", [1], 9], ["c", [1, 2]]]: finish reason 9 does
        // not exist.
        let mut outputs = vec![0x93];
        for (id, tail) in [("a", &[0x91, 0x01][..]), ("b", &[0x91, 0x01, 0x09][..])] {
            outputs.push(if id == "a" { 0x92 } else { 0x93 });
            str(&mut outputs, id);
            outputs.extend_from_slice(tail);
        }
        outputs.push(0x92);
        str(&mut outputs, "c");
        outputs.extend_from_slice(&[0x92, 0x01, 0x02]);
        let frame = decoded(&frame(&outputs, &[0xc0])).expect("decodes");
        let ids: Vec<&str> = frame
            .batch
            .outputs
            .iter()
            .map(|o| o.request_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "c"]);
        assert_eq!(frame.skipped.len(), 1);
        assert_eq!(
            frame.skipped[0].to_string(),
            "at byte 13: outputs[1]: unknown finish reason 9"
        );
    }

    #[test]
    fn claimed_counts_and_the_budget_are_checked_before_reserving() {
        // 2^32-1 outputs claimed in a few bytes.
        let err = decoded(&frame(&[0xdd, 0xff, 0xff, 0xff, 0xff], &[0xc0])).unwrap_err();
        assert!(err.what.contains("cannot fit"), "{err}");
        // More outputs than --max-outputs-per-batch: refused before any is
        // read.
        let limits = FrameLimits { max_outputs: 2 };
        let mut outputs = vec![0x93];
        for _ in 0..3 {
            outputs.push(0x91);
            str(&mut outputs, "x");
        }
        let err = decode(
            &frame(&outputs, &[0xc0]),
            &layout(),
            EngineSetup::default(),
            1.0,
            &limits,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "at byte 3: 3 outputs in one frame, more than 2 (--max-outputs-per-batch)"
        );
        // 100,000 one-byte token ids (400 KB decoded) in a 100 KB frame:
        // within 2 x 100 KB + 1 MiB. A million (4 MB) in 1 MB: not.
        for (tokens, fits) in [(100_000u32, true), (1_000_000, false)] {
            let mut outputs = vec![0x91, 0x92];
            str(&mut outputs, "x");
            outputs.push(0xdd);
            outputs.extend_from_slice(&tokens.to_be_bytes());
            outputs.extend(std::iter::repeat_n(0x01, tokens as usize));
            let result = decoded(&frame(&outputs, &[0xc0]));
            assert_eq!(result.is_ok(), fits, "{tokens} tokens: {result:?}");
        }
    }
}
