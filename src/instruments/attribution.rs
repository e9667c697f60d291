//! Attribution: the class a request's per-request series carry besides
//! `model_name` and `engine`, its LoRA adapter (`lora_name`) and its
//! priority class (`priority`), with `--attribute lora,priority`
//! (docs/SEMANTICS.md §6d).
//!
//! Both labels are bounded before any series exists. A priority becomes
//! one of a few classes cut by configured boundaries, never the raw
//! integer. An adapter gets a `lora_name` of its own once it has shown
//! [`Attribution::adapter_min_requests`] requests, while fewer than
//! [`Attribution::max_adapters`] have one; every other adapter's requests
//! carry `lora_name="other"`, so that the busiest adapters, not the first
//! ones seen, get the labels, and a stream of one-off adapters costs no
//! series. A label once given is kept: the SDK never forgets a cumulative
//! series, so a label taken back would be a series more, not one fewer.
//!
//! ```
//! use vllm_otel_metrics::instruments::{Attribution, PriorityClasses};
//! let classes: PriorityClasses = "-1,0,1,2".parse().unwrap();
//! assert_eq!(classes.labels(), ["<-1", "-1", "0", "1", ">1"]);
//! let attribution = Attribution::default().with_lora().with_priority(classes);
//! assert_eq!(attribution.max_adapters(), 16);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use foldhash::fast::RandomState;
use parking_lot::Mutex;

use super::attributes::same_str;
use crate::catalog::labels::{LORA_NAME_LABEL, NO_ADAPTER, OTHER_ADAPTER, PRIORITY_LABEL};

/// Adapters given a `lora_name` of their own, by default.
pub const DEFAULT_MAX_ADAPTERS: usize = 16;
/// Requests an adapter shows before it gets a `lora_name` of its own, by
/// default.
pub const DEFAULT_ADAPTER_MIN_REQUESTS: u32 = 5;
/// Most priority-class boundaries (so at most 17 classes).
pub const MAX_PRIORITY_BOUNDARIES: usize = 16;
/// Most adapters with a label of their own, whatever is asked.
pub const MAX_ADAPTERS: usize = 1024;

/// Which classes the per-request series carry (`--attribute`), and their
/// bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    lora: bool,
    priority: Option<PriorityClasses>,
    max_adapters: usize,
    adapter_min_requests: u32,
}

impl Default for Attribution {
    /// Neither label, with the default bounds.
    fn default() -> Self {
        Attribution {
            lora: false,
            priority: None,
            max_adapters: DEFAULT_MAX_ADAPTERS,
            adapter_min_requests: DEFAULT_ADAPTER_MIN_REQUESTS,
        }
    }
}

impl Attribution {
    /// Also labels the request's adapter (`lora_name`).
    pub fn with_lora(mut self) -> Self {
        self.lora = true;
        self
    }

    /// Also labels the request's priority class (`priority`).
    pub fn with_priority(mut self, classes: PriorityClasses) -> Self {
        self.priority = Some(classes);
        self
    }

    /// At most `max` adapters get a `lora_name` of their own (1 to
    /// [`MAX_ADAPTERS`]).
    pub fn with_max_adapters(mut self, max: usize) -> Self {
        self.max_adapters = max.clamp(1, MAX_ADAPTERS);
        self
    }

    /// An adapter gets a `lora_name` of its own at its `min`-th request (at
    /// least 1: the first adapters seen get the labels).
    pub fn with_adapter_min_requests(mut self, min: u32) -> Self {
        self.adapter_min_requests = min.max(1);
        self
    }

    /// Whether `lora_name` is labelled.
    pub fn lora(&self) -> bool {
        self.lora
    }

    /// The priority classes, when `priority` is labelled.
    pub fn priority(&self) -> Option<&PriorityClasses> {
        self.priority.as_ref()
    }

    /// Adapters with a `lora_name` of their own, at most.
    pub fn max_adapters(&self) -> usize {
        self.max_adapters
    }

    /// Requests an adapter shows before it gets its own `lora_name`.
    pub fn adapter_min_requests(&self) -> u32 {
        self.adapter_min_requests
    }

    /// Whether any label is added.
    pub fn is_on(&self) -> bool {
        self.lora || self.priority.is_some()
    }

