//! The engine simulator: a vLLM-style continuous-batching engine fleet
//! (scheduler, paged KV cache, workload) that emits engine-core records.
//!
//! It drives the same pipeline as `replay`: every record goes to a sink (the
//! tracker, a JSONL recorder, a remote ingest stream). Time is virtual by
//! default (a run takes a fraction of its simulated duration); with
//! [`SimConfig::realtime`] steps are paced to the wall clock.
//!
//! ```
//! use vllm_otel_metrics::protocol::Record;
//! use vllm_otel_metrics::sources::sim::{simulate, SimConfig};
//!
//! let mut config = SimConfig::default();
//! config.duration = 5.0;
//! let mut outputs = 0;
//! let outcome = simulate(&config, &mut |record: &Record| {
//!     if let Record::Outputs(batch) = record {
//!         outputs += batch.outputs.len();
//!     }
//! }, &mut |_| {});
//! assert!(outcome.finished > 0 && outputs > 0);
//! ```

mod config;
mod engine;

mod loads;
mod nixl;
mod offload;
mod residency;
mod rng;
mod run;
mod sequence;
mod workload;

use std::collections::BTreeMap;

use crate::sources::RecordSink;

pub use config::{KvOffloadConnector, SimConfig, SimConfigError};

/// Engine clock at simulated time 0 (a monotonic clock reads an arbitrary origin).
const ENGINE_CLOCK_ORIGIN: f64 = 1000.0;
/// Frontend wall clock at simulated time 0 in virtual-time runs (fixed so a
/// seed reproduces the same trace).
const VIRTUAL_WALL_ORIGIN: f64 = 1_700_000_000.0;
/// Engine-to-frontend transport delay of an output batch.
const TRANSPORT_DELAY: f64 = 0.0005;

/// What a run did, beyond the records it emitted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimOutcome {
    /// Requests that arrived.
    pub requests: u64,
    /// Requests that finished (any reason but a client abort).
    pub finished: u64,
    /// Requests aborted by their client.
    pub aborted: u64,
    /// Preemption events.
    pub preemptions: u64,
    /// Engine steps.
    pub steps: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Simulated seconds until the last request left.
    pub simulated_seconds: f64,
    /// Highest KV-cache usage any engine reached (0 to 1).
    pub peak_kv_usage: f64,
    /// Preemptions per terminated request, by count (for tests and reports).
    pub preemptions_per_request: BTreeMap<u32, u64>,
}

/// Progress of a running simulation, for progress displays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Simulated seconds so far.
    pub simulated: f64,
    /// Of [`SimConfig::duration`].
    pub duration: f64,
    /// Requests so far.
    pub requests: u64,
    /// Preemptions so far.
    pub preemptions: u64,
}

/// Runs a simulation, handing every record to `sink` in time order and
/// progress to `progress` about every simulated second.
///
/// One loop over named steps: the next event in simulated time is an
/// arrival, an engine step, an idle engine's sleep timer or a weight update
/// (`run::Run` holds the state and does each).
pub fn simulate(
    config: &SimConfig,
    sink: &mut dyn RecordSink,
    progress: &mut dyn FnMut(Progress),
) -> SimOutcome {
    let mut run = run::Run::new(config);
    run.announce_engines(sink);
    while let Some(next) = run.next_event() {
        run.advance_to(&next, progress);
        match next {
            run::Next::Arrival(t) => run.arrive(t, sink),
            run::Next::Sleep(e, t) => run.sleep(e, t, sink),
            run::Next::WeightUpdate(t) => run.update_weights(t, sink),
            run::Next::Step(e, t) => run.step(e, t, sink),
        }
    }
    run.finish(progress)
}
