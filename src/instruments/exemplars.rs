//! Exemplars: per bucket of each per-request histogram (and per outcome of
//! the SLO counter), the latest request that landed there, linked to that
//! request's `llm_request` span.
//!
//! The OpenTelemetry Rust SDK (0.33) keeps no exemplars: its data points'
//! exemplar lists are always empty (opentelemetry-rust #3369). They are
//! kept here, beside the SDK's aggregation, never instead of it: the SDK
//! still counts every observation, and `/metrics` writes these next to its
//! buckets (OpenMetrics only; docs/SEMANTICS.md, "Exemplars").
//!
//! Which families carry exemplars, and which value of a request they show,
//! is the [`Exemplar`](crate::catalog::request::Exemplar) column of the
//! per-request table.
//!
//! **Cost.** A request's end does not look for its buckets: it copies its
//! values into a ring of [`RING_CAPACITY`] ended requests of its label set
//! (under that label set's lock, which only a scrape also takes). Placing
//! them in their buckets waits for the next scrape (or
//! [`Exemplars::place_pending`]), which places them oldest first, so every
//! bucket ends up holding its latest request, as if each had been placed at
//! once. A ring that fills before that places its oldest request to make
//! room: nothing is lost, the recording thread pays for the placement.
//!
//! **Memory** per label set: the ring, `RING_CAPACITY ×
//! size_of::<Ended>()`, plus one slot (`size_of::<Option<Exemplar>>()`)
//! per bucket (`+Inf` included) of every family with exemplars and per SLO
//! outcome; [`Exemplars::bytes_per_label_set`] computes it for a
//! configuration (docs/PERFORMANCE.md gives the figures).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use opentelemetry::trace::{SpanId, TraceId};

use super::config::InstrumentsConfig;
use super::handle_cache::LabelSetId;
use super::slo::SloOutcome;
use super::views::explicit_boundaries;
use crate::catalog::request::{Exemplar as ExemplarColumn, TerminalValues, REQUEST_HISTOGRAMS};
use crate::catalog::MetricDef;

/// Ended requests a label set keeps for placement at the next scrape (a
/// power of two: a position in the ring is a mask away).
pub const RING_CAPACITY: usize = 128;
const _: () = assert!(RING_CAPACITY.is_power_of_two());

/// The trace and span a request's exemplars point at: its `llm_request`
/// span, or the caller's span when no span is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceLink {
    /// The trace.
    pub trace_id: TraceId,
    /// The span in it.
    pub span_id: SpanId,
}

/// One exemplar: a request that landed in a bucket (or was counted).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exemplar {
    /// The request's span.
    pub link: TraceLink,
    /// The value observed (1 for a counter).
    pub value: f64,
    /// When it was observed, seconds since the Unix epoch.
    pub timestamp: f64,
}

/// One ended request, as its end left it.
#[derive(Debug, Clone, Copy)]
struct Ended {
    link: TraceLink,
    /// When it ended; it arrived `values.e2e` before.
    end: f64,
    values: TerminalValues,
    slo: Option<SloOutcome>,
}

/// An empty place of the ring.
const UNUSED: Ended = Ended {
    link: TraceLink {
        trace_id: TraceId::INVALID,
        span_id: SpanId::INVALID,
    },
    end: 0.0,
    values: TerminalValues {
        prompt_tokens: 0,
        cached_tokens: 0,
        generation_tokens: 0,
        max_num_generation_tokens: None,
        params_n: None,
        params_max_tokens: None,
        num_preemptions: 0,
        e2e: 0.0,
        queue: 0.0,
        prefill: 0.0,
        decode: 0.0,
        inference: 0.0,
        time_per_output_token: 0.0,
        time_to_first_token: None,
    },
    slo: None,
};

/// Where each family's slots are in a label set's slot list.
#[derive(Debug)]
struct Layout {
    /// Per [`REQUEST_HISTOGRAMS`] row: its first slot and its bounds, for a
    /// row with exemplars.
    rows: Vec<Option<(usize, Vec<f64>)>>,
    /// The first of the SLO outcomes' slots, with `--slo`.
    slo: Option<usize>,
    slots: usize,
}