    /// The most class label sets one `(model_name, engine)` label set
    /// splits into: adapters with a label, `none` and `other`, times the
    /// priority classes.
    pub fn max_classes(&self) -> usize {
        let adapters = if self.lora { self.max_adapters + 2 } else { 1 };
        adapters * self.priority.as_ref().map_or(1, |p| p.labels.len())
    }
}

/// Priority classes cut by boundaries: with boundaries `b1 < … < bn`, a
/// request's priority `p` is in class `<b1` below `b1`, in the class of
/// `bi` for `bi ≤ p < b(i+1)`, and in the last class from `bn`. Labels are
/// the integers each class holds: `5` for one, `0..9` for several,
/// `<0` and `>99` at the ends. The default `-1,0,1,2` gives vLLM's proposed
/// buckets (#58077): `<-1`, `-1`, `0`, `1`, `>1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClasses {
    boundaries: Vec<i64>,
    /// One per class, lowest first.
    labels: Vec<Arc<str>>,
    /// The class of each priority from the first boundary to the last, by
    /// its distance from the first, when they are at most [`DENSE_SPAN`]
    /// apart: a request's class is then a load, not a search.
    dense: Box<[u8]>,
}

/// The widest span of boundaries [`PriorityClasses`] keeps a table for.
const DENSE_SPAN: i64 = 256;

impl Default for PriorityClasses {
    fn default() -> Self {
        PriorityClasses::new(vec![-1, 0, 1, 2]).expect("the default boundaries are valid")
    }
}

impl PriorityClasses {
    /// Classes cut by `boundaries`, strictly increasing, 1 to
    /// [`MAX_PRIORITY_BOUNDARIES`] of them.
    pub fn new(boundaries: Vec<i64>) -> Result<Self, AttributionError> {
        if boundaries.is_empty() || boundaries.len() > MAX_PRIORITY_BOUNDARIES {
            return Err(AttributionError::PriorityBoundaries(format!(
                "{} boundaries; give 1 to {MAX_PRIORITY_BOUNDARIES}",
                boundaries.len()
            )));
        }
        if let Some(pair) = boundaries.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Err(AttributionError::PriorityBoundaries(format!(
                "{} is not above {}; boundaries increase strictly",
                pair[1], pair[0]
            )));
        }
        let (first, last) = (boundaries[0], boundaries[boundaries.len() - 1]);
        let mut labels = vec![format!("<{first}")];
        for pair in boundaries.windows(2) {
            let (low, high) = (pair[0], pair[1] - 1);
            labels.push(if low == high {
                low.to_string()
            } else {
                format!("{low}..{high}")
            });
        }
        labels.push(format!(">{}", last.saturating_sub(1)));
        let dense = match last.checked_sub(first) {
            Some(span) if span < DENSE_SPAN => (first..=last)
                .map(|p| boundaries.partition_point(|&b| b <= p) as u8)
                .collect(),
            _ => Box::default(),
        };
        Ok(PriorityClasses {
            labels: labels.into_iter().map(Arc::from).collect(),
            boundaries,
            dense,
        })
    }

    /// The boundaries.
    pub fn boundaries(&self) -> &[i64] {
        &self.boundaries
    }

    /// Every class's label, lowest priority value first.
    pub fn labels(&self) -> Vec<&str> {
        self.labels.iter().map(|l| &**l).collect()
    }

    /// The class of `priority`, by its place in [`labels`](Self::labels).
    ///
    /// ```
    /// use vllm_otel_metrics::instruments::PriorityClasses;
    /// let classes: PriorityClasses = "0,10,100".parse().unwrap();
    /// assert_eq!(classes.labels(), ["<0", "0..9", "10..99", ">99"]);
    /// assert_eq!([-5, 0, 9, 10, 500].map(|p| classes.class_of(p)), [0, 1, 1, 2, 3]);
    /// ```
    #[inline]
    pub fn class_of(&self, priority: i64) -> usize {
        let first = self.boundaries[0];
        if priority < first {
            return 0;
        }
        // At or above the first boundary: the distance fits a u64.
        let distance = usize::try_from(priority.wrapping_sub(first) as u64).ok();
        match distance.and_then(|d| self.dense.get(d)) {
            Some(&class) => usize::from(class),
            None => self.boundaries.partition_point(|&b| b <= priority),
        }
    }
}

impl FromStr for PriorityClasses {
    type Err = AttributionError;

