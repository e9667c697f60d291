//! Text exposition encoders: Prometheus text 0.0.4 and OpenMetrics 1.0.
//!
//! Numbers are written as vLLM's Rust frontend writes them (the `dtoa` shortest
//! round-trip form, so `le="1.0"`, `le="0.001"`, `le="2560.0"`); counts and
//! integer-valued families without a decimal point.

use std::fmt::Write;

use super::snapshot::{Family, Series, Value};
use crate::catalog::{Kind, ValueType};

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text (ends with `# EOF`).
    OpenMetrics,
}

impl Format {
    /// The HTTP `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format a scrape asks for with its `Accept` header.
    ///
    /// ```
    /// use vllm_otel_metrics::export::prometheus::Format;
    /// assert_eq!(Format::negotiate(Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")), Format::OpenMetrics);
    /// assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
    /// assert_eq!(Format::negotiate(None), Format::Text);
    /// ```
    pub fn negotiate(accept: Option<&str>) -> Format {
        let wants_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or("");
                let refused = parts.any(|p| p.replace(' ', "") == "q=0");
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if wants_openmetrics {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

/// Writes a float as vLLM does: shortest round trip, always with a decimal
/// point or exponent (`1.0`, `0.001`, `1e-7`), `+Inf`/`-Inf`/`NaN` for the rest.
///
/// ```
/// use vllm_otel_metrics::export::prometheus::format_float;
/// assert_eq!(format_float(1.0), "1.0");
/// assert_eq!(format_float(0.001), "0.001");
/// assert_eq!(format_float(2560.0), "2560.0");
/// assert_eq!(format_float(f64::INFINITY), "+Inf");
/// ```
pub fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value == f64::INFINITY {
        "+Inf".to_owned()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        dtoa::Buffer::new().format(value).to_owned()
    }
}

fn format_value(value: f64, value_type: ValueType) -> String {
    // Snapshot values are floats; counts below 2^53 are exact in them.
    if value_type == ValueType::Integer
        && value.fract() == 0.0
        && value.abs() < 9.007_199_254_740_992e15
    {
        format!("{}", value as i64)
    } else {
        format_float(value)
    }
}

fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(help: &str, format: Format) -> String {
    let mut out = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if format == Format::OpenMetrics => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

fn write_labels(out: &mut String, labels: &[(String, String)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let extra = le.map(|le| ("le", le));
    for (i, (name, value)) in labels
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .chain(extra)
        .enumerate()
    {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        escape_label_value(value, out);
        out.push('"');
    }
    out.push('}');
}

fn write_sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(String, String)],
    le: Option<&str>,
    value: &str,
) {
    out.push_str(name);
    out.push_str(suffix);
    write_labels(out, labels, le);
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// The `le` strings of a histogram family's bounds, formatted once for all
/// its series (every series of a family has the same bounds).
#[derive(Default)]
struct LeCache {
    bounds: Vec<f64>,
    les: Vec<String>,
}

impl LeCache {
    fn les(&mut self, buckets: &[(f64, u64)]) -> &[String] {
        let same = self.bounds.len() == buckets.len()
            && self.bounds.iter().zip(buckets).all(|(a, (b, _))| a == b);
        if !same {
            self.bounds = buckets.iter().map(|(upper, _)| *upper).collect();
            self.les = self.bounds.iter().map(|b| format_float(*b)).collect();
        }
        &self.les
    }
}

fn write_series(out: &mut String, family: &Family, series: &Series, les: &mut LeCache) {
    let name = family.name.as_ref();
    match &series.value {
        Value::Scalar(v) => {
            let suffix = if family.kind == Kind::Counter {
                "_total"
            } else {
                ""
            };
            write_sample(
                out,
                name,
                suffix,
                &series.labels,
                None,
                &format_value(*v, family.value_type),
            );
        }
        Value::Histogram {
            buckets,
            sum,
            count,
        } => {
            for ((_, cumulative), le) in buckets.iter().zip(les.les(buckets)) {
                write_sample(
                    out,
                    name,
                    "_bucket",
                    &series.labels,
                    Some(le),
                    &cumulative.to_string(),
                );
            }
            write_sample(
                out,
                name,
                "_bucket",
                &series.labels,
                Some("+Inf"),
                &count.to_string(),
            );
            write_sample(out, name, "_sum", &series.labels, None, &format_float(*sum));
            write_sample(
                out,
                name,
                "_count",
                &series.labels,
                None,
                &count.to_string(),
            );
        }
    }
}

/// Encodes families in `format`. Every family gets its HELP and TYPE lines,
/// also before its first series exists.
///
/// ```
/// use vllm_otel_metrics::catalog::{Kind, ValueType};
/// use vllm_otel_metrics::export::prometheus::{encode, Family, Format, Series, Value};
///
/// let family = Family {
///     name: "vllm:num_preemptions".into(),
///     help: "Cumulative number of preemption events.".into(),
///     kind: Kind::Counter,
///     value_type: ValueType::Integer,
///     series: vec![Series { labels: vec![("engine".into(), "0".into())], value: Value::Scalar(2.0) }],
/// };
/// let text = encode(&[family], Format::Text);
/// let lines: Vec<&str> = text.lines().collect();
/// assert_eq!(lines, [
///     "# HELP vllm:num_preemptions_total Cumulative number of preemption events.",
///     "# TYPE vllm:num_preemptions_total counter",
///     "vllm:num_preemptions_total{engine=\"0\"} 2",
/// ]);
/// ```
pub fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::new();
    for family in families {
        // Text 0.0.4 names a counter's metadata by its sample name; OpenMetrics by its family.
        let meta_name = match (format, family.kind) {
            (Format::Text, Kind::Counter) => format!("{}_total", family.name),
            _ => family.name.to_string(),
        };
        let _ = writeln!(
            out,
            "# HELP {meta_name} {}",
            escape_help(&family.help, format)
        );
        let _ = writeln!(out, "# TYPE {meta_name} {}", family.kind.prometheus_type());
        let mut les = LeCache::default();
        for series in &family.series {
            write_series(&mut out, family, series, &mut les);
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}
