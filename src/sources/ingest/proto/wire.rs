//! The field copies between the wire types and the records, each message's
//! fields declared once.
//!
//! Messages whose every field is copied as it is, and the enums, are
//! converted by `mirrored.rs`, which build.rs generates from the proto (its
//! `MIRRORED_MESSAGES`), so a new field of theirs needs nothing here: only
//! the record's field of the same name. This file holds the traits those
//! conversions implement, the conversions of the types the wire and the
//! records share, and the messages some of whose fields follow a rule (a
//! required id, a default, an enum that may be unset or unknown): `mirror!`
//! writes both directions of such a message from one list of its fields (a
//! field the list leaves out is a compile error on both sides), and the
//! fields named after `by rule` are taken from the caller by
//! `from_wire_with`/`to_wire_with`; [`super`] writes the rules by hand.

use std::collections::{BTreeMap, HashMap};

use super::pb;
use crate::protocol::{
    EngineCoreEvent, EngineCoreOutput, FinishReason, FinishedRequest, GenAiOperation,
    IterationStats, KvCacheEvictionEvent, Operation, OperationKind, OutputBatch, PromptTokenStats,
    RequestStart, SleepState,
};

/// A record value read off the wire.
pub(super) trait FromWire<W> {
    /// The record's value of `wire`.
    fn from_wire(wire: W) -> Self;
}

/// A record value written to the wire.
pub(super) trait ToWire<W> {
    /// The wire's value of `self`.
    fn to_wire(&self) -> W;
}

/// Types the wire and the records share.
macro_rules! same_on_the_wire {
    (copy: $($copy:ty),*; owned: $($owned:ty),*) => {
        $(
            impl FromWire<$copy> for $copy {
                fn from_wire(wire: $copy) -> Self {
                    wire
                }
            }
            impl ToWire<$copy> for $copy {
                fn to_wire(&self) -> $copy {
                    *self
                }
            }
        )*
        $(
            impl FromWire<$owned> for $owned {
                fn from_wire(wire: $owned) -> Self {
                    wire
                }
            }
            impl ToWire<$owned> for $owned {
                fn to_wire(&self) -> $owned {
                    self.clone()
                }
            }
        )*
    };
}

same_on_the_wire!(copy: bool, u32, u64, i64, f64; owned: String, Vec<u32>, Vec<u64>, Vec<f64>, Vec<String>);

impl<A: FromWire<B>, B> FromWire<Option<B>> for Option<A> {
    fn from_wire(wire: Option<B>) -> Self {
        wire.map(A::from_wire)
    }
}

impl<A: ToWire<B>, B> ToWire<Option<B>> for Option<A> {
    fn to_wire(&self) -> Option<B> {
        self.as_ref().map(A::to_wire)
    }
}

/// Lists that are a message of their own on the wire, so that "absent" and
/// "empty" differ: the observations of a histogram, the names of adapters.
macro_rules! list_message {
    ($($wire:ident.$field:ident: $item:ty),*) => {$(
        impl FromWire<pb::$wire> for Vec<$item> {
            fn from_wire(wire: pb::$wire) -> Self {
                wire.$field
            }
        }
        impl ToWire<pb::$wire> for Vec<$item> {
            fn to_wire(&self) -> pb::$wire {
                pb::$wire { $field: self.clone() }
            }
        }
    )*};
}

list_message!(Observations.values: f64, AdapterList.names: String);

/// Protobuf maps are unordered; the record keeps its keys sorted.
impl FromWire<HashMap<String, String>> for BTreeMap<String, String> {
    fn from_wire(wire: HashMap<String, String>) -> Self {
        wire.into_iter().collect()
    }
}

impl ToWire<HashMap<String, String>> for BTreeMap<String, String> {
    fn to_wire(&self) -> HashMap<String, String> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

impl FromWire<Vec<pb::KvCacheEvictionEvent>> for Vec<KvCacheEvictionEvent> {
    fn from_wire(wire: Vec<pb::KvCacheEvictionEvent>) -> Self {
        wire.into_iter().map(FromWire::from_wire).collect()
    }
}

impl ToWire<Vec<pb::KvCacheEvictionEvent>> for Vec<KvCacheEvictionEvent> {
    fn to_wire(&self) -> Vec<pb::KvCacheEvictionEvent> {
        self.iter().map(ToWire::to_wire).collect()
    }
}

/// Both directions of one message whose fields named after `by rule`
/// are given by the caller, from one list of the others.
macro_rules! mirror {
    (
        $ours:ident <=> $wire:ident { $($field:ident),* $(,)? }
        by rule { $($rule:ident: $ours_ty:ty => $wire_ty:ty),* $(,)? }
    ) => {
        impl $ours {
            /// The record of `wire`, its rule fields given.
            pub(super) fn from_wire_with(wire: pb::$wire, $($rule: $ours_ty),*) -> Self {
                $ours { $($field: FromWire::from_wire(wire.$field),)* $($rule,)* }
            }

            /// The wire message of `self`, its rule fields given.
            pub(super) fn to_wire_with(&self, $($rule: $wire_ty),*) -> pb::$wire {
                pb::$wire { $($field: self.$field.to_wire(),)* $($rule,)* }
            }
        }
    };
}

mirror!(RequestStart <=> RequestStarted {
    model_name, engine, arrival_time, prompt_len, max_tokens, stop_strings, priority,
} by rule {
    request_id: String => String,
    n: u32 => Option<u32>,
    traceparent: Option<String> => Option<String>,
    operation_name: Option<GenAiOperation> => Option<String>,
    lora_name: Option<String> => Option<String>,
});
mirror!(OutputBatch <=> OutputBatch { engine, timestamp } by rule {
    received_at: f64 => Option<f64>,
    outputs: Vec<EngineCoreOutput> => Vec<pb::EngineCoreOutput>,
});
mirror!(EngineCoreOutput <=> EngineCoreOutput { new_token_ids, prefill_stats } by rule {
    request_id: String => String,
    events: Vec<EngineCoreEvent> => Vec<pb::EngineCoreEvent>,
    finish_reason: Option<FinishReason> => i32,
});
mirror!(SleepState <=> SleepState { model_name, engine } by rule { level: u8 => u32 });
mirror!(Operation <=> Operation { duration } by rule { operation: OperationKind => i32 });

mirror!(IterationStats <=> IterationStats {
    model_name, engine, received_at, num_generation_tokens, num_preempted_reqs,
    max_num_generation_tokens_iter, n_params_iter, time_to_first_tokens_iter,
    inter_token_latencies_iter,
} by rule {
    prompt_token_stats: PromptTokenStats => Option<pb::PromptTokenStats>,
    finished_requests: Vec<FinishedRequest> => Vec<pb::FinishedRequest>,
});
mirror!(FinishedRequest <=> FinishedRequest {
    request_id, e2e_latency, queued_time, prefill_time, inference_time, decode_time,
    mean_time_per_output_token, num_prompt_tokens, num_generation_tokens, num_preemptions,
    num_cached_tokens, max_tokens_param,
} by rule { finish_reason: FinishReason => i32 });
