//! The process families (`process_*`), read from `/proc` at each scrape.
//!
//! What Prometheus client libraries expose for a process: virtual and
//! resident memory, start time, CPU seconds, open and maximum file
//! descriptors. On systems without `/proc` the families are left out.

use std::borrow::Cow;

use super::snapshot::{Family, Series, Value};
use crate::catalog::{self, MetricDef};

/// Clock ticks per second of `/proc/self/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

fn family(def: &'static MetricDef, value: f64) -> Family {
    Family {
        name: Cow::Borrowed(def.vllm_name),
        help: Cow::Borrowed(def.help),
        kind: def.kind,
        value_type: def.value_type,
        series: vec![Series {
            labels: Vec::new(),
            value: Value::Scalar(value),
            exemplars: Vec::new(),
        }],
    }
}

/// A `Name:   value kB` line of `/proc/self/status`, in bytes.
fn status_bytes(status: &str, name: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kib: f64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024.0)
}

/// The process families, in [`catalog::telemetry::PROCESS`] order; empty where
/// `/proc` cannot be read.
pub(crate) fn families() -> Vec<Family> {
    read().unwrap_or_default()
}

fn read() -> Option<Vec<Family>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name, which may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let (utime, stime, start_ticks) = (field(14)?, field(15)?, field(22)?);
    let boot_time: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())?;
    Some(vec![
        family(
            &catalog::telemetry::PROCESS_VIRTUAL_MEMORY,
            status_bytes(&status, "VmSize:")?,
        ),
        family(
            &catalog::telemetry::PROCESS_RESIDENT_MEMORY,
            status_bytes(&status, "VmRSS:")?,
        ),
        family(
            &catalog::telemetry::PROCESS_START_TIME,
            boot_time + start_ticks / TICKS_PER_SECOND,
        ),
        family(
            &catalog::telemetry::PROCESS_CPU,
            (utime + stime) / TICKS_PER_SECOND,
        ),
        family(&catalog::telemetry::PROCESS_OPEN_FDS, open_fds),
        family(&catalog::telemetry::PROCESS_MAX_FDS, max_fds),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_families_are_read_in_catalog_order() {
        let families = families();
        let names: Vec<&str> = families.iter().map(|f| f.name.as_ref()).collect();
        let expected: Vec<&str> = catalog::telemetry::PROCESS
            .iter()
            .map(|d| d.vllm_name)
            .collect();
        assert_eq!(names, expected);
        let value = |i: usize| match families[i].series[0].value {
            Value::Scalar(v) => v,
            _ => unreachable!(),
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(value(1) > 1e6, "resident memory {} bytes", value(1));
        assert!(
            (now - 3600.0..=now + 1.0).contains(&value(2)),
            "start {}",
            value(2)
        );
        assert!(
            value(4) >= 3.0 && value(4) <= value(5),
            "fds {} of {}",
            value(4),
            value(5)
        );
    }
}
