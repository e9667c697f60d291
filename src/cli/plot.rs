//! `simulate --sweep-kv-blocks … --plot FILE.svg`: the sweep as a chart a
//! person reads at a glance. Three panels share the swept axis: preemptions
//! per request; throughput and goodput (generated tokens/s of every request
//! and of those that met the SLO); and the SLO attainment. Where goodput
//! falls while throughput holds is the capacity an operator must not cross.
//!
//! Each point carries its exact value (`data-series`, `data-x`,
//! `data-value`), so that a test reads the chart back and compares it with
//! the table the same run printed.

use std::fmt::Write;

use super::summary::SweepRow;

const WIDTH: f64 = 720.0;
const PANEL_HEIGHT: f64 = 180.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const GAP: f64 = 50.0;

/// One line of a panel: its name, colour and `(x, value)` points.
struct Line {
    series: &'static str,
    colour: &'static str,
    points: Vec<(f64, f64)>,
}

/// The chart of `rows` (one per swept KV-block count), as SVG text.
pub(super) fn sweep_svg(rows: &[SweepRow]) -> String {
    let x: Vec<f64> = rows.iter().map(|r| f64::from(r.kv_blocks)).collect();
    let line = |series, colour, values: Vec<f64>| Line {
        series,
        colour,
        points: x.iter().copied().zip(values).collect(),
    };
    let mut panels = vec![(
        "preemptions per request",
        vec![line(
            "preemptions_per_request",
            "#b03a2e",
            rows.iter().map(|r| r.mean_preemptions).collect(),
        )],
    )];
    let mut tokens = vec![line(
        "throughput_tokens_per_s",
        "#2e86c1",
        rows.iter().map(|r| r.throughput).collect(),
    )];
    if rows.iter().all(|r| r.slo.is_some()) {
        tokens.push(line(
            "goodput_tokens_per_s",
            "#239b56",
            rows.iter()
                .map(|r| r.goodput_tokens_per_second().unwrap_or(0.0))
                .collect(),
        ));
    }
    panels.push(("generated tokens/s: throughput, goodput", tokens));
    if rows.iter().all(|r| r.slo.is_some()) {
        panels.push((
            "SLO attainment (share of requests)",
            vec![line(
                "slo_attainment",
                "#7d3c98",
                rows.iter()
                    .map(|r| r.slo.as_ref().map_or(0.0, |s| s.attainment()))
                    .collect(),
            )],
        ));
    }
    let height = TOP + panels.len() as f64 * (PANEL_HEIGHT + GAP);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let (x_min, x_max) = range(x.iter().copied());
    for (i, (title, lines)) in panels.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL_HEIGHT + GAP);
        let (_, y_max) = range(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)));
        let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
        let px = |v: f64| {
            LEFT + (v - x_min) / (x_max - x_min).max(f64::EPSILON) * (WIDTH - LEFT - RIGHT)
        };
        let py = |v: f64| top + PANEL_HEIGHT - v / y_max * PANEL_HEIGHT;
        let _ = writeln!(svg, r#"<text x="{LEFT}" y="{}">{title}</text>"#, top - 8.0);
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{top}" width="{}" height="{PANEL_HEIGHT}" fill="none" stroke="#999"/>"##,
            WIDTH - LEFT - RIGHT
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text><text x="{}" y="{}" text-anchor="end">0</text>"#,
            LEFT - 6.0,
            top + 10.0,
            short(y_max),
            LEFT - 6.0,
            top + PANEL_HEIGHT
        );
        for (j, l) in lines.iter().enumerate() {
            let points: Vec<String> = l
                .points
                .iter()
                .map(|&(x, v)| format!("{:.1},{:.1}", px(x), py(v)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline data-series="{}" fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
                l.series,
                l.colour,
                points.join(" ")
            );
            for &(x, v) in &l.points {
                let _ = writeln!(
                    svg,
                    r#"<circle data-series="{}" data-x="{x}" data-value="{v}" cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                    l.series,
                    px(x),
                    py(v),
                    l.colour
                );
            }
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" fill="{}">{}</text>"#,
                LEFT + 8.0,
                top + 16.0 + j as f64 * 14.0,
                l.colour,
                l.series
            );
        }
        for &v in &x {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{v}</text>"#,
                px(v),
                top + PANEL_HEIGHT + 14.0
            );
        }
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">KV blocks per engine</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        height - 8.0
    );
    svg.push_str("</svg>\n");
    svg
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// An axis label: few digits.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
