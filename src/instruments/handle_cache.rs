//! The handle cache: the handles of each label set, bound once, up to a
//! limit (the Views' cardinality limit), after which new label sets share
//! the overflow label set's handles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use foldhash::fast::RandomState;
use opentelemetry::KeyValue;

use super::attributes::{base_labels, shared_string};
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

/// Handles per label set, up to a limit (the Views' cardinality limit);
/// later label sets share the overflow handles.
pub(super) struct HandleCache<H> {
    /// By model name, then by engine. Keyed by foldhash: a request's start
    /// hashes its model name and its engine here, and SipHash's flooding
    /// resistance buys nothing for keys the label-set limit bounds.
    by_label_set: RwLock<ByModel<H>>,
    /// Label sets bound; once at `limit`, it never grows again.
    label_sets: AtomicUsize,
    overflow: OnceLock<Arc<H>>,
    limit: usize,
    /// Class label sets one `(model_name, engine)` splits into, with
    /// `--attribute` (0 without).
    classes: usize,
}

/// Entries by model name, then by engine.
type ByModel<H> = HashMap<String, HashMap<u32, Entry<H>, RandomState>, RandomState>;

/// The handles of one `(model_name, engine)`: those without a class, and,
/// with `--attribute`, those of each class by its index, so that a class's
/// label set is found with the same lookup as the set without one, and an
/// index.
struct Entry<H> {
    unclassed: Option<Arc<H>>,
    classed: Box<[OnceLock<Arc<H>>]>,
}

impl<H> HandleCache<H> {
    /// A cache of at most `limit` label sets, each `(model_name, engine)`
    /// with room for `classes` class label sets.
    pub(super) fn new(limit: usize, classes: usize) -> Self {
        HandleCache {
            by_label_set: RwLock::default(),
            label_sets: AtomicUsize::new(0),
            overflow: OnceLock::new(),
            limit,
            classes,
        }
    }

    /// The handles of a label set, bound under the write lock the first time
    /// the set is seen: `bind` gets the set (`None`: the overflow one) and
    /// its attributes. A request's class, with `--attribute`, makes the
    /// label set one of its own, with the class labels after `engine`.
    #[inline]
    pub(super) fn get(
        &self,
        model_name: &str,
        engine: u32,
        class: Option<&ResolvedClass<'_>>,
        bind: impl Fn(Option<LabelSetId<'_>>, Vec<KeyValue>) -> H,
    ) -> Arc<H> {
        let index = class.map(|c| c.index);
        if let Some(handles) = self
            .by_label_set
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model_name)
            .and_then(|by_engine| by_engine.get(&engine))
            .and_then(|entry| match index {
                None => entry.unclassed.as_ref(),
                Some(at) => entry.classed.get(at)?.get(),
            })
        {
            return Arc::clone(handles);
        }
        self.bind(model_name, engine, class, bind)
    }

    /// A label set seen the first time: bound under the write lock, or the
    /// overflow set's handles once the limit is reached. Out of line: the
    /// lookup of a known set stays short.
    #[inline(never)]
    fn bind(
        &self,
        model_name: &str,
        engine: u32,
        class: Option<&ResolvedClass<'_>>,
        bind: impl Fn(Option<LabelSetId<'_>>, Vec<KeyValue>) -> H,
    ) -> Arc<H> {
        let overflow = || {
            Arc::clone(
                self.overflow
                    .get_or_init(|| Arc::new(bind(None, base_labels(None)))),
            )
        };
        // A full cache stays full: new label sets skip the write lock.
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
        }
        let mut cache = self
            .by_label_set
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = cache
            .entry(model_name.to_owned())
            .or_default()
            .entry(engine)
            .or_insert_with(|| Entry {
                unclassed: None,
                classed: (0..self.classes).map(|_| OnceLock::new()).collect(),
            });
        let slot = match class {
            None => entry.unclassed.as_ref(),
            Some(class) => entry.classed.get(class.index).and_then(OnceLock::get),
        };
        if let Some(handles) = slot {
            return Arc::clone(handles);
        }
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
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
            (id.lora_name, id.priority) = (class.lora_name, class.priority);
        }
        let handles = Arc::new(bind(Some(id), labels));
        match class {
            None => entry.unclassed = Some(Arc::clone(&handles)),
            Some(class) => {
                let Some(slot) = entry.classed.get(class.index) else {
                    // A class beyond the cache's room: never made (the
                    // classes are counted from the same configuration).
                    return overflow();
                };
                let _ = slot.set(Arc::clone(&handles));
            }
        }
        self.label_sets.fetch_add(1, Ordering::Release);
        handles
    }
}
