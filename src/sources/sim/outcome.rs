//! What a run reports besides its records: [`SimOutcome`] at the end and
//! [`Progress`] on the way.

use std::collections::BTreeMap;

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
    /// Of [`SimConfig::duration`](super::SimConfig::duration).
    pub duration: f64,
    /// Requests so far.
    pub requests: u64,
    /// Preemptions so far.
    pub preemptions: u64,
}
