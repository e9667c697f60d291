//! The handle cache: the handles of each label set, bound once, up to a
//! limit (the Views' cardinality limit), after which new label sets share
//! the overflow label set's handles.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

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
    by_label_set: RwLock<Maps<H>>,
    /// Label sets in `by_label_set`; once at `limit`, it never grows again.
    label_sets: AtomicUsize,
    overflow: OnceLock<Arc<H>>,
    limit: usize,
}

/// Label sets by model name, then by engine; those of a class (with
/// `--attribute`) apart, by engine (low 32 bits) and class key (high), so
/// that a label set without a class is found exactly as without attribution.
struct Maps<H> {
    plain: ByModel<u32, H>,
    classed: ByModel<u64, H>,
}

type ByModel<K, H> = HashMap<String, HashMap<K, Arc<H>>>;

/// One of [`Maps`]' two maps, to read or to write.
struct Select<K, H> {
    read: fn(&Maps<H>) -> &ByModel<K, H>,
    write: fn(&mut Maps<H>) -> &mut ByModel<K, H>,
}

impl<H> Maps<H> {
    const fn plain() -> Select<u32, H> {
        Select {
            read: |m| &m.plain,
            write: |m| &mut m.plain,
        }
    }

    const fn classed() -> Select<u64, H> {
        Select {
            read: |m| &m.classed,
            write: |m| &mut m.classed,
        }
    }
}

impl<H> Default for Maps<H> {
    fn default() -> Self {
        Maps {
            plain: HashMap::new(),
            classed: HashMap::new(),
        }
    }
}

impl<H> HandleCache<H> {
    pub(super) fn new(limit: usize) -> Self {
        HandleCache {
            by_label_set: RwLock::default(),
            label_sets: AtomicUsize::new(0),
            overflow: OnceLock::new(),
            limit,
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
        match class {
            None => self.get_in(Maps::plain(), model_name, engine, engine, None, bind),
            Some(class) => {
                let key = u64::from(engine) | u64::from(class.key) << 32;
                self.get_in(Maps::classed(), model_name, engine, key, Some(class), bind)
            }
        }
    }

    fn get_in<K: Copy + Eq + Hash>(
        &self,
        map: Select<K, H>,
        model_name: &str,
        engine: u32,
        key: K,
        class: Option<&ResolvedClass<'_>>,
        bind: impl Fn(Option<LabelSetId<'_>>, Vec<KeyValue>) -> H,
    ) -> Arc<H> {
        let overflow = || {
            Arc::clone(
                self.overflow
                    .get_or_init(|| Arc::new(bind(None, base_labels(None)))),
            )
        };
        if let Some(handles) = (map.read)(
            &self
                .by_label_set
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
        .get(model_name)
        .and_then(|by_engine| by_engine.get(&key))
        {
            return Arc::clone(handles);
        }
        // A full cache stays full: new label sets skip the write lock.
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
        }
        let mut cache = self
            .by_label_set
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let cache = (map.write)(&mut cache);
        if let Some(handles) = cache.get(model_name).and_then(|e| e.get(&key)) {
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
        cache
            .entry(model_name.to_owned())
            .or_default()
            .insert(key, Arc::clone(&handles));
        self.label_sets.fetch_add(1, Ordering::Release);
        handles
    }
}
