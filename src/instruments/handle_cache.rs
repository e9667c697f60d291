//! The handle cache: the handles of each label set, bound once, up to a
//! limit (the Views' cardinality limit), after which new label sets share
//! the overflow label set's handles.
//!
//! A request's start finds its handles in a lock-free index first, keyed by
//! `(model_name, engine, adapter slot)` in one hash; only a label set's
//! first request goes on to the map under its lock.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use foldhash::fast::RandomState;
use opentelemetry::KeyValue;
use parking_lot::Mutex;

use super::attributes::{base_labels, same_str, shared_string};
use super::attribution::ResolvedClass;

/// Which label set handles are bound for: its `model_name` and `engine`,
/// and its class labels with `--attribute` (`lora_name`, `priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LabelSetId<'a> {
    pub(crate) model_name: &'a str,
    pub(crate) engine: u32,
    pub(crate) lora_name: Option<&'a str>,
    pub(crate) priority: Option<&'a str>,
}

/// The adapter slot the index keys a label set without class labels by.
pub(super) const UNCLASSED: u32 = u32::MAX;

/// Most entries of the lock-free index, whatever the label-set limit: past
/// it, later keys are found through the map (correct, a little slower).
const MAX_INDEXED: usize = 1 << 15;

/// Handles per label set, up to a limit (the Views' cardinality limit);
/// later label sets share the overflow handles.
pub(super) struct HandleCache<H> {
    /// By model name, then by engine: where label sets are bound. Keyed by
    /// foldhash: SipHash's flooding resistance buys nothing for keys the
    /// label-set limit bounds.
    by_label_set: RwLock<ByModel<H>>,
    /// The entries of the map, by `(model_name, engine, adapter slot)`: an
    /// open-addressing table at most half full, written once per key (under
    /// `index_writer`) and read without a lock.
    index: Box<[OnceLock<Box<Indexed<H>>>]>,
    indexed: AtomicUsize,
    index_writer: Mutex<()>,
    hasher: RandomState,
    /// Label sets bound; once at `limit`, it never grows again.
    label_sets: AtomicUsize,
    overflow: OnceLock<Arc<H>>,
    limit: usize,
    /// Class label sets one `(model_name, engine)` splits into, with
    /// `--attribute` (0 without).
    classes: usize,
}

/// A label set's handles, and the entry of its `(model_name, engine)`.
type Bound<H> = (Arc<H>, Arc<Entry<H>>);

/// Entries by model name, then by engine.
type ByModel<H> = HashMap<String, HashMap<u32, Arc<Entry<H>>, RandomState>, RandomState>;

/// The handles of one `(model_name, engine)`: slot 0 without a class, and,
/// with `--attribute`, slot 1 + the class's index for each class.
struct Entry<H> {
    slots: Box<[OnceLock<Arc<H>>]>,
}

/// One key of the index: the entry of its `(model_name, engine)` and where
/// its adapter's classes start in it.
struct Indexed<H> {
    hash: u64,
    engine: u32,
    adapter: u32,
    model_name: Box<str>,
    entry: Arc<Entry<H>>,
    first_slot: usize,
}

impl<H> HandleCache<H> {
    /// A cache of at most `limit` label sets, each `(model_name, engine)`
    /// with room for `classes` class label sets.
    pub(super) fn new(limit: usize, classes: usize) -> Self {
        // Each key of the index has a label set of its own bound: at most
        // `limit` keys, so twice as many places keep it at most half full.
        let places = (2 * limit.min(MAX_INDEXED)).next_power_of_two().max(4);
        HandleCache {
            by_label_set: RwLock::default(),
            index: (0..places).map(|_| OnceLock::new()).collect(),
            indexed: AtomicUsize::new(0),
            index_writer: Mutex::new(()),
            hasher: RandomState::default(),
            label_sets: AtomicUsize::new(0),
            overflow: OnceLock::new(),
            limit,
            classes,
        }
    }