    /// Comma-separated integer boundaries (`0,10,100`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let boundaries = text
            .split(',')
            .map(|b| {
                b.trim().parse::<i64>().map_err(|_| {
                    AttributionError::PriorityBoundaries(format!("'{b}' is not an integer"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        PriorityClasses::new(boundaries)
    }
}

/// A bad attribution setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributionError {
    /// The priority classes' boundaries.
    PriorityBoundaries(String),
}

impl fmt::Display for AttributionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributionError::PriorityBoundaries(why) => {
                write!(f, "priority class boundaries: {why}")
            }
        }
    }
}

impl std::error::Error for AttributionError {}

/// What a request says of its class: its adapter (none: the base model)
/// and its priority (none: vLLM's default, 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestClass<'a> {
    /// `lora_request.lora_name`.
    pub lora_name: Option<&'a str>,
    /// `Request.priority`.
    pub priority: Option<i64>,
}

/// A request's class, resolved: a key that tells label sets apart, and the
/// label values the label set is bound with the first time.
pub(crate) struct ResolvedClass<'a> {
    /// The class's place among its `(model_name, engine)`'s classes:
    /// adapter slot × priority classes + priority class.
    pub(crate) index: usize,
    /// The adapter's slot: [`NO_ADAPTER_SLOT`], [`OTHER_SLOT`], or that of
    /// an adapter with a label of its own.
    pub(crate) adapter: u32,
    /// The priority class, by its place (0 without `priority`).
    pub(crate) priority: usize,
    pub(crate) lora_name: Option<&'a str>,
    pub(crate) priority_label: Option<&'a str>,
}

impl ResolvedClass<'_> {
    /// The class labels, in the order they follow `model_name` and `engine`.
    pub(crate) fn labels(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let lora = self.lora_name.map(|v| (LORA_NAME_LABEL, v));
        lora.into_iter()
            .chain(self.priority_label.map(|v| (PRIORITY_LABEL, v)))
    }
}

/// The slot of the base model's requests (`lora_name="none"`), and of every
/// request when only `priority` is labelled.
pub(crate) const NO_ADAPTER_SLOT: u32 = 0;
/// The slot of the adapters without a label of their own (`lora_name="other"`).
pub(crate) const OTHER_SLOT: u32 = 1;
/// Adapters with a label of their own have the slots from 2.
const FIRST_ADAPTER_SLOT: u32 = 2;

/// An adapter with a label of its own.
struct Labelled {
    hash: u64,
    name: Box<str>,
    slot: u32,
}

/// The classes of requests, resolved once per request at its start.
pub(crate) struct Classes {
    config: Attribution,
    /// Adapters with a label of their own, by their names' hashes: an
    /// open-addressing table at most a quarter full, written once per
    /// adapter (under `candidates`' lock) and read without a lock, so that
    /// a request's start pays one hash and a probe or two, whether its
    /// adapter is there or not (`other`).
    labelled: Box<[OnceLock<Labelled>]>,
    /// Adapters labelled; at `max_adapters` every slot is taken, and other
    /// adapters go to `other` without counting.
    labelled_count: AtomicUsize,
    hasher: RandomState,
    /// Requests seen of adapters without a label, while slots remain.
    /// Emptied when it reaches its capacity, so that it stays bounded
    /// however many adapters come and go.
    candidates: Mutex<HashMap<Box<str>, u32, RandomState>>,
}

impl Classes {
    pub(crate) fn new(config: Attribution) -> Self {
        let capacity = (4 * config.max_adapters).next_power_of_two();
        Classes {
            config,
            labelled: (0..capacity).map(|_| OnceLock::new()).collect(),
            labelled_count: AtomicUsize::new(0),
            hasher: RandomState::default(),
            candidates: Mutex::default(),
        }
    }