impl Layout {
    fn new(config: &InstrumentsConfig) -> Self {
        let mut slots = 0;
        let rows = REQUEST_HISTOGRAMS
            .iter()
            .map(|row| {
                if row.exemplar == ExemplarColumn::No {
                    return None;
                }
                let bounds = explicit_boundaries(row.def, config);
                let first = slots;
                slots += bounds.len() + 1;
                Some((first, bounds))
            })
            .collect();
        let slo = config.slo.is_some().then(|| {
            let first = slots;
            slots += SloOutcome::ALL.len();
            first
        });
        Layout { rows, slo, slots }
    }

    /// Puts `ended` in the slot of each bucket it landed in.
    fn place(&self, slots: &mut [Option<Exemplar>], ended: &Ended) {
        for (row, place) in REQUEST_HISTOGRAMS.iter().zip(&self.rows) {
            let Some((first, bounds)) = place else {
                continue;
            };
            let Some((value, at_first_token)) = row.exemplar_value(&ended.values) else {
                continue;
            };
            // A bucket holds what is at most its bound (`le`).
            let bucket = bounds.partition_point(|bound| *bound < value);
            // The first token came `value` after the arrival.
            let timestamp = match at_first_token {
                true => ended.end - ended.values.e2e + value,
                false => ended.end,
            };
            keep_latest(
                &mut slots[first + bucket],
                Exemplar {
                    link: ended.link,
                    value,
                    timestamp,
                },
            );
        }
        if let (Some(first), Some(outcome)) = (self.slo, ended.slo) {
            let exemplar = Exemplar {
                link: ended.link,
                value: 1.0,
                timestamp: ended.end,
            };
            keep_latest(&mut slots[first + outcome as usize], exemplar);
        }
    }
}

/// Puts `exemplar` in `slot` when it was observed in a later millisecond
/// than the one the slot holds. Requests are placed in the order they
/// ended, and one that ended later may have been observed earlier (its
/// first token). Prometheus keeps exemplar times in milliseconds and
/// refuses one that is not later than its series' previous one: so a
/// series' exemplars only move forward, and of several observed within one
/// millisecond, the first placed stays.
fn keep_latest(slot: &mut Option<Exemplar>, exemplar: Exemplar) {
    if slot.is_none_or(|held| millis(held.timestamp) < millis(exemplar.timestamp)) {
        *slot = Some(exemplar);
    }
}

/// A time in whole milliseconds, as Prometheus reads an exemplar's.
fn millis(seconds: f64) -> i64 {
    (seconds * 1000.0) as i64
}

struct State {
    /// Ended requests not yet placed: `len` of them from `head` on, oldest
    /// first, wrapping around.
    ring: [Ended; RING_CAPACITY],
    head: usize,
    len: usize,
    slots: Vec<Option<Exemplar>>,
    /// The first request placed with the most preemptions, and how many.
    most_preempted: Option<(u64, TraceLink)>,
}

impl State {
    /// Takes the oldest pending request out of the ring.
    fn pop_oldest(&mut self) -> Option<Ended> {
        if self.len == 0 {
            return None;
        }
        let oldest = self.ring[self.head];
        self.head = (self.head + 1) & (RING_CAPACITY - 1);
        self.len -= 1;
        Some(oldest)
    }

    /// Places `ended` in its buckets and notes it when it is the most
    /// preempted yet.
    fn place(&mut self, layout: &Layout, ended: &Ended) {
        layout.place(&mut self.slots, ended);
        let preemptions = ended.values.num_preemptions;
        if self
            .most_preempted
            .is_none_or(|(most, _)| preemptions > most)
        {
            self.most_preempted = Some((preemptions, ended.link));
        }
    }
}

/// The exemplars of one label set.
pub(crate) struct LabelSetExemplars {
    layout: Arc<Layout>,
    state: Mutex<State>,
}

