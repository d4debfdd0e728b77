//! The two winners of a shape timed side by side: what `shoal compare --retime` decides from.
//!
//! A winner's recorded spread measures the noise of the machine *while it was tuned*. On a
//! shared machine that noise reaches hundreds of percent, and a verdict weighed against it
//! can see nothing. Timing the old and the new winner in alternation (old, new, new, old, …)
//! puts the same load on both: each round's ratio new/old cancels what the two runs shared,
//! and the median of the ratios with its confidence interval says whether the new winner is
//! slower, faster or the same beyond what the rounds can tell apart.
//!
//! Pure functions: the CLI builds and runs the candidates and hands the times here.

use shoal_model::repeats::median;

use crate::compare::{ShapeChange, Verdict};

/// The confidence of a verdict. A gate that fails a CI run must rarely fail one for nothing:
/// with identical winners, a shape is called slower at most 0.5 % of the time, however many
/// times the rounds were looked at ([`Looks`]).
pub const CONFIDENCE: f64 = 0.99;

/// Rounds between two looks at the rounds: a verdict is read only after 10, 20, … rounds and
/// after the last one. Reading it after every round would give a false verdict many chances;
/// each look is held to its share of `1 - CONFIDENCE` instead (Bonferroni).
pub const LOOK_EVERY: usize = 10;

/// When the rounds of a shape are looked at, and how sure each look must be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Looks {
    max_rounds: usize,
}

impl Looks {
    /// The looks of a shape that gets at most `max_rounds` rounds (at least [`LOOK_EVERY`]).
    pub fn new(max_rounds: usize) -> Looks {
        Looks {
            max_rounds: max_rounds.max(LOOK_EVERY),
        }
    }

    pub fn max_rounds(self) -> usize {
        self.max_rounds
    }

    /// How many looks there can be.
    pub fn count(self) -> usize {
        self.max_rounds.div_ceil(LOOK_EVERY)
    }

    /// The confidence of each look's interval: its share of what [`CONFIDENCE`] allows.
    pub fn confidence(self) -> f64 {
        1.0 - (1.0 - CONFIDENCE) / self.count() as f64
    }

    /// Whether a verdict is read after `rounds` rounds.
    pub fn is_look(self, rounds: usize) -> bool {
        rounds > 0 && (rounds.is_multiple_of(LOOK_EVERY) || rounds == self.max_rounds)
    }
}

/// One shape's two winners, timed in alternating rounds: `old_us[i]` and `new_us[i]` are round
/// `i`'s time of each (the fastest of the spec's timed runs in that round).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairedTimes {
    pub old_us: Vec<f64>,
    pub new_us: Vec<f64>,
}

/// What the rounds measured, as [`ShapeChange::retimed`] carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct Retimed {
    pub rounds: usize,
    /// Median of each winner's round times.
    pub old_us: f64,
    pub new_us: f64,
    /// The median of the rounds' new/old ratios, and its interval at `confidence`.
    pub ratio: f64,
    pub ratio_low: f64,
    pub ratio_high: f64,
    pub confidence: f64,
}

impl PairedTimes {
    /// Each round's new/old ratio (rounds where either time is not positive are left out).
    pub fn ratios(&self) -> Vec<f64> {
        self.old_us
            .iter()
            .zip(&self.new_us)
            .filter(|(o, n)| **o > 0.0 && **n > 0.0 && o.is_finite() && n.is_finite())
            .map(|(o, n)| n / o)
            .collect()
    }

    /// The median ratio and its interval at `confidence`, once there are rounds.
    pub fn summary(&self, confidence: f64) -> Option<Retimed> {
        let ratios = self.ratios();
        let (ratio_low, ratio_high) = median_interval(&ratios, confidence)?;
        Some(Retimed {
            rounds: ratios.len(),
            old_us: median(&self.old_us),
            new_us: median(&self.new_us),
            ratio: median(&ratios),
            ratio_low,
            ratio_high,
            confidence,
        })
    }

