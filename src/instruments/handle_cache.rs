//! The handle cache: the handles of each label set, bound once, up to a
//! limit (the Views' cardinality limit), after which new label sets share
//! the overflow label set's handles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use opentelemetry::KeyValue;

use super::attributes::base_labels;

/// Handles per label set, up to a limit (the Views' cardinality limit);
/// later label sets share the overflow handles.
pub(super) struct HandleCache<H> {
    by_label_set: RwLock<HashMap<String, HashMap<u32, Arc<H>>>>,
    /// Label sets in `by_label_set`; once at `limit`, it never grows again.
    label_sets: AtomicUsize,
    overflow: OnceLock<Arc<H>>,
    limit: usize,
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
    /// its attributes.
    pub(super) fn get(
        &self,
        model_name: &str,
        engine: u32,
        bind: impl Fn(Option<(&str, u32)>, Vec<KeyValue>) -> H,
    ) -> Arc<H> {
        let overflow = || {
            Arc::clone(
                self.overflow
                    .get_or_init(|| Arc::new(bind(None, base_labels(None)))),
            )
        };
        if let Some(handles) = self
            .by_label_set
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model_name)
            .and_then(|by_engine| by_engine.get(&engine))
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
        if let Some(handles) = cache.get(model_name).and_then(|e| e.get(&engine)) {
            return Arc::clone(handles);
        }
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
        }
        let label_set = Some((model_name, engine));
        let handles = Arc::new(bind(label_set, base_labels(label_set)));
        cache
            .entry(model_name.to_owned())
            .or_default()
            .insert(engine, Arc::clone(&handles));
        self.label_sets.fetch_add(1, Ordering::Release);
        handles
    }
}