impl LabelSetExemplars {
    /// Keeps an ended request for placement: `values` as the histograms
    /// observed them, the request's end (seconds since the epoch; its
    /// arrival is `values.e2e` before) and its SLO outcome with `--slo`.
    #[inline]
    pub(crate) fn keep(
        &self,
        link: &TraceLink,
        end: f64,
        values: &TerminalValues,
        slo: Option<SloOutcome>,
    ) {
        let mut state = self.state.lock();
        if state.len == RING_CAPACITY {
            self.make_room(&mut state);
        }
        let at = (state.head + state.len) & (RING_CAPACITY - 1);
        state.len += 1;
        // Field by field: each value is copied once, straight into the ring.
        let slot = &mut state.ring[at];
        // Field by field: two instructions fewer per request than the
        // link copied whole (callgrind).
        slot.link.trace_id = link.trace_id;
        slot.link.span_id = link.span_id;
        slot.end = end;
        slot.values = *values;
        slot.slo = slo;
    }

    /// Places the oldest pending request: the ring is full.
    #[cold]
    #[inline(never)]
    fn make_room(&self, state: &mut State) {
        if let Some(oldest) = state.pop_oldest() {
            state.place(&self.layout, &oldest);
        }
    }

    /// Places every pending request, oldest first; returns the state, still
    /// locked, for what the caller reads of it.
    fn placed(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock();
        while let Some(ended) = state.pop_oldest() {
            state.place(&self.layout, &ended);
        }
        state
    }
}

/// The label set a [`LabelSetExemplars`] belongs to: `model_name`,
/// `engine` and the class labels (`lora_name`, `priority`; empty when the
/// label set has none), or the overflow label set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key(Option<(String, u32, String, String)>);

/// Slots by `lora_name`, then `priority` (empty: no such label).
type ByClass = HashMap<String, HashMap<String, Vec<Option<Exemplar>>>>;

struct Store {
    layout: Arc<Layout>,
    sets: Mutex<Vec<(Key, Arc<LabelSetExemplars>)>>,
}

/// The exemplars of every label set of one [`Instruments`](super::Instruments)
/// (with exemplars on). Cloning shares them.
#[derive(Clone)]
pub struct Exemplars {
    store: Arc<Store>,
}

impl std::fmt::Debug for Exemplars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exemplars")
            .field("slots_per_label_set", &self.store.layout.slots)
            .finish_non_exhaustive()
    }
}

impl Exemplars {
    pub(crate) fn new(config: &InstrumentsConfig) -> Self {
        Exemplars {
            store: Arc::new(Store {
                layout: Arc::new(Layout::new(config)),
                sets: Mutex::default(),
            }),
        }
    }

    /// The exemplars of a label set being bound (`None`: the overflow one):
    /// the ring and the slots are allocated here, once.
    pub(crate) fn label_set(&self, label_set: Option<LabelSetId<'_>>) -> Arc<LabelSetExemplars> {
        let layout = Arc::clone(&self.store.layout);
        let set = Arc::new(LabelSetExemplars {
            state: Mutex::new(State {
                ring: [UNUSED; RING_CAPACITY],
                head: 0,
                len: 0,
                slots: vec![None; layout.slots],
                most_preempted: None,
            }),
            layout,
        });
        let key = Key(label_set.map(|id| {
            let class = |value: Option<&str>| value.unwrap_or_default().to_owned();
            let (lora_name, priority) = (class(id.lora_name), class(id.priority));
            (id.model_name.to_owned(), id.engine, lora_name, priority)
        }));
        self.store.sets.lock().push((key, Arc::clone(&set)));
        set
    }

    /// Places every label set's pending requests now (a scrape does it
    /// too): a host that scrapes rarely calls it now and then, so that a
    /// busy label set's ring never fills on the recording thread.
    pub fn place_pending(&self) {
        for (_, set) in self.sets() {
            drop(set.placed());
        }
    }

    /// The request preempted most often of every label set (the first to
    /// reach that count), and its count: the trace a newcomer opens first.
    pub fn most_preempted(&self) -> Option<(u64, TraceLink)> {
        let each = self
            .sets()
            .into_iter()
            .filter_map(|(_, set)| set.placed().most_preempted);
        each.fold(
            None,
            |most: Option<(u64, TraceLink)>, (count, link)| match most {
                Some((top, _)) if top >= count => most,
                _ => Some((count, link)),
            },
        )
    }

