//! Adaptive repetitions: how many timed runs a candidate gets, decided run by run against the
//! best time its shape has so far.
//!
//! A fixed `repeat = N` spends N runs on every candidate, most of which are clearly slower than
//! the best after one or two, while the few that matter (the leaders, within a few percent of
//! each other) would need more than N to be told apart on a noisy host. [`AdaptiveRepeat`]
//! moves the runs to where they decide something:
//! - every candidate gets [`AdaptiveRepeat::min_runs`];
//! - one whose fastest run is still beyond the best by more than [`AdaptiveRepeat::margin`]
//!   stops there: no number of runs would make it the winner;
//! - one close to the best runs on until its median is apart from the best by more than its
//!   own noise ([`relative_noise`]), or [`AdaptiveRepeat::max_runs`] is reached; the export
//!   marks a winner still within the noise of its runner-up as a tie.
//!
//! Pure: the evaluator feeds it its samples and the best it knows, and runs again or stops.

/// The settings of `repeat = "adaptive"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveRepeat {
    /// Timed runs every candidate gets.
    pub min_runs: u32,
    /// The most timed runs a candidate gets.
    pub max_runs: u32,
    /// How far beyond the best (a fraction: 0.05 is 5 %) a candidate's fastest run must be for
    /// it to stop at `min_runs`.
    pub margin: f64,
}

impl AdaptiveRepeat {
    /// The defaults: 3 runs at least, 15 at most, 5 % margin.
    pub const DEFAULT: AdaptiveRepeat = AdaptiveRepeat {
        min_runs: 3,
        max_runs: 15,
        margin: 0.05,
    };

    /// Whether to time another run, given this candidate's timed runs so far (µs) and the best
    /// time of its shape known to the evaluator (`None`: it is the first).
    pub fn next(&self, samples: &[f64], best: Option<f64>) -> Next {
        let n = samples.len() as u32;
        if n < self.min_runs.max(1) {
            return Next::Run;
        }
        if n >= self.max_runs {
            return Next::Stop(Stop::Cap);
        }
        let Some(best) = best.filter(|b| b.is_finite() && *b > 0.0) else {
            return Next::Stop(Stop::First);
        };
        let fastest = samples.iter().copied().fold(f64::INFINITY, f64::min);
        if fastest > best * (1.0 + self.margin) {
            return Next::Stop(Stop::Slower);
        }
        let gap = (median(samples) / best - 1.0).abs();
        if gap > relative_noise(samples) {
            Next::Stop(Stop::Resolved)
        } else {
            Next::Run
        }
    }
}

/// What [`AdaptiveRepeat::next`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Run,
    Stop(Stop),
}

/// Why a candidate stopped: kept with its measurement (`adaptive` detail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Nothing to compare with yet: the minimum runs.
    First,
    /// Clearly slower than the best after the minimum runs.
    Slower,
    /// Its median is apart from the best by more than its noise.
    Resolved,
    /// The most runs were reached within the noise.
    Cap,
}

impl Stop {
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::First => "first",
            Stop::Slower => "slower",
            Stop::Resolved => "resolved",
            Stop::Cap => "cap",
        }
    }
}

/// The median of non-empty samples (`NaN` for none).
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The noise of a median as a fraction of it: twice the robust standard error of the median
/// (1.4826 × MAD × 1.2533 / √n, relative), never below 0.2 % (a timer's own resolution and the
/// drift of a host between candidates). Two medians closer than this are not told apart.
pub fn relative_noise(samples: &[f64]) -> f64 {
    const FLOOR: f64 = 0.002;
    let m = median(samples);
    if samples.len() < 2 || m.is_nan() || m <= 0.0 {
        return f64::INFINITY;
    }
    let deviations: Vec<f64> = samples.iter().map(|s| (s - m).abs()).collect();
    let mad = median(&deviations);
    let se = 1.4826 * mad * 1.2533 / (samples.len() as f64).sqrt();
    (2.0 * se / m).max(FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: AdaptiveRepeat = AdaptiveRepeat::DEFAULT;

    #[test]
    fn every_candidate_gets_the_minimum_and_the_first_no_more() {
        assert_eq!(A.next(&[], None), Next::Run);
        assert_eq!(A.next(&[100.0, 101.0], Some(50.0)), Next::Run);
        assert_eq!(A.next(&[100.0, 101.0, 99.0], None), Next::Stop(Stop::First));
    }

    #[test]
    fn a_clearly_slower_candidate_stops_at_the_minimum() {
        assert_eq!(
            A.next(&[120.0, 118.0, 119.0], Some(100.0)),
            Next::Stop(Stop::Slower)
        );
    }

    #[test]
    fn a_close_candidate_runs_until_resolved_or_the_cap() {
        // Within 1 % of the best with ±3 % noise: undecided, so it runs on.
        let noisy = [101.0, 98.0, 104.0];
        assert_eq!(A.next(&noisy, Some(100.0)), Next::Run);
        // Steady runs 2 % faster than the best: resolved.
        let steady = [98.0, 98.1, 97.9, 98.0];
        assert_eq!(A.next(&steady, Some(100.0)), Next::Stop(Stop::Resolved));
        // Equal to the best, however many runs: runs on, and stops at the cap.
        let mut same: Vec<f64> = [99.0, 101.0].repeat(7);
        assert_eq!(A.next(&same, Some(100.0)), Next::Run);
        same.push(100.0);
        assert_eq!(A.next(&same, Some(100.0)), Next::Stop(Stop::Cap));
    }

    #[test]
    fn noise_shrinks_with_runs_and_has_a_floor() {
        let few = relative_noise(&[100.0, 104.0, 96.0]);
        let many = relative_noise(&[100.0, 104.0, 96.0, 100.0, 104.0, 96.0, 100.0, 104.0, 96.0]);
        assert!(many < few, "{many} < {few}");
        assert_eq!(relative_noise(&[5.0, 5.0, 5.0]), 0.002);
        assert_eq!(relative_noise(&[5.0]), f64::INFINITY);
    }
}
