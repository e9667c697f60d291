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
mod limits;
mod loads;
mod nixl;
mod offload;
mod outcome;
mod residency;
mod rng;
mod run;
mod sequence;
mod workload;

use crate::sources::RecordSink;

pub use config::{KvOffloadConnector, SimConfig, SimConfigError};
pub use outcome::{Progress, SimOutcome};

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
