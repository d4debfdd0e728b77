//! Two more views of one shape's candidates, beside the sorted chart of [`crate::chart`]:
//! - **best so far**: the fastest time found after each candidate, in the order the candidates
//!   were made (job order: the order they are claimed in, and for a search close to the order
//!   it chose them), to see whether more candidates would still pay;
//! - **each parameter's effect** (a slice plot, as optuna-dashboard draws it): per parameter,
//!   every candidate's time against that parameter's value, to see which parameters matter and
//!   which values win.
//!
//! Inline SVG like the rest of the dashboard; times on a logarithmic axis.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::chart::ShapeTimes;
use crate::esc;

const W: f64 = 760.0;
const H: f64 = 220.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 34.0;

/// The valid candidates: parameters and time, in job order.
fn valid(t: &ShapeTimes) -> Vec<(&str, f64)> {
    t.candidates
        .iter()
        .filter(|(_, us)| us.is_finite() && *us > 0.0)
        .map(|(p, us)| (p.as_str(), *us))
        .collect()
}

/// A log scale from `lo` to `hi` onto the plot's height.
fn log_y(lo: f64, hi: f64, top: f64, bottom: f64) -> impl Fn(f64) -> f64 {
    let (llo, lhi) = ((lo * 0.9).ln(), (hi * 1.1).ln());
    let span = (lhi - llo).max(1e-9);
    move |us: f64| top + (bottom - top) * (1.0 - (us.ln() - llo) / span)
}

/// Time labels on the left axis at `lo`, the middle and `hi`, leaving out any that would
/// overlap one already drawn, with enough decimals to tell close times apart.
pub fn time_ticks(svg: &mut String, lo: f64, hi: f64, y: &dyn Fn(f64) -> f64, right: f64) {
    let decimals = if hi / lo < 1.01 {
        3
    } else if hi / lo < 1.2 {
        2
    } else {
        1
    };
    let mut drawn: Vec<f64> = Vec::new();
    for us in [lo, (lo * hi).sqrt(), hi] {
        let yy = y(us);
        if drawn.iter().any(|d| (d - yy).abs() < 14.0) {
            continue;
        }
        drawn.push(yy);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{right:.1}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#e3e6eb\"/>\
             <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{us:.decimals$} µs</text>",
            LEFT - 6.0,
            yy + 4.0,
        );
    }
}

/// The best time found after each candidate, as a step line.
pub fn best_so_far(t: &ShapeTimes) -> String {
    let v = valid(t);
    if v.len() < 2 {
        return String::new();
    }
    let lo = v.iter().map(|c| c.1).fold(f64::MAX, f64::min);
    let hi = v.iter().map(|c| c.1).fold(0.0, f64::max);
    let y = log_y(lo, hi, TOP, H - BOTTOM);
    let n = v.len();
    let x = |i: usize| LEFT + (W - LEFT - RIGHT) * i as f64 / (n - 1) as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"best-so-far\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"best time so far, candidate by candidate\">"
    );
    time_ticks(&mut svg, lo, hi, &y, W - RIGHT);
    let mut best = f64::MAX;
    let mut points = String::new();
    let mut improvements = 0;
    for (i, (params, us)) in v.iter().enumerate() {
        let _ = write!(
            svg,
            "<circle class=\"tried\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"#9aa7bd\"><title>{} : {us:.2} µs</title></circle>",
            x(i),
            y(*us),
            esc(params)
        );
        if *us < best {
            if best < f64::MAX {
                let _ = write!(points, "{:.1},{:.1} ", x(i), y(best));
            }
            best = *us;
            improvements += 1;
        }
        let _ = write!(points, "{:.1},{:.1} ", x(i), y(best));
    }
    let _ = write!(
        svg,
        "<polyline class=\"best\" points=\"{}\" fill=\"none\" stroke=\"#b3261e\" stroke-width=\"2\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">best so far after each of {n} candidates, in the order they were made ({improvements} improvements)</text></svg>",
        points.trim_end(),
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 10.0
    );
    svg
}

/// `A=1,B=x` as (name, value) pairs.
fn pairs(params: &str) -> Vec<(&str, &str)> {
    params
        .split(',')
        .filter_map(|p| p.split_once('='))
        .collect()
}

