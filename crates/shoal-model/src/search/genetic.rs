//! A population method: a genetic search over the parameters' value indexes.

use std::collections::HashSet;

use super::index::Index;
use super::{Random, Rng, Space, Strategy};

/// A genetic search over the parameters: random candidates until a population has been
/// measured, then children of good parents — tournament selection among the measured,
/// uniform crossover, and a mutation of one parameter (more when the child is taken already) —
/// each child a valid candidate not proposed before, else a random one.
pub struct Genetic {
    space: Space,
    index: Index,
    rng: Rng,
    proposed: HashSet<usize>,
    /// Random candidates not proposed yet, in order (the fallback).
    random: Random,
    /// Measured candidates and their times, failures left out.
    measured: Vec<(usize, f64)>,
    /// Candidates measured before children are bred.
    population: usize,
}

impl Genetic {
    pub fn new(space: &Space, seed: u64) -> Self {
        Genetic {
            space: space.clone(),
            index: space.index(),
            rng: Rng::new(seed ^ 0x5EED),
            proposed: HashSet::new(),
            random: Random::new(space, seed),
            measured: Vec::new(),
            population: 20,
        }
    }

    /// The better of two measured candidates drawn at random.
    fn tournament(&mut self) -> usize {
        let a = self.measured[self.rng.below(self.measured.len())];
        let b = self.measured[self.rng.below(self.measured.len())];
        if a.1 <= b.1 {
            a.0
        } else {
            b.0
        }
    }

    /// A child of two good parents, valid and new, if one is found in a few tries.
    fn child(&mut self) -> Option<usize> {
        let (p, q) = (self.tournament(), self.tournament());
        for tries in 0..32 {
            let (a, b) = (&self.space.candidates[p], &self.space.candidates[q]);
            let mut genes: Vec<u16> = a
                .iter()
                .zip(b)
                .map(|(x, y)| if self.rng.below(2) == 0 { *x } else { *y })
                .collect();
            // One mutation, more as tries fail (the neighbourhood is taken).
            for _ in 0..=(tries / 8) {
                let k = self.rng.below(genes.len().max(1));
                if let Some(size) = self.space.sizes.get(k) {
                    genes[k] = self.rng.below(*size) as u16;
                }
            }
            if let Some(c) = self.index.get(&genes) {
                if !self.proposed.contains(&c) {
                    return Some(c);
                }
            }
        }
        None
    }

    fn random_unproposed(&mut self) -> Option<usize> {
        loop {
            let c = *self.random.propose(1).first()?;
            if !self.proposed.contains(&c) {
                return Some(c);
            }
        }
    }
}

impl Strategy for Genetic {
    fn propose(&mut self, n: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let bred = if self.measured.len() >= self.population.min(self.space.candidates.len())
                && !self.measured.is_empty()
            {
                self.child()
            } else {
                None
            };
            let Some(c) = bred.or_else(|| self.random_unproposed()) else {
                break;
            };
            self.proposed.insert(c);
            out.push(c);
        }
        out
    }

    fn observe(&mut self, candidate: usize, time: Option<f64>) {
        if let Some(t) = time.filter(|t| t.is_finite()) {
            self.measured.push((candidate, t));
        }
    }
}
