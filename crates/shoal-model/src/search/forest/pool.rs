//! Which open candidates the forest scores for a batch: all of them in a space of a few
//! thousand, and in a larger one a pool of them, so that a proposal costs the same whatever
//! the space's size.
//!
//! Scoring is the forest's cost: every pick of a batch refits the trees and predicts every
//! candidate scored. On the 11,130 candidates of the dedispersion space, scoring all of them
//! took 5.8–9.2 s a search at 5 %; MIOpen's and CUTLASS's spaces run to 10⁵–10⁶. The pool is
//! [`POOL`] candidates drawn afresh at random for each batch, plus the open candidates near the
//! best measured, which a random draw would mostly miss: every one a parameter from it (where
//! the last proposals exploit), up to [`NEAR`] two parameters from it, and those around it
//! (every parameter at most one value from the best's, where the draw turns look; see
//! [`Forest::propose`]): all of them while the box they lie in holds at most [`AROUND`]
//! combinations (a space of ten parameters of three or more values), else [`NEAR`] drawn at
//! random.

use std::collections::HashSet;

use super::super::index::Index;
use super::super::Rng;
use super::Forest;

/// Open candidates drawn at random for a batch's pool: all of them when fewer are open.
pub(super) const POOL: usize = 2_048;
/// Candidates two parameters from the best in a pool, at most (drawn at random when more).
const NEAR: usize = 2_048;
/// Combinations of the box around the best enumerated, at most; a larger box is sampled.
const AROUND: usize = 59_049;

impl Forest {
    /// The open candidates to score for a batch (see the module's documentation), each once.
    pub(super) fn pool(&mut self) -> Vec<usize> {
        let size = self.proposed.len();
        if self.unproposed <= POOL {
            return (0..size).filter(|c| !self.proposed[*c]).collect();
        }
        let mut chosen: HashSet<usize> = HashSet::with_capacity(2 * (POOL + NEAR));
        let mut pool = Vec::with_capacity(POOL + NEAR);
        if let Some((best, _)) = self.best {
            for c in self.neighbours(best) {
                if !self.proposed[c] && chosen.insert(c) {
                    pool.push(c);
                }
            }
        }
        let (target, mut tries) = (pool.len() + POOL.min(self.unproposed), 0);
        // Rejection draws: at most 8 per place, far more than needed while most of the space
        // is open, as it is under any budget of a few percent.
        while pool.len() < target && tries < 8 * POOL {
            tries += 1;
            let c = self.rng.below(size);
            if !self.proposed[c] && chosen.insert(c) {
                pool.push(c);
            }
        }
        pool
    }

    /// The candidates one parameter from `of`, then up to [`NEAR`] two parameters from it,
    /// then those around it (see [`each_around`]), some of them again.
    fn neighbours(&mut self, of: usize) -> Vec<usize> {
        let sizes = &self.sizes[..self.params];
        if self.index.is_none() {
            let candidates = (0..self.proposed.len()).map(|c| self.values(c));
            self.index = Some(Index::new(sizes, candidates));
        }
        let index = self.index.as_ref().expect("built above");
        let x = self.values(of).to_vec();
        let (mut one, mut two): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut y = x.clone();
        for p in 0..sizes.len() {
            for v in (0..sizes[p] as u16).filter(|v| *v != x[p]) {
                y[p] = v;
                one.extend(index.get(&y));
                for q in p + 1..sizes.len() {
                    for w in (0..sizes[q] as u16).filter(|w| *w != x[q]) {
                        y[q] = w;
                        two.extend(index.get(&y));
                    }
                    y[q] = x[q];
                }
            }
            y[p] = x[p];
        }
        if two.len() > NEAR {
            for i in 0..NEAR {
                let j = i + self.rng.below(two.len() - i);
                two.swap(i, j);
            }
            two.truncate(NEAR);
        }
        one.extend(two);
        each_around(&x, sizes, &mut self.rng, |y| one.extend(index.get(y)));
        one
    }
}

/// Calls `each` with the value indexes around `x`: every parameter at most one value from
/// `x`'s (in the order of the parameter's values), two or more moved. Every such combination
/// when the box holds at most [`AROUND`]; else [`NEAR`] drawn at random (some twice), as a
/// space of many parameters has too many to look up for each batch.
pub(super) fn each_around(x: &[u16], sizes: &[usize], rng: &mut Rng, mut each: impl FnMut(&[u16])) {
    // Each parameter's lowest value in the box and how many it holds (2 at an end, 1 for a
    // parameter of one value).
    let (low, span): (Vec<u16>, Vec<u16>) = x
        .iter()
        .zip(sizes)
        .map(|(v, s)| {
            let low = v.saturating_sub(1);
            let high = (usize::from(*v) + 1).min(s.saturating_sub(1)) as u16;
            (low, high - low + 1)
        })
        .unzip();
    let mut y = x.to_vec();
    let mut visit = |y: &[u16]| {
        if super::distance(y, x) >= 2 {
            each(y);
        }
    };
    let combinations = span
        .iter()
        .try_fold(1usize, |acc, s| acc.checked_mul(usize::from(*s)))
        .filter(|n| *n <= AROUND);
    match combinations {
        Some(n) => {
            // An odometer over the box, each parameter a digit.
            y.copy_from_slice(&low);
            for _ in 0..n {
                visit(&y);
                for p in 0..y.len() {
                    y[p] += 1;
                    if y[p] < low[p] + span[p] {
                        break;
                    }
                    y[p] = low[p];
                }
            }
        }
        None => {
            for _ in 0..NEAR {
                for p in 0..y.len() {
                    y[p] = low[p] + rng.below(usize::from(span[p])) as u16;
                }
                visit(&y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(x: &[u16], sizes: &[usize]) -> Vec<Vec<u16>> {
        let mut out = Vec::new();
        each_around(x, sizes, &mut Rng::new(1), |y| out.push(y.to_vec()));
        out
    }

    #[test]
    fn around_a_candidate_is_the_box_less_its_own_neighbours() {
        // Three parameters: one at its low end, one inside, one of a single value.
        let found = collect(&[0, 3, 0], &[4, 6, 1]);
        let mut expected = Vec::new();
        for a in 0..=1u16 {
            for b in 2..=4u16 {
                let y = vec![a, b, 0];
                if distance(&y, &[0, 3, 0]) >= 2 {
                    expected.push(y);
                }
            }
        }
        let mut sorted = found.clone();
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected, "each combination once");
        assert_eq!(found.len(), 2);
    }

    #[test]
    fn a_box_too_large_to_enumerate_is_sampled_within_it() {
        // 11 parameters of 5 values: 3^11 combinations around an inner point.
        let (x, sizes) = (vec![2u16; 11], vec![5usize; 11]);
        let found = collect(&x, &sizes);
        assert!(
            found.len() <= NEAR && found.len() > NEAR / 2,
            "{}",
            found.len()
        );
        for y in &found {
            assert!(distance(y, &x) >= 2);
            assert!(
                y.iter().all(|v| (1..=3).contains(v)),
                "{y:?} leaves the box"
            );
        }
    }

    fn distance(a: &[u16], b: &[u16]) -> usize {
        super::super::distance(a, b)
    }
}
