//! Series kept together in one struct behind one lock.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::data::Value;
use super::family::Series;

/// Spins before each yield when the group is held by another thread.
const SPINS_BEFORE_YIELD: u32 = 64;

/// Several series' state `S` behind one lock, so that updates made together
/// take one critical section instead of one atomic operation or lock per
/// series. Each series is exposed to its [`Family`](super::Family) through a
/// [`GroupSeries`] view that reads its part of `S`.
///
/// The lock is a test-and-set lock whose release is a plain store: one
/// atomic read-modify-write per critical section, where a `std` mutex takes
/// two (its release must look for sleeping waiters). Critical sections here
/// are a handful of additions, so a waiter spins briefly and then yields
/// instead of sleeping.
///
/// ```
/// use std::sync::Arc;
/// use vllm_otel_metrics::catalog::{GENERATION_TOKENS, NUM_PREEMPTIONS};
/// use vllm_otel_metrics::metrics::{data::Value, Family, Group, GroupSeries};
///
/// #[derive(Default)]
/// struct Step { tokens: u64, preemptions: u64 }
///
/// let group = Arc::new(Group::new(Step::default()));
/// let tokens = Family::new(&GENERATION_TOKENS, Vec::new());
/// assert!(tokens.insert(Vec::new(), GroupSeries::new(&group, 0, |s: &Step, _| Value::Counter(s.tokens))));
/// {
///     let mut step = group.lock();
///     step.tokens += 3;
///     step.preemptions += 1;
/// }
/// assert_eq!(tokens.collect().points[0].value, Value::Counter(3));
/// ```
#[derive(Debug, Default)]
pub struct Group<S> {
    locked: AtomicBool,
    state: UnsafeCell<S>,
}

// SAFETY: the state is only reached through a `GroupGuard`, and at most one
// guard exists at a time (the `locked` flag is acquired before one is made
// and released when it drops), so sharing the group shares `S` the way a
// mutex does: it needs `S: Send`.
unsafe impl<S: Send> Sync for Group<S> {}

/// Exclusive access to a [`Group`]'s state; releases the group when dropped.
#[derive(Debug)]
pub struct GroupGuard<'a, S> {
    group: &'a Group<S>,
    /// Makes the guard `Sync` only when `S` is, and `Send` only when `S` is
    /// `Send`, as a `&mut S` would be: sharing the guard shares `&S`.
    _access: PhantomData<&'a mut S>,
}

impl<S> Group<S> {
    /// A group holding `state`.
    pub fn new(state: S) -> Self {
        Group {
            locked: AtomicBool::new(false),
            state: UnsafeCell::new(state),
        }
    }

    /// Locks the group for a batch of updates (or a consistent read).
    ///
    /// Not re-entrant: a thread holding the guard must not lock the group
    /// again, directly or by collecting one of its series.
    #[inline]
    pub fn lock(&self) -> GroupGuard<'_, S> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        GroupGuard {
            group: self,
            _access: PhantomData,
        }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS_BEFORE_YIELD {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

impl<S> Deref for GroupGuard<'_, S> {
    type Target = S;

    fn deref(&self) -> &S {
        // SAFETY: this guard holds the lock (see `Sync` above).
        unsafe { &*self.group.state.get() }
    }
}

impl<S> DerefMut for GroupGuard<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        // SAFETY: this guard holds the lock, and `&mut self` makes the
        // returned borrow the only one.
        unsafe { &mut *self.group.state.get() }
    }
}

impl<S> Drop for GroupGuard<'_, S> {
    #[inline]
    fn drop(&mut self) {
        self.group.locked.store(false, Ordering::Release);
    }
}

/// One series of a [`Group`]: `read` turns the group's state into the
/// series' value; `slot` says which part (for reads shared by several series).
pub struct GroupSeries<S> {
    group: Arc<Group<S>>,
    slot: usize,
    read: fn(&S, usize) -> Value,
}

impl<S> GroupSeries<S> {
    /// The view of `slot` in `group`.
    pub fn new(group: &Arc<Group<S>>, slot: usize, read: fn(&S, usize) -> Value) -> Self {
        GroupSeries {
            group: Arc::clone(group),
            slot,
            read,
        }
    }
}

impl<S> std::fmt::Debug for GroupSeries<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSeries")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl<S: Send + 'static> Series for GroupSeries<S> {
    fn value(&self) -> Option<Value> {
        Some((self.read)(&self.group.lock(), self.slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads hammering one group lose no update.
    #[test]
    fn concurrent_updates_are_all_counted() {
        let group = Arc::new(Group::new((0u64, 0u64)));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let group = Arc::clone(&group);
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        let mut g = group.lock();
                        g.0 += 1;
                        g.1 += 2;
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(*group.lock(), (400_000, 800_000));
    }
}