    /// Every label set's exemplars, as they are now (not held locked).
    fn sets(&self) -> Vec<(Key, Arc<LabelSetExemplars>)> {
        let sets = self.store.sets.lock();
        sets.iter()
            .map(|(key, set)| (key.clone(), Arc::clone(set)))
            .collect()
    }

    /// Every label set's exemplars, after placing what is pending.
    pub fn snapshot(&self) -> ExemplarSnapshot {
        let mut by_model: HashMap<String, HashMap<u32, ByClass>> = HashMap::new();
        let mut overflow = None;
        for (Key(key), set) in self.sets() {
            let slots = set.placed().slots.clone();
            match key {
                Some((model, engine, lora_name, priority)) => {
                    let by_engine = by_model.entry(model).or_default();
                    let by_class = by_engine.entry(engine).or_default();
                    by_class
                        .entry(lora_name)
                        .or_default()
                        .insert(priority, slots);
                }
                None => overflow = Some(slots),
            }
        }
        let all_classes = all_classes(&by_model);
        ExemplarSnapshot {
            layout: Arc::clone(&self.store.layout),
            by_model,
            all_classes,
            overflow,
        }
    }

    /// The bytes one label set's exemplars take: its ring and its slots.
    pub fn bytes_per_label_set(&self) -> usize {
        RING_CAPACITY * std::mem::size_of::<Ended>()
            + self.store.layout.slots * std::mem::size_of::<Option<Exemplar>>()
    }

    /// Slots per label set: one per bucket of every family with exemplars,
    /// and one per SLO outcome with `--slo`.
    pub fn slots_per_label_set(&self) -> usize {
        self.store.layout.slots
    }
}

/// Per `(model_name, engine)` with classes (`--attribute`), the slots of
/// all its classes together: in each slot the latest of their exemplars.
/// They are the exemplars of vLLM's families on `/metrics`, whose series
/// sum the classes (`export::prometheus`).
fn all_classes(
    by_model: &HashMap<String, HashMap<u32, ByClass>>,
) -> HashMap<String, HashMap<u32, Vec<Option<Exemplar>>>> {
    let mut all = HashMap::new();
    for (model, by_engine) in by_model {
        for (&engine, by_class) in by_engine {
            let classed = by_class.iter().any(|(lora_name, by_priority)| {
                !lora_name.is_empty() || by_priority.keys().any(|p| !p.is_empty())
            });
            if !classed {
                continue;
            }
            // Classes in a fixed order, so that of two exemplars of one
            // millisecond the same one wins at every scrape.
            let mut classes: Vec<(&String, &String, &Vec<Option<Exemplar>>)> = by_class
                .iter()
                .flat_map(|(lora, by_priority)| by_priority.iter().map(move |(p, s)| (lora, p, s)))
                .collect();
            classes.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            let mut latest: Vec<Option<Exemplar>> = Vec::new();
            for (_, _, slots) in classes {
                if latest.len() < slots.len() {
                    latest.resize(slots.len(), None);
                }
                for (into, exemplar) in latest.iter_mut().zip(slots) {
                    if let Some(exemplar) = exemplar {
                        keep_latest(into, *exemplar);
                    }
                }
            }
            all.entry(model.clone())
                .or_insert_with(HashMap::new)
                .insert(engine, latest);
        }
    }
    all
}

/// What [`Exemplars::snapshot`] read: per label set, its slots.
#[derive(Debug)]
pub struct ExemplarSnapshot {
    layout: Arc<Layout>,
    by_model: HashMap<String, HashMap<u32, ByClass>>,
    /// Per `(model_name, engine)` with classes: see [`all_classes`].
    all_classes: HashMap<String, HashMap<u32, Vec<Option<Exemplar>>>>,
    overflow: Option<Vec<Option<Exemplar>>>,
}

