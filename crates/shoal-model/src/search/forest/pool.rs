//! Which open candidates the forest scores for a batch: all of them in a space of a few
//! thousand, and in a larger one a pool of them, so that a proposal costs the same whatever
//! the space's size.
//!
//! Scoring is the forest's cost: every pick of a batch refits the trees and predicts every
//! candidate scored. On the 11,130 candidates of the dedispersion space, scoring all of them
//! took 5.8–9.2 s a search at 5 %; MIOpen's and CUTLASS's spaces run to 10⁵–10⁶. The pool is
//! [`POOL`] candidates drawn afresh at random for each batch, plus every open candidate one
//! parameter from the best measured and up to [`NEAR`] two parameters from it: where the last
//! proposals exploit and a stalled search's draws look ([`Forest::stalled`]), which a random
//! draw would mostly miss.

use std::collections::HashSet;

use super::super::index::Index;
use super::Forest;

/// Open candidates drawn at random for a batch's pool: all of them when fewer are open.
pub(super) const POOL: usize = 2_048;
/// Candidates two parameters from the best in a pool, at most (drawn at random when more).
const NEAR: usize = 2_048;

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

    /// The candidates one parameter from `of`, then up to [`NEAR`] two parameters from it.
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
        one
    }
}