    /// Whether to time another round: until a look ([`Looks::is_look`]) finds the interval
    /// wholly beyond the band `floor_pct` on one side, or wholly inside it, or the rounds run out.
    pub fn undecided(&self, floor_pct: f64, looks: Looks) -> bool {
        let rounds = self.old_us.len().min(self.new_us.len());
        if rounds >= looks.max_rounds() {
            return false;
        }
        if !looks.is_look(rounds) {
            return true;
        }
        let Some(r) = self.summary(looks.confidence()) else {
            return true;
        };
        let (low, high) = band(floor_pct);
        let clear = r.ratio_low > high
            || r.ratio_high < low
            || (r.ratio_low >= low && r.ratio_high <= high);
        !clear
    }
}

/// The ratios within `floor_pct` of 1: changes too small to count.
fn band(floor_pct: f64) -> (f64, f64) {
    (1.0 - floor_pct / 100.0, 1.0 + floor_pct / 100.0)
}

/// A distribution-free `confidence` interval of the median of `samples`: the order statistics
/// `k` and `n + 1 - k` (from 1) with the largest `k` whose binomial coverage,
/// `1 - 2 P(Binomial(n, 1/2) < k)`, is at least `confidence`. Where not even the whole range
/// reaches it (too few samples), the interval is the whole range.
pub fn median_interval(samples: &[f64], confidence: f64) -> Option<(f64, f64)> {
    let mut s: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    // coverage(k) = 1 - 2 P(B <= k - 1) falls as k grows; `p` is P(B = k - 1), `cum` P(B <= k - 1).
    let mut k = 1;
    let mut p = 0.5f64.powi(n as i32);
    let mut cum = p;
    for next in 2..=n.div_ceil(2) {
        p *= (n + 2 - next) as f64 / (next - 1) as f64;
        cum += p;
        if 1.0 - 2.0 * cum < confidence {
            break;
        }
        k = next;
    }
    Some((s[k - 1], s[n - k]))
}

