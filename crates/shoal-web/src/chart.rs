//! The candidate chart: every valid candidate of one shape as a dot, sorted by time, on a
//! logarithmic time axis (a space's times span orders of magnitude, and what matters near the top
//! is ratios), with the winner drawn apart and its run-to-run spread as a band across the chart:
//! any candidate inside the band is as fast as the winner within the noise.

use std::fmt::Write;

use crate::esc;

/// What the chart needs of one shape.
#[derive(Clone, Debug, Default)]
pub struct ShapeTimes {
    /// Every valid candidate: its parameters (for the tooltip) and time in µs.
    pub candidates: Vec<(String, f64)>,
    /// The winner's timed runs (µs), for its spread.
    pub winner_runs: Vec<f64>,
    /// Candidates that failed, not drawn.
    pub failed: u32,
}

const W: f64 = 760.0;
const H: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 40.0;

/// The chart as an inline `<svg>`.
pub fn candidate_times(t: &ShapeTimes) -> String {
    let mut sorted: Vec<&(String, f64)> = t
        .candidates
        .iter()
        .filter(|(_, us)| us.is_finite() && *us > 0.0)
        .collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    if sorted.is_empty() {
        return "<p class=\"muted\">No valid candidate to chart.</p>".into();
    }
    let lo = sorted[0]
        .1
        .min(t.winner_runs.iter().copied().fold(f64::MAX, f64::min));
    let hi = sorted[sorted.len() - 1]
        .1
        .max(t.winner_runs.iter().copied().fold(0.0, f64::max));
    // A little room above and below, on the log scale.
    let (llo, lhi) = ((lo * 0.9).ln(), (hi * 1.1).ln());
    let span = (lhi - llo).max(1e-9);
    let y = |us: f64| TOP + (H - TOP - BOTTOM) * (1.0 - (us.ln() - llo) / span);
    let n = sorted.len();
    let x = |i: usize| {
        if n == 1 {
            LEFT + (W - LEFT - RIGHT) / 2.0
        } else {
            LEFT + (W - LEFT - RIGHT) * i as f64 / (n - 1) as f64
        }
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"candidate-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"time of every candidate, sorted\">"
    );
    // The winner's spread: the band between its fastest and slowest timed run.
    let runs: Vec<f64> = t
        .winner_runs
        .iter()
        .copied()
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    if runs.len() >= 2 {
        let (rlo, rhi) = runs
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), r| (a.min(*r), b.max(*r)));
        let _ = write!(
            svg,
            "<rect class=\"spread\" x=\"{LEFT}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" \
             fill=\"#2f7d4f\" fill-opacity=\"0.15\"><title>winner's spread: {rlo:.2}–{rhi:.2} µs</title></rect>",
            y(rhi),
            W - LEFT - RIGHT,
            (y(rlo) - y(rhi)).max(1.0)
        );
    }
    // Axes: the fastest and slowest times, and a middle tick, none over another.
    crate::plots::time_ticks(&mut svg, lo, hi, &y, W - RIGHT);
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">{n} valid candidates, fastest first{}</text>",
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 10.0,
        if t.failed > 0 {
            format!(" ({} failed, not drawn)", t.failed)
        } else {
            String::new()
        }
    );
    for (i, (params, us)) in sorted.iter().enumerate().rev() {
        let winner = i == 0;
        let _ = write!(
            svg,
            "<circle class=\"{cls}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"{r}\" fill=\"{fill}\"><title>{} : {us:.2} µs</title></circle>",
            x(i),
            y(*us),
            esc(params),
            cls = if winner { "winner" } else { "candidate" },
            r = if winner { 6 } else { 3 },
            fill = if winner { "#b3261e" } else { "#3b5b8c" },
        );
    }
    svg.push_str("</svg>");
    svg
}