/// One small plot per parameter that takes more than one value: every candidate's time
/// against the parameter's value, the values in numeric order where they are numbers.
pub fn parameter_effects(t: &ShapeTimes) -> String {
    let v = valid(t);
    if v.len() < 2 {
        return String::new();
    }
    let lo = v.iter().map(|c| c.1).fold(f64::MAX, f64::min);
    let hi = v.iter().map(|c| c.1).fold(0.0, f64::max);
    // name → value → times, names in first-seen order.
    let mut names: Vec<&str> = Vec::new();
    let mut by: BTreeMap<&str, BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for (params, us) in &v {
        for (name, value) in pairs(params) {
            if !names.contains(&name) {
                names.push(name);
            }
            by.entry(name)
                .or_default()
                .entry(value)
                .or_default()
                .push(*us);
        }
    }
    let (pw, ph) = (360.0, 180.0);
    let mut out = String::from("<div id=\"parameter-effects\">");
    for name in names {
        let values = &by[name];
        if values.len() < 2 {
            continue;
        }
        let mut order: Vec<&str> = values.keys().copied().collect();
        order.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => x.total_cmp(&y),
            _ => a.cmp(b),
        });
        let y = log_y(lo, hi, TOP, ph - BOTTOM);
        let k = order.len();
        let x = |i: usize| LEFT + (pw - LEFT - RIGHT) * (i as f64 + 0.5) / k as f64;
        let _ = write!(
            out,
            "<svg class=\"effect\" data-param=\"{n}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{pw}\" \
             height=\"{ph}\" viewBox=\"0 0 {pw} {ph}\" role=\"img\" aria-label=\"time against {n}\">",
            n = esc(name)
        );
        time_ticks(&mut out, lo, hi, &y, pw - RIGHT);
        // Value labels: every one when they fit, else every other one.
        let step = if k * 40 > (pw - LEFT - RIGHT) as usize {
            2
        } else {
            1
        };
        for (i, value) in order.iter().enumerate() {
            for us in &values[value] {
                let _ = write!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#3b5b8c\" fill-opacity=\"0.6\"><title>{}={} : {us:.2} µs</title></circle>",
                    x(i),
                    y(*us),
                    esc(name),
                    esc(value)
                );
            }
            if i % step == 0 {
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
                    x(i),
                    ph - BOTTOM + 14.0,
                    esc(value)
                );
            }
        }
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">{}</text></svg>",
            LEFT + (pw - LEFT - RIGHT) / 2.0,
            ph - 4.0,
            esc(name)
        );
    }
    out.push_str("</div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(c: &[(&str, f64)]) -> ShapeTimes {
        ShapeTimes {
            candidates: c.iter().map(|(p, t)| (p.to_string(), *t)).collect(),
            winner_runs: vec![],
            failed: 0,
        }
    }

    #[test]
    fn the_best_so_far_steps_down_at_each_improvement() {
        let t = times(&[("B=1", 30.0), ("B=2", 20.0), ("B=3", 25.0), ("B=4", 10.0)]);
        let svg = best_so_far(&t);
        assert!(
            svg.contains("(3 improvements)"),
            "30, then 20, then 10: {svg}"
        );
        assert_eq!(svg.matches("<circle class=\"tried\"").count(), 4);
    }

    #[test]
    fn each_parameter_with_several_values_gets_a_plot_in_numeric_order() {
        let t = times(&[("BM=64,K=a", 30.0), ("BM=8,K=a", 20.0), ("BM=16,K=a", 25.0)]);
        let html = parameter_effects(&t);
        assert_eq!(
            html.matches("<svg class=\"effect\"").count(),
            1,
            "K has one value: {html}"
        );
        let first = html.find(">8</text>").unwrap();
        let second = html.find(">16</text>").unwrap();
        let third = html.find(">64</text>").unwrap();
        assert!(first < second && second < third, "{html}");
    }

    #[test]
    fn close_times_get_labels_that_do_not_overlap() {
        let y = log_y(10.0, 10.02, TOP, H - BOTTOM);
        let mut svg = String::new();
        time_ticks(&mut svg, 10.0, 10.02, &y, W - RIGHT);
        let labels: Vec<&str> = svg
            .match_indices("µs</text>")
            .map(|(i, _)| &svg[..i])
            .collect();
        assert!(!labels.is_empty());
        assert!(
            svg.contains("10.000 µs"),
            "three decimals for times 0.2 % apart: {svg}"
        );
        // Every label drawn is at least 14 px from the others.
        let ys: Vec<f64> = svg
            .split("<text class=\"tick\"")
            .skip(1)
            .map(|s| {
                let a = s.find("y=\"").unwrap() + 3;
                let b = a + s[a..].find('"').unwrap();
                s[a..b].parse().unwrap()
            })
            .collect();
        for (i, a) in ys.iter().enumerate() {
            for b in &ys[i + 1..] {
                assert!((a - b).abs() >= 14.0, "{ys:?}");
            }
        }
    }
}
