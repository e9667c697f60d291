//! The meters the instruments are created on, and the creation of one
//! catalog family's instrument: its name, unit and description from the
//! family's catalog entry, written once for every kind of instrument.

use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter};
use opentelemetry::InstrumentationScope;

use super::tee;
use crate::catalog::{self, MetricDef};

/// The instrumentation scope name of every instrument the crate's own
/// provider creates.
pub const SCOPE_NAME: &str = env!("CARGO_PKG_NAME");

/// The meters instruments are created on: the main one, and with
/// exponential OTLP histograms and an explicit-bucket reader, the one
/// whose provider keeps the latency histograms' explicit buckets
/// ([`tee`]).
pub(crate) struct Meters {
    pub(super) main: Meter,
    pub(super) explicit_latency: Option<Meter>,
}

impl Meters {
    pub(super) fn one(meter: &Meter) -> Meters {
        Meters {
            main: meter.clone(),
            explicit_latency: None,
        }
    }
}

/// The crate's instrumentation scope: its name and version (the meters'
/// and the request spans' tracer's).
pub(super) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(SCOPE_NAME)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// The instrument of the catalog family `$def` on `$meter`, of the kind the
/// `Meter` method `$kind` builds (`u64_counter`, `f64_histogram`, …): the
/// API has one builder type per kind and no trait over them, so the part
/// they share is written here once.
macro_rules! family {
    ($meter:expr, $kind:ident, $def:expr) => {
        $meter
            .$kind($def.otel_name)
            .with_unit($def.unit)
            .with_description($def.help)
            .build()
    };
}

// The kinds that are only ever on the main meter.

pub(crate) fn u64_counter(meters: &Meters, def: &'static MetricDef) -> Counter<u64> {
    family!(meters.main, u64_counter, def)
}

pub(crate) fn f64_counter(meters: &Meters, def: &'static MetricDef) -> Counter<f64> {
    family!(meters.main, f64_counter, def)
}

pub(crate) fn u64_gauge(meters: &Meters, def: &'static MetricDef) -> Gauge<u64> {
    family!(meters.main, u64_gauge, def)
}

pub(crate) fn f64_gauge(meters: &Meters, def: &'static MetricDef) -> Gauge<f64> {
    family!(meters.main, f64_gauge, def)
}

/// A latency histogram is recorded into both meters when there are two.
pub(crate) fn f64_histogram(meters: &Meters, def: &'static MetricDef) -> Histogram<f64> {
    let on = |meter: &Meter| family!(meter, f64_histogram, def);
    match &meters.explicit_latency {
        Some(explicit) if catalog::is_latency_histogram(def) => {
            tee::TeeHistogram::histogram(on(&meters.main), on(explicit))
        }
        _ => on(&meters.main),
    }
}
