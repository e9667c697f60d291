//! The GenAI semantic-convention tier (`--semconv gen_ai`): its three
//! histograms, and the handles of one label set, bound per operation and
//! outcome on first use (docs/SEMANTICS.md §3c).
//!
//! A View can give a stream another name but not other attributes, so
//! these are instruments of their own, recorded beside vLLM's families at a
//! request's end. Each series is bound the first time it is observed: a
//! bound series is exported from its binding on, and the conventions'
//! series should not appear at zero for operations or errors that never
//! happened.

use std::sync::OnceLock;

use opentelemetry::metrics::{BoundHistogram, Histogram};
use opentelemetry::KeyValue;

use crate::catalog::semconv::{self, ERROR_TYPE, OPERATION_NAME};
use crate::protocol::{FinishReason, GenAiOperation};

use super::attributes::{shared_string, OVERFLOW_ATTRIBUTE};
use super::meters::{f64_histogram, Meters};

/// Which semantic conventions are recorded besides vLLM's families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Semconv {
    /// vLLM's families only.
    #[default]
    None,
    /// Also the GenAI model-server histograms (`gen_ai.server.*`).
    GenAi,
}

/// The tier's instruments, and the attributes every series carries
/// (`server.address`, `server.port` when configured).
#[derive(Debug)]
pub(crate) struct SemconvInstruments {
    request_duration: Histogram<f64>,
    time_to_first_token: Histogram<f64>,
    time_per_output_token: Histogram<f64>,
    server: Vec<KeyValue>,
}

impl SemconvInstruments {
    pub(crate) fn new(meter: &Meters, server: &SemconvServer) -> Self {
        let mut attributes = Vec::new();
        if let Some(address) = &server.address {
            attributes.push(KeyValue::new(semconv::SERVER_ADDRESS, address.clone()));
        }
        if let Some(port) = server.port {
            attributes.push(KeyValue::new(semconv::SERVER_PORT, i64::from(port)));
        }
        SemconvInstruments {
            request_duration: f64_histogram(meter, &semconv::REQUEST_DURATION),
            time_to_first_token: f64_histogram(meter, &semconv::TIME_TO_FIRST_TOKEN),
            time_per_output_token: f64_histogram(meter, &semconv::TIME_PER_OUTPUT_TOKEN),
            server: attributes,
        }
    }
}

/// The server the streams describe (`server.address`, `server.port`):
/// only the caller knows where the API server listens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SemconvServer {
    /// `server.address`, when set.
    pub address: Option<String>,
    /// `server.port`, when set.
    pub port: Option<u16>,
}

/// How a request ended, as `error.type` tells it.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Success,
    Abort,
    Error,
}

impl Outcome {
    fn of(reason: FinishReason) -> Outcome {
        match reason {
            FinishReason::Abort => Outcome::Abort,
            FinishReason::Error => Outcome::Error,
            FinishReason::Stop | FinishReason::Length | FinishReason::Repetition => {
                Outcome::Success
            }
        }
    }

    /// `error.type`, for a failure.
    fn error_type(self) -> Option<&'static str> {
        match self {
            Outcome::Success => None,
            Outcome::Abort => Some(FinishReason::Abort.as_str()),
            Outcome::Error => Some(FinishReason::Error.as_str()),
        }
    }
}

/// The series of one operation in one label set, each bound on first use.
#[derive(Default)]
struct OperationSeries {
    /// By [`Outcome`].
    request_duration: [OnceLock<BoundHistogram<f64>>; 3],
    time_to_first_token: OnceLock<BoundHistogram<f64>>,
    time_per_output_token: OnceLock<BoundHistogram<f64>>,
}

/// A request's end, as the semantic-convention streams observe it.
pub(crate) struct SemconvEnd {
    pub(crate) operation: GenAiOperation,
    pub(crate) reason: FinishReason,
    pub(crate) duration: f64,
    pub(crate) time_to_first_token: Option<f64>,
    pub(crate) time_per_output_token: Option<f64>,
}

/// The semantic-convention handles of one `(model_name, engine)` label set.
/// Label sets of one model share their series: the engine is no attribute.
pub(crate) struct SemconvHandles {
    request_duration: Histogram<f64>,
    time_to_first_token: Histogram<f64>,
    time_per_output_token: Histogram<f64>,
    /// Provider, models and server; or the overflow attribute.
    attributes: Vec<KeyValue>,
    overflow: bool,
    /// In [`GenAiOperation::ALL`] order.
    by_operation: [OperationSeries; GenAiOperation::ALL.len()],
}

impl SemconvHandles {
    /// The handles of `model_name`'s label set, or of the overflow label set.
    pub(crate) fn new(instruments: &SemconvInstruments, model_name: Option<&str>) -> Self {
        let attributes = match model_name {
            Some(model) => {
                let mut attributes = vec![
                    KeyValue::new(semconv::PROVIDER_NAME, semconv::PROVIDER),
                    KeyValue::new(semconv::REQUEST_MODEL, shared_string(model)),
                    KeyValue::new(semconv::RESPONSE_MODEL, shared_string(model)),
                ];
                attributes.extend(instruments.server.iter().cloned());
                attributes
            }
            None => vec![KeyValue::new(OVERFLOW_ATTRIBUTE, true)],
        };
        SemconvHandles {
            request_duration: instruments.request_duration.clone(),
            time_to_first_token: instruments.time_to_first_token.clone(),
            time_per_output_token: instruments.time_per_output_token.clone(),
            attributes,
            overflow: model_name.is_none(),
            by_operation: Default::default(),
        }
    }

    fn attributes(
        &self,
        operation: GenAiOperation,
        error_type: Option<&'static str>,
    ) -> Vec<KeyValue> {
        let mut attributes = self.attributes.clone();
        // The overflow series carries the overflow attribute alone.
        if !self.overflow {
            attributes.push(KeyValue::new(OPERATION_NAME, operation.as_str()));
            if let Some(error_type) = error_type {
                attributes.push(KeyValue::new(ERROR_TYPE, error_type));
            }
        }
        attributes
    }

    /// Records a request's end.
    pub(crate) fn record_end(&self, end: &SemconvEnd) {
        let series = &self.by_operation[end.operation as usize];
        let outcome = Outcome::of(end.reason);
        let error_type = outcome.error_type();
        let record = |cell: &OnceLock<BoundHistogram<f64>>,
                      histogram: &Histogram<f64>,
                      error_type: Option<&'static str>,
                      value: f64| {
            cell.get_or_init(|| histogram.bind(&self.attributes(end.operation, error_type)))
                .record(value);
        };
        let duration = &series.request_duration[outcome as usize];
        record(duration, &self.request_duration, error_type, end.duration);
        if error_type.is_some() {
            return;
        }
        if let Some(value) = end.time_to_first_token {
            record(
                &series.time_to_first_token,
                &self.time_to_first_token,
                None,
                value,
            );
        }
        if let Some(value) = end.time_per_output_token {
            record(
                &series.time_per_output_token,
                &self.time_per_output_token,
                None,
                value,
            );
        }
    }
}
