//! A global allocator that counts, while switched on, the allocations and
//! bytes the process asks for, and the process's page faults and resident
//! size from `/proc`: what a piece of work costs in memory traffic, which
//! instruction counts do not show. Switched off it costs one relaxed load
//! per allocation, the same for every variant a bench compares.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Counts while [`Counting::measure`] runs, else passes through.
pub(crate) struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

impl Counting {
    fn count(size: usize) {
        if ON.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
            BYTES.fetch_add(size as u64, Relaxed);
        }
    }
}

// A global allocator cannot be written without `unsafe`: it forwards to the
// system allocator unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Counting::count(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Counting::count(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Counting::count(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Memory traffic per call of some work, averaged over the calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemoryCost {
    /// Allocations (a reallocation counts as one).
    pub allocations: f64,
    /// Bytes asked for, reallocations at their new size.
    pub bytes: f64,
    /// Minor page faults: pages the kernel had to map (and zero).
    pub minor_faults: f64,
    /// Growth of the resident set, in KiB, from before the first call to
    /// after the last.
    pub resident_growth_kib: f64,
}

/// Runs `work` `calls` times with counting on.
pub(crate) fn measure(calls: u32, mut work: impl FnMut()) -> MemoryCost {
    let (faults_before, resident_before) = (minor_faults(), resident_kib());
    ALLOCATIONS.store(0, Relaxed);
    BYTES.store(0, Relaxed);
    ON.store(true, Relaxed);
    for _ in 0..calls {
        work();
    }
    ON.store(false, Relaxed);
    let per_call = |n: u64| n as f64 / f64::from(calls);
    MemoryCost {
        allocations: per_call(ALLOCATIONS.load(Relaxed)),
        bytes: per_call(BYTES.load(Relaxed)),
        minor_faults: per_call(minor_faults().saturating_sub(faults_before)),
        resident_growth_kib: resident_kib() as f64 - resident_before as f64,
    }
}

/// The process's minor page faults so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after it do not.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after_name
        .split_whitespace()
        .nth(7)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

/// The process's resident set in KiB (`VmRSS` of `/proc/self/status`).
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