/// The label set of a series as `/metrics` writes it.
#[derive(Debug, Clone, Copy)]
pub enum SeriesLabelSet<'a> {
    /// `model_name` and `engine`.
    Of(&'a str, u32),
    /// `model_name`, `engine` and the class labels, with `--attribute`
    /// (`lora_name`, then `priority`; `None`: the series has no such label).
    Classed(&'a str, u32, Option<&'a str>, Option<&'a str>),
    /// The overflow series.
    Overflow,
}

impl ExemplarSnapshot {
    fn slots(&self, label_set: SeriesLabelSet<'_>) -> Option<&[Option<Exemplar>]> {
        match label_set {
            // With classes, a series without class labels is their sum.
            SeriesLabelSet::Of(model, engine) => {
                match self.all_classes.get(model).and_then(|e| e.get(&engine)) {
                    Some(all) => Some(all),
                    None => self.class_slots(model, engine, None, None),
                }
            }
            SeriesLabelSet::Classed(model, engine, lora_name, priority) => {
                self.class_slots(model, engine, lora_name, priority)
            }
            SeriesLabelSet::Overflow => self.overflow.as_ref(),
        }
        .map(Vec::as_slice)
    }

    fn class_slots(
        &self,
        model: &str,
        engine: u32,
        lora_name: Option<&str>,
        priority: Option<&str>,
    ) -> Option<&Vec<Option<Exemplar>>> {
        let by_class = self.by_model.get(model)?.get(&engine)?;
        by_class
            .get(lora_name.unwrap_or_default())?
            .get(priority.unwrap_or_default())
    }

    /// The exemplars of a per-request histogram's series, one per bucket
    /// (`+Inf` last); `None` when the family keeps none, or the label set
    /// has none.
    pub fn histogram(
        &self,
        def: &MetricDef,
        label_set: SeriesLabelSet<'_>,
    ) -> Option<&[Option<Exemplar>]> {
        let row = REQUEST_HISTOGRAMS
            .iter()
            .position(|row| row.def.vllm_name == def.vllm_name)?;
        let (first, bounds) = self.layout.rows[row].as_ref()?;
        Some(&self.slots(label_set)?[*first..first + bounds.len() + 1])
    }

    /// The exemplar of an SLO outcome's series, with `--slo`.
    pub fn slo(&self, outcome: SloOutcome, label_set: SeriesLabelSet<'_>) -> Option<&Exemplar> {
        let first = self.layout.slo?;
        self.slots(label_set)?[first + outcome as usize].as_ref()
    }

    /// Every exemplar held, of every label set and family.
    pub fn len(&self) -> usize {
        let count = |slots: &Vec<Option<Exemplar>>| slots.iter().flatten().count();
        let sets = self
            .by_model
            .values()
            .flat_map(HashMap::values)
            .flat_map(HashMap::values)
            .flat_map(HashMap::values);
        sets.chain(&self.overflow).map(count).sum()
    }

    /// Whether no exemplar is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::request::{
        E2E_REQUEST_LATENCY, REQUEST_NUM_PREEMPTIONS, TIME_TO_FIRST_TOKEN,
    };

    fn link(n: u16) -> TraceLink {
        TraceLink {
            trace_id: TraceId::from(u128::from(n) + 1),
            span_id: SpanId::from(u64::from(n) + 1),
        }
    }

    fn values(preemptions: u64, e2e: f64, ttft: Option<f64>) -> TerminalValues {
        TerminalValues {
            num_preemptions: preemptions,
            e2e,
            time_to_first_token: ttft,
            ..TerminalValues::default()
        }
    }

    #[test]
    fn each_bucket_holds_its_latest_request_however_full_the_ring_got() {
        let exemplars = Exemplars::new(&InstrumentsConfig::default());
        let set = exemplars.label_set(Some(LabelSetId {
            model_name: "m",
            engine: 0,
            lora_name: None,
            priority: None,
        }));
        // Three times the ring: the first ones are placed by the recording
        // thread, the rest by the snapshot; the order decides either way.
        let total = 3 * RING_CAPACITY as u16;
        for n in 1..=total {
            let preemptions = u64::from(n % 4 == 0) * 3 + u64::from(n == 7) * 11;
            // Each arrived at 100 and ended `n` s later.
            set.keep(
                &link(n),
                100.0 + f64::from(n),
                &values(preemptions, f64::from(n), Some(0.25)),
                None,
            );
        }
        let snapshot = exemplars.snapshot();
        let buckets = snapshot
            .histogram(&REQUEST_NUM_PREEMPTIONS, SeriesLabelSet::Of("m", 0))
            .unwrap();
        // Buckets 1, 2, 3, 4, 5, 10, 20, +Inf: 0 preemptions lands in `le=1`.
        assert_eq!(buckets.len(), 8);
        let latest_with = |wanted: fn(u16) -> bool| (1..=total).rev().find(|n| wanted(*n)).unwrap();
        assert_eq!(
            buckets[0].unwrap().link,
            link(latest_with(|n| n % 4 != 0 && n != 7))
        );
        assert_eq!(buckets[0].unwrap().value, 0.0);
        assert_eq!(buckets[2].unwrap().link, link(latest_with(|n| n % 4 == 0)));
        assert_eq!(buckets[2].unwrap().value, 3.0);
        assert_eq!(buckets[6].unwrap().link, link(7), "11 preemptions: le=20");
        assert!(buckets[1].is_none() && buckets[7].is_none());
        let ttft = snapshot
            .histogram(&TIME_TO_FIRST_TOKEN, SeriesLabelSet::Of("m", 0))
            .unwrap();
        let at = ttft.iter().position(Option::is_some).unwrap();
        let exemplar = ttft[at].unwrap();
        assert_eq!((exemplar.value, exemplar.timestamp), (0.25, 100.25));
        // Every first token came at 100.25: the first request placed stays
        // (a second exemplar in the same millisecond would be refused).
        assert_eq!(exemplar.link, link(1));
        let e2e = snapshot
            .histogram(&E2E_REQUEST_LATENCY, SeriesLabelSet::Of("m", 0))
            .unwrap();
        // Latency buckets 0.3, 0.5, 0.8, 1, …: the last request (e2e 384 s)
        // lands in `le=480`, the first (1 s) in `le=1`.
        assert_eq!(e2e[3].unwrap().timestamp, 101.0, "1 ≤ 1");
        assert_eq!(e2e[17].unwrap().timestamp, 100.0 + f64::from(total));
        assert!(snapshot
            .slo(SloOutcome::Met, SeriesLabelSet::Of("m", 0))
            .is_none());
        assert!(snapshot
            .histogram(&REQUEST_NUM_PREEMPTIONS, SeriesLabelSet::Of("m", 1))
            .is_none());
        assert_eq!(exemplars.most_preempted(), Some((11, link(7))));
    }

    #[test]
    fn a_request_without_a_first_token_leaves_no_ttft_exemplar() {
        let exemplars = Exemplars::new(&InstrumentsConfig::default());
        exemplars
            .label_set(None)
            .keep(&link(1), 2.0, &values(0, 1.0, None), None);
        let snapshot = exemplars.snapshot();
        let ttft = snapshot
            .histogram(&TIME_TO_FIRST_TOKEN, SeriesLabelSet::Overflow)
            .unwrap();
        assert!(ttft.iter().all(Option::is_none));
        // Every family with an end value has one: the table's rows observed
        // at the end, but the three these values leave unset.
        let at_end = REQUEST_HISTOGRAMS
            .iter()
            .filter(|row| row.exemplar == ExemplarColumn::AtEnd)
            .count();
        assert_eq!(snapshot.len(), at_end - 3);
    }

    /// The figure docs/PERFORMANCE.md gives ("Exemplars"), for the default
    /// configuration: a 128-request ring of 176 bytes each, and 257 slots
    /// of 64 bytes (one per bucket, `+Inf` included, of the 14 families with
    /// exemplars), 6 more with `--slo`.
    #[test]
    fn a_label_set_takes_the_memory_the_docs_give() {
        let config = InstrumentsConfig::default();
        let exemplars = Exemplars::new(&config);
        assert_eq!(exemplars.slots_per_label_set(), 257);
        assert_eq!(exemplars.bytes_per_label_set(), 128 * 176 + 257 * 64);
        let with_slo = InstrumentsConfig {
            slo: Some(Arc::new(crate::instruments::Slo::default())),
            ..config
        };
        assert_eq!(Exemplars::new(&with_slo).slots_per_label_set(), 263);
    }
}