    /// The slot of an adapter with a label of its own.
    #[inline]
    fn labelled_slot(&self, name: &str, hash: u64) -> Option<u32> {
        let mask = self.labelled.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let entry = self.labelled[at].get()?;
            if entry.hash == hash && same_str(&entry.name, name) {
                return Some(entry.slot);
            }
            at = (at + 1) & mask;
        }
    }

    /// Gives `name` the next slot; under `candidates`' lock, the one writer.
    fn label(&self, name: &str, hash: u64) -> u32 {
        let slot = FIRST_ADAPTER_SLOT + self.labelled_count.load(Ordering::Relaxed) as u32;
        let mask = self.labelled.len() - 1;
        let mut at = hash as usize & mask;
        // At most a quarter full: a free place is always found. The one writer
        // finds it free and fills it.
        while self.labelled[at].get().is_some() {
            at = (at + 1) & mask;
        }
        let entry = Labelled {
            hash,
            name: name.into(),
            slot,
        };
        let _ = self.labelled[at].set(entry);
        self.labelled_count.fetch_add(1, Ordering::Release);
        slot
    }

    /// Candidates counted at once, at most.
    fn candidate_capacity(&self) -> usize {
        (8 * self.config.max_adapters).max(64)
    }

    /// A request's adapter slot and priority class, for the handle
    /// cache's index, when they are known without a count: the base
    /// model's, an adapter's with a label of its own, and, once every slot
    /// is taken, `other`. No lock; `None` for an adapter whose requests
    /// are still counted ([`resolve`](Self::resolve) counts them).
    #[inline]
    pub(crate) fn key(&self, class: &RequestClass<'_>) -> Option<(u32, usize)> {
        let adapter = match class.lora_name {
            Some(name) if self.config.lora => {
                match self.labelled_slot(name, self.name_hash(name)) {
                    Some(slot) => slot,
                    None if self.all_labelled() => OTHER_SLOT,
                    None => return None,
                }
            }
            _ => NO_ADAPTER_SLOT,
        };
        let priority = self
            .config
            .priority
            .as_ref()
            .map_or(0, |classes| classes.class_of(class.priority.unwrap_or(0)));
        Some((adapter, priority))
    }

    /// An adapter name's hash in the labelled table. A name of more than
    /// 16 bytes is hashed by its first and last 16 and its length, two
    /// multiplications: a match compares the whole name, so what the hash
    /// skips can only lengthen a probe among the labelled adapters (at most
    /// `max_adapters` of them), never confuse two.
    #[inline]
    fn name_hash(&self, name: &str) -> u64 {
        let bytes = name.as_bytes();
        let mut hasher = self.hasher.build_hasher();
        if bytes.len() <= 16 {
            hasher.write(bytes);
        } else {
            let window = |at: usize| {
                let mut word = [0; 16];
                word.copy_from_slice(&bytes[at..at + 16]);
                u128::from_ne_bytes(word)
            };
            hasher.write_u128(window(0) ^ bytes.len() as u128);
            hasher.write_u128(window(bytes.len() - 16));
        }
        hasher.finish()
    }

    /// The class of a request. Its label values are the request's own
    /// adapter name (used when its label set is bound, on its first
    /// request) or values `self` and the catalog hold.
    #[inline]
    pub(crate) fn resolve<'a>(&'a self, class: &RequestClass<'a>) -> ResolvedClass<'a> {
        let (adapter, lora_name) = if self.config.lora {
            match class.lora_name {
                None => (NO_ADAPTER_SLOT, Some(NO_ADAPTER)),
                Some(name) => match self.adapter_slot(name) {
                    Some(slot) => (slot, Some(name)),
                    None => (OTHER_SLOT, Some(OTHER_ADAPTER)),
                },
            }
        } else {
            (NO_ADAPTER_SLOT, None)
        };
        let (priority, priority_label, per_adapter) = match &self.config.priority {
            Some(classes) => {
                let at = classes.class_of(class.priority.unwrap_or(0));
                (at, Some(&*classes.labels[at]), classes.labels.len())
            }
            None => (0, None, 1),
        };
        ResolvedClass {
            index: adapter as usize * per_adapter + priority,
            adapter,
            priority,
            lora_name,
            priority_label,
        }
    }

    /// The slot of an adapter with a label of its own; counts a request of
    /// one without, and gives it a slot at its `adapter_min_requests`-th
    /// request while slots remain.
    #[inline]
    fn adapter_slot(&self, name: &str) -> Option<u32> {
        let hash = self.name_hash(name);
        if let Some(slot) = self.labelled_slot(name, hash) {
            return Some(slot);
        }
        if self.all_labelled() {
            return None;
        }
        self.count_candidate(name, hash)
    }

    /// Counts a request of an adapter without a label, and gives it one at
    /// its `adapter_min_requests`-th request while slots remain. Out of
    /// line: the labelled adapters' path stays short.
    #[inline(never)]
    fn count_candidate(&self, name: &str, hash: u64) -> Option<u32> {
        let mut candidates = self.candidates.lock();
        // Labelled by another thread since, or the last slot taken since.
        if let Some(slot) = self.labelled_slot(name, hash) {
            return Some(slot);
        }
        if self.all_labelled() {
            return None;
        }
        let seen = match candidates.get_mut(name) {
            Some(seen) => {
                *seen += 1;
                *seen
            }
            None => {
                if candidates.len() >= self.candidate_capacity() {
                    candidates.clear();
                }
                candidates.insert(name.into(), 1);
                1
            }
        };
        if seen < self.config.adapter_min_requests {
            return None;
        }
        candidates.remove(name);
        Some(self.label(name, hash))
    }

    /// Whether every slot is taken.
    #[inline]
    fn all_labelled(&self) -> bool {
        self.labelled_count.load(Ordering::Acquire) >= self.config.max_adapters
    }

    /// Adapters with a label of their own.
    #[cfg(test)]
    fn labelled_adapters(&self) -> usize {
        self.labelled_count.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(attribution: Attribution) -> Classes {
        Classes::new(attribution)
    }

    fn labels(resolved: &ResolvedClass<'_>) -> Vec<(String, String)> {
        resolved
            .labels()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn priority_classes_are_cut_by_their_boundaries() {
        let default = PriorityClasses::default();
        assert_eq!(default.labels(), ["<-1", "-1", "0", "1", ">1"]);
        let got: Vec<usize> = [-7, -2, -1, 0, 1, 2, 1 << 40]
            .iter()
            .map(|p| default.class_of(*p))
            .collect();
        assert_eq!(got, [0, 0, 1, 2, 3, 4, 4]);
        let one: PriorityClasses = "10".parse().unwrap();
        assert_eq!(one.labels(), ["<10", ">9"]);
        for bad in ["", "1,1", "2,1", "a", "1,,2"] {
            assert!(bad.parse::<PriorityClasses>().is_err(), "{bad:?}");
        }
        let many = (0..=MAX_PRIORITY_BOUNDARIES as i64).map(|b| b.to_string());
        let err = many
            .collect::<Vec<_>>()
            .join(",")
            .parse::<PriorityClasses>()
            .unwrap_err();
        assert!(err.to_string().contains("17 boundaries"), "{err}");
    }

    #[test]
    fn the_class_table_agrees_with_the_boundaries() {
        for boundaries in [
            "-1,0,1,2",
            "0,10,100",
            "5",
            "-300,-7,0",
            "0,1000",
            "-9223372036854775808,9223372036854775807",
        ] {
            let classes: PriorityClasses = boundaries.parse().unwrap();
            let b = classes.boundaries().to_vec();
            let probes = b
                .iter()
                .flat_map(|&x| [x.saturating_sub(1), x, x.saturating_add(1)]);
            for p in probes.chain([i64::MIN, -1, 0, 1, 57, 999, i64::MAX]) {
                let searched = b.partition_point(|&x| x <= p);
                assert_eq!(classes.class_of(p), searched, "{p} in {boundaries}");
            }
        }
        assert_eq!(PriorityClasses::default().dense.len(), 4);
        assert!("0,1000"
            .parse::<PriorityClasses>()
            .unwrap()
            .dense
            .is_empty());
    }

    #[test]
    fn a_key_without_a_count_only_when_the_slot_is_known() {
        let c = classes(
            Attribution::default()
                .with_lora()
                .with_max_adapters(1)
                .with_adapter_min_requests(2)
                .with_priority(PriorityClasses::default()),
        );
        let request = |name: &'static str| RequestClass {
            lora_name: Some(name),
            priority: Some(7),
        };
        assert_eq!(c.key(&RequestClass::default()), Some((NO_ADAPTER_SLOT, 2)));
        // Still counted: no key until `resolve` has counted it.
        assert_eq!(c.key(&request("a")), None);
        assert_eq!(c.resolve(&request("a")).adapter, OTHER_SLOT);
        assert_eq!(c.resolve(&request("a")).adapter, FIRST_ADAPTER_SLOT);
        assert_eq!(c.key(&request("a")), Some((FIRST_ADAPTER_SLOT, 4)));
        // Every slot taken: any other adapter is `other`, without a count.
        assert_eq!(c.key(&request("b")), Some((OTHER_SLOT, 4)));
        let priority_only =
            classes(Attribution::default().with_priority(PriorityClasses::default()));
        assert_eq!(priority_only.key(&request("a")), Some((NO_ADAPTER_SLOT, 4)));
    }

    #[test]
    fn long_names_that_hash_alike_stay_apart() {
        let c = classes(
            Attribution::default()
                .with_lora()
                .with_adapter_min_requests(1),
        );
        // The same first and last 16 bytes and length: the same hash.
        let names: Vec<String> = (0..4)
            .map(|n| format!("tenant-prefix-00{n}x-shared-suffix-00"))
            .collect();
        assert_eq!(c.name_hash(&names[0]), c.name_hash(&names[1]));
        let slots: Vec<u32> = names
            .iter()
            .map(|name| {
                c.resolve(&RequestClass {
                    lora_name: Some(name),
                    priority: None,
                })
                .adapter
            })
            .collect();
        assert_eq!(slots, [2, 3, 4, 5]);
        for (name, slot) in names.iter().zip(slots) {
            let class = RequestClass {
                lora_name: Some(name),
                priority: None,
            };
            assert_eq!(c.key(&class), Some((slot, 0)), "{name}");
        }
    }

    #[test]
    fn adapters_get_labels_once_busy_and_while_slots_remain() {
        let c = classes(
            Attribution::default()
                .with_lora()
                .with_max_adapters(2)
                .with_adapter_min_requests(3),
        );
        let of = |name: Option<&str>| {
            let r = c.resolve(&RequestClass {
                lora_name: name,
                priority: None,
            });
            (r.index, labels(&r))
        };
        let lora = |v: &str| vec![("lora_name".to_owned(), v.to_owned())];
        assert_eq!(of(None), (0, lora("none")));
        // Below three requests: `other`.
        assert_eq!(of(Some("a")), (1, lora("other")));
        assert_eq!(of(Some("once")), (1, lora("other")));
        assert_eq!(of(Some("a")), (1, lora("other")));
        assert_eq!(of(Some("a")), (2, lora("a")));
        assert_eq!(of(Some("a")), (2, lora("a")));
        for _ in 0..2 {
            assert_eq!(of(Some("b")).1, lora("other"));
        }
        assert_eq!(of(Some("b")), (3, lora("b")));
        // Both slots taken: the busiest newcomer stays `other`.
        for _ in 0..10 {
            assert_eq!(of(Some("c")), (1, lora("other")));
        }
        assert_eq!(c.labelled_adapters(), 2);
        // Once every slot is taken, nothing more is counted.
        assert!(c.all_labelled());
        assert!(!c.candidates.lock().contains_key("c"));
    }

    #[test]
    fn one_off_adapters_leave_the_counts_bounded_and_take_no_slot() {
        let c = classes(Attribution::default().with_lora());
        for n in 0..10_000 {
            let name = format!("adapter-{n}");
            let r = c.resolve(&RequestClass {
                lora_name: Some(&name),
                priority: Some(n),
            });
            assert_eq!(r.index, 1);
        }
        assert!(c.candidates.lock().len() <= c.candidate_capacity());
        assert_eq!(c.labelled_adapters(), 0);
    }

    #[test]
    fn both_labels_in_order() {
        let c = classes(
            Attribution::default()
                .with_lora()
                .with_adapter_min_requests(1)
                .with_priority("0,10".parse().unwrap()),
        );
        let r = c.resolve(&RequestClass {
            lora_name: Some("sql"),
            priority: Some(12),
        });
        assert_eq!(r.index, 2 * 3 + 2);
        assert_eq!(
            labels(&r),
            [
                ("lora_name".to_owned(), "sql".to_owned()),
                ("priority".to_owned(), ">9".to_owned())
            ]
        );
        // No priority: vLLM's default, 0.
        let r = c.resolve(&RequestClass::default());
        assert_eq!((r.index, labels(&r)[1].1.as_str()), (1, "0..9"));
        assert_eq!(
            Attribution::default()
                .with_lora()
                .with_priority(PriorityClasses::default())
                .max_classes(),
            18 * 5
        );
    }
}
