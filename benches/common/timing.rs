//! Timing helpers the benches share: they time their variants themselves,
//! interleaved in rounds, and report medians of the rounds. Each bench
//! includes this file and uses what it needs.
#![allow(dead_code)]

use std::time::Instant;

/// Nanoseconds per call of `call` over `calls` calls (`call` gets the call's
/// index).
pub(crate) fn ns_per_call(calls: u32, mut call: impl FnMut(u32)) -> f64 {
    let start = Instant::now();
    for i in 0..calls {
        call(i);
    }
    start.elapsed().as_nanos() as f64 / f64::from(calls)
}

/// The median of `values` (the upper one of an even count); sorts them.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
