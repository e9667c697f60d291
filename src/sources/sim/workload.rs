//! The workload: Poisson (open loop) or fixed-concurrency (closed loop)
//! arrivals, lognormal prompt and output lengths, client aborts.

use super::config::SimConfig;
use super::rng::Rng;
use crate::protocol::FinishReason;

/// Spread of the lognormal length distributions (log space).
const LENGTH_SIGMA: f64 = 0.6;
/// `max_tokens` as a multiple of the mean output length: longer draws finish `length`.
const MAX_TOKENS_FACTOR: f64 = 2.0;
/// Mean time after arrival at which an aborting client gives up, seconds.
const MEAN_ABORT_AFTER: f64 = 8.0;

/// One simulated request as the workload draws it.
#[derive(Debug, Clone)]
pub(crate) struct SimRequest {
    pub(crate) id: String,
    pub(crate) engine: u32,
    pub(crate) prompt_len: u32,
    pub(crate) max_tokens: u32,
    /// Tokens generated before it finishes.
    pub(crate) output_len: u32,
    pub(crate) finish: FinishReason,
    /// When the client aborts, if it does.
    pub(crate) abort_at: Option<f64>,
    /// The LoRA adapter it asks for, when the models are adapters.
    pub(crate) adapter: Option<u32>,
    /// High priority, under priority scheduling.
    pub(crate) high_priority: bool,
}

/// Draws requests in a deterministic order from one seeded generator.
pub(crate) struct Workload {
    /// Arrivals and request shapes: independent of scheduling, so a seed
    /// gives the same requests whatever the engine configuration.
    rng: Rng,
    /// Token ids, drawn as the engines run.
    tokens: Rng,
    /// LoRA adapters, when the models are adapters (a stream of its own, so
    /// that the other draws stay those of the same seed without adapters).
    adapters: Option<(Rng, u32)>,
    /// High-priority draws and their chance, under priority scheduling (a
    /// stream of its own, for the same reason).
    priority: Option<(Rng, f64)>,
    issued: u64,
    prompt_len: f64,
    output_len: f64,
    /// No request may need more KV than one engine has, or it could never finish.
    max_tokens_per_request: u32,
    abort_rate: f64,
    engines: u32,
    rate: f64,
}

impl Workload {
    pub(crate) fn new(config: &SimConfig) -> Self {
        let capacity = config.kv_blocks.saturating_mul(config.block_size);
        Workload {
            rng: Rng::new(config.seed),
            tokens: Rng::new(config.seed.wrapping_add(1)),
            adapters: config
                .lora_adapters
                .then(|| (Rng::new(config.seed.wrapping_add(2)), config.models.max(1))),
            priority: (config.priority_fraction > 0.0).then(|| {
                (
                    Rng::new(config.seed.wrapping_add(3)),
                    config.priority_fraction,
                )
            }),
            issued: 0,
            prompt_len: config.prompt_len,
            output_len: config.output_len,
            max_tokens_per_request: config.max_model_len.min(capacity).max(2),
            abort_rate: config.abort_rate,
            engines: config.engines.max(1),
            rate: config.rate,
        }
    }

    /// Time from one open-loop arrival to the next.
    pub(crate) fn interarrival(&mut self) -> f64 {
        self.rng.exponential(1.0 / self.rate)
    }

    /// The next request, arriving at `arrival`.
    pub(crate) fn request(&mut self, arrival: f64) -> SimRequest {
        self.issued += 1;
        let limit = self.max_tokens_per_request;
        let prompt_len =
            (self.rng.lognormal(self.prompt_len, LENGTH_SIGMA).round() as u32).clamp(1, limit - 1);
        let max_tokens = ((self.output_len * MAX_TOKENS_FACTOR).round() as u32)
            .max(1)
            .min(limit - prompt_len);
        let drawn = (self.rng.lognormal(self.output_len, LENGTH_SIGMA).round() as u32).max(1);
        let (output_len, finish) = if drawn >= max_tokens {
            (max_tokens, FinishReason::Length)
        } else {
            (drawn, FinishReason::Stop)
        };
        let abort_at = self
            .rng
            .chance(self.abort_rate)
            .then(|| arrival + self.rng.exponential(MEAN_ABORT_AFTER));
        SimRequest {
            id: format!("sim-{}", self.issued),
            engine: self.rng.below(u64::from(self.engines)) as u32,
            prompt_len,
            max_tokens,
            output_len,
            finish,
            abort_at,
            adapter: self
                .adapters
                .as_mut()
                .map(|(rng, count)| rng.below(u64::from(*count)) as u32),
            high_priority: self
                .priority
                .as_mut()
                .is_some_and(|(rng, fraction)| rng.chance(*fraction)),
        }
    }

    /// A token id for a generated token (only its count matters downstream).
    pub(crate) fn token(&mut self) -> u32 {
        self.tokens.below(32_000) as u32
    }
}
