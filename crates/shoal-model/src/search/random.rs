//! The baseline strategy: candidates in a random order, whatever the outcomes.

use super::{Rng, Space, Strategy};

/// Candidates in a random order: the baseline every other strategy must beat.
pub struct Random {
    order: Vec<usize>,
    next: usize,
}

impl Random {
    pub fn new(space: &Space, seed: u64) -> Self {
        let mut order: Vec<usize> = (0..space.candidates.len()).collect();
        let mut rng = Rng::new(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        Random { order, next: 0 }
    }
}

impl Strategy for Random {
    fn propose(&mut self, n: usize) -> Vec<usize> {
        let end = (self.next + n).min(self.order.len());
        let out = self.order[self.next..end].to_vec();
        self.next = end;
        out
    }

    fn observe(&mut self, _: usize, _: Option<f64>) {}
}
