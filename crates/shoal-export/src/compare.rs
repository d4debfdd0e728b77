//! Before and after: two tuned tables (two sessions, or two `tuned.json` files) compared shape
//! by shape, as aiter's CI compares a new tuning with the one in the tree. A change counts only
//! where it is larger than the noise: the larger of the two winners' own spreads
//! ([`TunedRow::spread_pct`]) and a floor. Pure functions; `shoal compare` reads and prints.

use std::collections::BTreeMap;

use crate::TunedRow;

/// What happened to one shape between the old table and the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Slower by more than the noise.
    Regressed,
    /// Had a valid winner before and has none now (failed, pending or gone).
    Lost,
    /// Faster by more than the noise.
    Improved,
    /// Within the noise.
    Same,
    /// Has a winner now and had none before.
    Added,
    /// Had no winner in either table.
    Neither,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Lost => "lost",
            Verdict::Improved => "improved",
            Verdict::Same => "same",
            Verdict::Added => "added",
            Verdict::Neither => "no winner",
        }
    }

    /// Whether a CI job should fail on it.
    pub fn is_regression(self) -> bool {
        matches!(self, Verdict::Regressed | Verdict::Lost)
    }
}

/// One shape of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeChange {
    pub old: Option<TunedRow>,
    pub new: Option<TunedRow>,
    pub verdict: Verdict,
    /// New time over old, when both have one.
    pub ratio: Option<f64>,
    /// The noise the change was measured against, in percent.
    pub noise_pct: f64,
    /// The two winners timed side by side (`shoal compare --retime`), which the verdict was
    /// then read from ([`crate::paired`]).
    pub retimed: Option<crate::paired::Retimed>,
}

impl ShapeChange {
    /// The row that names the shape (the new one when there is one).
    pub fn row(&self) -> &TunedRow {
        self.new
            .as_ref()
            .or(self.old.as_ref())
            .expect("a change has a row")
    }
}

/// A shape's identity across tables: device kind, solver and problem parameters.
fn key(r: &TunedRow) -> (String, u32, String, String) {
    (r.arch.clone(), r.num_cu, r.solver.clone(), r.shape.key())
}

/// Compares `new` with `old` shape by shape, in the old table's order, then the shapes only
/// the new one has. `floor_pct` is the least change that counts, whatever the spreads say.
pub fn compare(old: &[TunedRow], new: &[TunedRow], floor_pct: f64) -> Vec<ShapeChange> {
    let mut new_by_key: BTreeMap<_, &TunedRow> = new.iter().map(|r| (key(r), r)).collect();
    let mut out: Vec<ShapeChange> = old
        .iter()
        .map(|o| {
            let n = new_by_key.remove(&key(o));
            judge(Some(o), n, floor_pct)
        })
        .collect();
    out.extend(
        new.iter()
            .filter(|r| new_by_key.contains_key(&key(r)))
            .map(|n| judge(None, Some(n), floor_pct)),
    );
    out
}

fn judge(old: Option<&TunedRow>, new: Option<&TunedRow>, floor_pct: f64) -> ShapeChange {
    let time = |r: Option<&TunedRow>| r.and_then(|r| r.time_us).filter(|t| *t > 0.0);
    let spread = |r: Option<&TunedRow>| r.and_then(|r| r.spread_pct).unwrap_or(0.0);
    let noise_pct = floor_pct.max(spread(old)).max(spread(new));
    let (verdict, ratio) = match (time(old), time(new)) {
        (Some(o), Some(n)) => {
            let ratio = n / o;
            let verdict = if ratio > 1.0 + noise_pct / 100.0 {
                Verdict::Regressed
            } else if ratio < 1.0 - noise_pct / 100.0 {
                Verdict::Improved
            } else {
                Verdict::Same
            };
            (verdict, Some(ratio))
        }
        (Some(_), None) => (Verdict::Lost, None),
        (None, Some(_)) => (Verdict::Added, None),
        (None, None) => (Verdict::Neither, None),
    };
    ShapeChange {
        old: old.cloned(),
        new: new.cloned(),
        verdict,
        ratio,
        noise_pct,
        retimed: None,
    }
}

/// The table that keeps, per shape, the better winner of the two: the new row only where it
/// improved or was added, the old one everywhere else (a change within the noise keeps what was
/// there, so a table does not churn run after run).
pub fn keep_better(changes: &[ShapeChange]) -> Vec<TunedRow> {
    changes
        .iter()
        .filter_map(|c| match c.verdict {
            Verdict::Improved | Verdict::Added => c.new.clone(),
            _ => c.old.clone().or_else(|| c.new.clone()),
        })
        .collect()
}