/// Judges a shape from its two winners timed side by side, at the confidence of each of
/// `looks`: regressed when the whole interval of the ratio lies above `1 + floor_pct %`,
/// improved when it lies below `1 - floor_pct %`, the same otherwise. The noise shown is the
/// interval's larger distance from the median. A shape that was not re-timed (`paired` is
/// `None`, or every round failed) keeps the verdict it had.
pub fn judge_retimed(
    change: ShapeChange,
    paired: Option<&PairedTimes>,
    floor_pct: f64,
    looks: Looks,
) -> ShapeChange {
    let Some(r) = paired.and_then(|p| p.summary(looks.confidence())) else {
        return change;
    };
    let (low, high) = band(floor_pct);
    let verdict = if r.ratio_low > high {
        Verdict::Regressed
    } else if r.ratio_high < low {
        Verdict::Improved
    } else {
        Verdict::Same
    };
    let noise_pct = 100.0 * (r.ratio_high - r.ratio).max(r.ratio - r.ratio_low) / r.ratio;
    ShapeChange {
        verdict,
        ratio: Some(r.ratio),
        noise_pct,
        retimed: Some(r),
        ..change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_interval_has_its_coverage() {
        let s: Vec<f64> = (1..=10).map(f64::from).collect();
        // n = 10: k = 2 covers 97.9 %, k = 3 only 89.1 %.
        assert_eq!(median_interval(&s, 0.9), Some((2.0, 9.0)));
        let s: Vec<f64> = (1..=5).map(f64::from).collect();
        assert_eq!(
            median_interval(&s, 0.9),
            Some((1.0, 5.0)),
            "93.8 % at k = 1"
        );
        let s: Vec<f64> = (1..=20).map(f64::from).collect();
        // n = 20: k = 6 covers 95.9 %, k = 7 covers 88.5 %.
        assert_eq!(median_interval(&s, 0.9), Some((6.0, 15.0)));
        assert_eq!(median_interval(&[3.0], 0.9), Some((3.0, 3.0)));
        assert_eq!(median_interval(&[], 0.9), None);
    }

    fn paired(old: &[f64], new: &[f64]) -> PairedTimes {
        PairedTimes {
            old_us: old.to_vec(),
            new_us: new.to_vec(),
        }
    }

    fn change() -> ShapeChange {
        ShapeChange {
            old: None,
            new: None,
            verdict: Verdict::Regressed,
            ratio: Some(3.0),
            noise_pct: 1.0,
            retimed: None,
        }
    }

    const LOOKS: Looks = Looks { max_rounds: 40 };

    #[test]
    fn each_look_gets_its_share_of_the_confidence() {
        assert_eq!(LOOKS.count(), 4);
        assert!((LOOKS.confidence() - 0.9975).abs() < 1e-12);
        let looks: Vec<usize> = (1..=40).filter(|&n| LOOKS.is_look(n)).collect();
        assert_eq!(looks, [10, 20, 30, 40]);
        let odd = Looks::new(25);
        assert_eq!(
            (odd.count(), odd.is_look(25), odd.is_look(24)),
            (3, true, false)
        );
        assert_eq!(
            Looks::new(3).max_rounds(),
            LOOK_EVERY,
            "at least one full look"
        );
        // The first look's interval is the whole range of 10 rounds (99.8 % >= 99.75 %).
        let r = paired(
            &[100.0; 10],
            &[
                90.0, 99.0, 101.0, 102.0, 103.0, 104.0, 105.0, 106.0, 107.0, 130.0,
            ],
        )
        .summary(LOOKS.confidence())
        .unwrap();
        assert_eq!((r.ratio_low, r.ratio_high), (0.9, 1.3));
    }

    #[test]
    fn load_shared_by_both_winners_cancels_in_the_ratios() {
        // The machine's load swings each round's times by up to 4x; the new winner is the
        // same kernel within 0.5 %.
        let load = [1.0, 3.9, 1.2, 2.5, 1.0, 4.0, 1.7, 1.1, 2.9, 1.3];
        let old: Vec<f64> = load.iter().map(|l| 100.0 * l).collect();
        let new: Vec<f64> = load
            .iter()
            .enumerate()
            .map(|(i, l)| 100.0 * l * if i % 2 == 0 { 1.004 } else { 0.997 })
            .collect();
        let c = judge_retimed(change(), Some(&paired(&old, &new)), 1.0, LOOKS);
        assert_eq!(c.verdict, Verdict::Same, "{c:?}");
        assert!(c.noise_pct < 1.0, "{c:?}");
        assert!(
            !paired(&old, &new).undecided(1.0, LOOKS),
            "decided within the band at the first look"
        );
        assert!(
            paired(&old[..9], &new[..9]).undecided(1.0, LOOKS),
            "no look before the tenth round"
        );
    }

    #[test]
    fn a_slower_winner_under_load_is_a_regression() {
        let load = [1.0, 3.9, 1.2, 2.5, 1.0, 4.0, 1.7, 1.1, 2.2, 1.6];
        let old: Vec<f64> = load.iter().map(|l| 100.0 * l).collect();
        let new: Vec<f64> = load.iter().map(|l| 130.0 * l).collect();
        let c = judge_retimed(change(), Some(&paired(&old, &new)), 1.0, LOOKS);
        assert_eq!(c.verdict, Verdict::Regressed);
        assert!((c.ratio.unwrap() - 1.3).abs() < 1e-9);
        let c = judge_retimed(change(), Some(&paired(&new, &old)), 1.0, LOOKS);
        assert_eq!(c.verdict, Verdict::Improved);
    }

    #[test]
    fn rounds_that_cannot_tell_are_undecided_and_the_same() {
        // Ratios all over the place: 0.8 .. 1.25.
        let old = [100.0; 10];
        let new = [
            80.0, 125.0, 95.0, 110.0, 90.0, 120.0, 104.0, 99.0, 107.0, 93.0,
        ];
        let p = paired(&old, &new);
        assert!(p.undecided(1.0, LOOKS));
        assert_eq!(
            judge_retimed(change(), Some(&p), 1.0, LOOKS).verdict,
            Verdict::Same
        );
        assert!(
            !p.undecided(1.0, Looks::new(10)),
            "the rounds ran out: no more"
        );
    }

    #[test]
    fn a_shape_not_retimed_keeps_its_verdict() {
        let c = judge_retimed(change(), None, 1.0, LOOKS);
        assert_eq!(c.verdict, Verdict::Regressed);
        assert!(c.retimed.is_none());
        let c = judge_retimed(change(), Some(&paired(&[], &[])), 1.0, LOOKS);
        assert_eq!(c.verdict, Verdict::Regressed);
    }
}