    #[inline]
    fn key_hash(&self, model_name: &str, engine: u32, adapter: u32) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write(model_name.as_bytes());
        hasher.write_u64(u64::from(engine) | u64::from(adapter) << 32);
        hasher.finish()
    }

    /// The handles of `(model_name, engine)`'s label set for the adapter in
    /// slot `adapter` ([`UNCLASSED`] for the set without class labels) and
    /// its `class`-th priority class (0 without one), when a request has
    /// bound them already: lock-free, one hash and a probe or two.
    #[inline]
    pub(super) fn indexed(
        &self,
        model_name: &str,
        engine: u32,
        adapter: u32,
        class: usize,
    ) -> Option<Arc<H>> {
        let hash = self.key_hash(model_name, engine, adapter);
        let indexed = self.probe(hash, model_name, engine, adapter).ok()?;
        indexed
            .entry
            .slots
            .get(indexed.first_slot + class)?
            .get()
            .cloned()
    }

    /// The key's entry in the index (`Ok`), or the free place where it
    /// would go (`Err`). The index is at most half full: a probe ends.
    #[inline]
    fn probe(
        &self,
        hash: u64,
        model_name: &str,
        engine: u32,
        adapter: u32,
    ) -> Result<&Indexed<H>, usize> {
        let mask = self.index.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let Some(indexed) = self.index[at].get() else {
                return Err(at);
            };
            if indexed.hash == hash
                && indexed.engine == engine
                && indexed.adapter == adapter
                && same_str(&indexed.model_name, model_name)
            {
                return Ok(indexed);
            }
            at = (at + 1) & mask;
        }
    }

    /// Indexes a key whose label set is bound; a key indexed already, or
    /// an index at its bound, is left as it is.
    #[cold]
    fn index(
        &self,
        model_name: &str,
        engine: u32,
        adapter: u32,
        entry: &Arc<Entry<H>>,
        first_slot: usize,
    ) {
        let hash = self.key_hash(model_name, engine, adapter);
        // The one writer: a place found free stays free until it is set.
        let _writer = self.index_writer.lock();
        if 2 * (self.indexed.load(Ordering::Relaxed) + 1) > self.index.len() {
            return;
        }
        let Err(at) = self.probe(hash, model_name, engine, adapter) else {
            return;
        };
        let _ = self.index[at].set(Box::new(Indexed {
            hash,
            engine,
            adapter,
            model_name: model_name.into(),
            entry: Arc::clone(entry),
            first_slot,
        }));
        self.indexed.fetch_add(1, Ordering::Release);
    }

    /// The handles of a label set: from the index, or bound under the write
    /// lock the first time the set is seen (`bind` gets the set, `None` for
    /// the overflow one, and its attributes). A request's class, with
    /// `--attribute`, makes the label set one of its own, with the class
    /// labels after `engine`.
    #[inline]
    pub(super) fn get(
        &self,
        model_name: &str,
        engine: u32,
        class: Option<&ResolvedClass<'_>>,
        bind: impl Fn(Option<LabelSetId<'_>>, Vec<KeyValue>) -> H,
    ) -> Arc<H> {
        let (adapter, priority) = class.map_or((UNCLASSED, 0), |c| (c.adapter, c.priority));
        if let Some(handles) = self.indexed(model_name, engine, adapter, priority) {
            return handles;
        }
        self.find_or_bind(model_name, engine, class, bind)
    }

    /// A label set not in the index: found in the map, or bound under the
    /// write lock, or the overflow set's handles once the limit is reached;
    /// a set found or bound is indexed. Out of line: the lookup of an
    /// indexed set stays short.
    #[inline(never)]
    fn find_or_bind(
        &self,
        model_name: &str,
        engine: u32,
        class: Option<&ResolvedClass<'_>>,
        bind: impl Fn(Option<LabelSetId<'_>>, Vec<KeyValue>) -> H,
    ) -> Arc<H> {
        let (adapter, priority, slot) = match class {
            None => (UNCLASSED, 0, 0),
            Some(c) => (c.adapter, c.priority, 1 + c.index),
        };
        let found = self
            .by_label_set
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model_name)
            .and_then(|by_engine| by_engine.get(&engine))
            .and_then(|entry| Some((Arc::clone(entry.slots.get(slot)?.get()?), Arc::clone(entry))));
        let (handles, entry) = match found {
            Some(found) => found,
            None => match self.bind(model_name, engine, class, slot, bind) {
                Ok(bound) => bound,
                Err(overflow) => return overflow,
            },
        };
        self.index(model_name, engine, adapter, &entry, slot - priority);
        handles
    }

    /// A label set seen the first time: bound under the write lock (`Ok`,
    /// with its entry), or the overflow set's handles once the limit is
    /// reached (`Err`).
    fn bind(
        &self,
        model_name: &str,
        engine: u32,
        class: Option<&ResolvedClass<'_>>,
        slot: usize,
        bind: impl Fn(Option<LabelSetId<'_>>, Vec<KeyValue>) -> H,
    ) -> Result<Bound<H>, Arc<H>> {
        let overflow = || {
            Arc::clone(
                self.overflow
                    .get_or_init(|| Arc::new(bind(None, base_labels(None)))),
            )
        };
        // A full cache stays full: new label sets skip the write lock.
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return Err(overflow());
        }
        let mut cache = self
            .by_label_set
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = cache
            .entry(model_name.to_owned())
            .or_default()
            .entry(engine)
            .or_insert_with(|| {
                Arc::new(Entry {
                    slots: (0..1 + self.classes).map(|_| OnceLock::new()).collect(),
                })
            });
        // A class beyond the cache's room is never made (the classes are
        // counted from the same configuration).
        let Some(place) = entry.slots.get(slot) else {
            return Err(overflow());
        };
        if let Some(handles) = place.get() {
            return Ok((Arc::clone(handles), Arc::clone(entry)));
        }
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return Err(overflow());
        }
        let mut labels = base_labels(Some((model_name, engine)));
        let mut id = LabelSetId {
            model_name,
            engine,
            lora_name: None,
            priority: None,
        };
        if let Some(class) = class {
            for (name, value) in class.labels() {
                labels.push(KeyValue::new(name, shared_string(value)));
            }
            (id.lora_name, id.priority) = (class.lora_name, class.priority_label);
        }
        let handles = Arc::new(bind(Some(id), labels));
        let _ = place.set(Arc::clone(&handles));
        self.label_sets.fetch_add(1, Ordering::Release);
        Ok((handles, Arc::clone(entry)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A cache of `limit` label sets whose handles are the order they were
    /// bound in (0: the overflow set's).
    fn cache(limit: usize) -> (HandleCache<usize>, AtomicUsize) {
        (HandleCache::new(limit, 0), AtomicUsize::new(0))
    }

    fn get(
        cache: &HandleCache<usize>,
        binds: &AtomicUsize,
        model: &str,
        engine: u32,
    ) -> Arc<usize> {
        cache.get(model, engine, None, |set, _| match set {
            Some(_) => binds.fetch_add(1, Ordering::Relaxed) + 1,
            None => 0,
        })
    }

    #[test]
    fn a_bound_label_set_is_found_in_the_index_and_no_other_is() {
        let (cache, binds) = cache(8);
        assert_eq!(cache.indexed("llama", 0, UNCLASSED, 0), None);
        let first = get(&cache, &binds, "llama", 0);
        let found = cache.indexed("llama", 0, UNCLASSED, 0).expect("indexed");
        assert!(Arc::ptr_eq(&first, &found));
        // Another engine, another model (one of the same length), another
        // adapter slot: not that set.
        assert_eq!(cache.indexed("llama", 1, UNCLASSED, 0), None);
        assert_eq!(cache.indexed("llamb", 0, UNCLASSED, 0), None);
        assert_eq!(cache.indexed("llama", 0, 0, 0), None);
        assert_eq!(*get(&cache, &binds, "llama", 1), 2);
        assert_eq!(*get(&cache, &binds, "llama", 0), 1);
        assert_eq!(binds.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn threads_racing_for_new_label_sets_bind_each_once() {
        let (cache, binds) = cache(64);
        let seen: Vec<Vec<usize>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|t| {
                    let (cache, binds) = (&cache, &binds);
                    scope.spawn(move || {
                        (0..2_000)
                            .map(|i| {
                                let engine = ((i * 7 + t) % 50) as u32;
                                (engine as usize, *get(cache, binds, "racing", engine))
                            })
                            .fold(vec![0; 50], |mut by_engine, (engine, handles)| {
                                assert!(by_engine[engine] == 0 || by_engine[engine] == handles);
                                by_engine[engine] = handles;
                                by_engine
                            })
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(binds.load(Ordering::Relaxed), 50, "one bind per label set");
        for other in &seen[1..] {
            assert_eq!(other, &seen[0], "every thread got the same handles");
        }
        assert_eq!(cache.indexed.load(Ordering::Relaxed), 50);
    }

    #[test]
    fn the_overflow_set_is_never_indexed_and_the_index_stays_half_full() {
        let (cache, binds) = cache(3);
        for engine in 0..3 {
            assert_eq!(*get(&cache, &binds, "m", engine), engine as usize + 1);
        }
        for _ in 0..3 {
            assert_eq!(*get(&cache, &binds, "m", 7), 0, "beyond the limit");
        }
        assert_eq!(cache.indexed("m", 7, UNCLASSED, 0), None);
        let indexed = cache.indexed.load(Ordering::Relaxed);
        assert_eq!(indexed, 3);
        assert!(
            2 * indexed <= cache.index.len(),
            "{indexed} of {}",
            cache.index.len()
        );
    }
}