/// How many shapes got each verdict.
pub fn counts(changes: &[ShapeChange]) -> BTreeMap<Verdict, usize> {
    let mut counts = BTreeMap::new();
    for c in changes {
        *counts.entry(c.verdict).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_model::{ConfigId, Params};

    fn row(m: &str, bm: &str, time: Option<f64>, spread: Option<f64>) -> TunedRow {
        let mut shape = Params::new();
        shape.push("M", m);
        let best = time.map(|_| {
            let mut p = Params::new();
            p.push("BM", bm);
            p
        });
        TunedRow {
            arch: "x86_64".into(),
            num_cu: 2,
            config: ConfigId(1),
            shape,
            solver: "gemm".into(),
            best,
            time_us: time,
            spread_pct: spread,
            gflops: None,
            speedup: time.map(|_| 1.0),
            slowest_valid_us: time,
            candidates: 4,
            valid: u32::from(time.is_some()),
            failures: BTreeMap::new(),
            pending: 0,
            runner_up: None,
            runner_up_us: None,
            tie: false,
        }
    }

    #[test]
    fn changes_count_only_beyond_the_noise() {
        let old = vec![
            row("64", "16", Some(100.0), Some(1.0)),
            row("128", "16", Some(100.0), Some(1.0)),
            row("256", "16", Some(100.0), Some(5.0)),
            row("512", "16", Some(100.0), None),
        ];
        let new = vec![
            row("64", "32", Some(90.0), Some(1.0)),   // 10 % faster
            row("128", "16", Some(103.0), Some(1.0)), // 3 % slower, noise 1 %
            row("256", "32", Some(104.0), Some(1.0)), // 4 % slower, old spread 5 %
            row("512", "16", Some(100.5), None),      // within the 1 % floor
        ];
        let c = compare(&old, &new, 1.0);
        let verdicts: Vec<Verdict> = c.iter().map(|c| c.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Improved,
                Verdict::Regressed,
                Verdict::Same,
                Verdict::Same
            ]
        );
        assert_eq!(c[2].noise_pct, 5.0);
        assert!((c[1].ratio.unwrap() - 1.03).abs() < 1e-9);
    }

    #[test]
    fn shapes_lost_and_added_are_reported() {
        let old = vec![
            row("64", "16", Some(100.0), None),
            row("128", "16", Some(100.0), None),
        ];
        let new = vec![
            row("64", "-", None, None), // every candidate failed now
            row("1024", "8", Some(50.0), None),
        ];
        let c = compare(&old, &new, 1.0);
        let verdicts: Vec<Verdict> = c.iter().map(|c| c.verdict).collect();
        assert_eq!(verdicts, [Verdict::Lost, Verdict::Lost, Verdict::Added]);
        assert!(c.iter().filter(|c| c.verdict.is_regression()).count() == 2);
        assert_eq!(
            c[1].row().shape.get("M"),
            Some("128"),
            "gone from the new table"
        );
    }

    #[test]
    fn the_kept_table_has_the_better_winner_of_each_shape() {
        let old = vec![
            row("64", "16", Some(100.0), None),
            row("128", "16", Some(100.0), None),
            row("256", "16", Some(100.0), None),
        ];
        let new = vec![
            row("64", "32", Some(80.0), None),
            row("128", "32", Some(120.0), None),
            row("256", "32", Some(100.2), None),
            row("512", "8", Some(70.0), None),
        ];
        let kept = keep_better(&compare(&old, &new, 1.0));
        let winners: Vec<(&str, &str)> = kept
            .iter()
            .map(|r| {
                (
                    r.shape.get("M").unwrap(),
                    r.best.as_ref().unwrap().get("BM").unwrap(),
                )
            })
            .collect();
        assert_eq!(
            winners,
            [("64", "32"), ("128", "16"), ("256", "16"), ("512", "8")],
            "improved: new; regressed or same: old; added: new"
        );
    }

    #[test]
    fn a_spread_needs_two_runs() {
        assert_eq!(crate::spread_pct(&[10.0]), None);
        assert!((crate::spread_pct(&[10.0, 10.5, 10.2]).unwrap() - 5.0).abs() < 1e-9);
        assert_eq!(crate::spread_pct(&[f64::NAN, 10.0]), None);
    }
}
