//! A model-based search: a random forest of regression trees learns the log of each measured
//! candidate's time from its value indexes, and each batch takes unproposed candidates the
//! forest thinks promising. Turns alternate between a lower confidence bound (the trees' mean
//! less a multiple of their spread, the multiple growing over four turns from 0 to 2) and a
//! Thompson draw (the best of one tree chosen at random: each tree is a sample of what the
//! times could be). Cheap to refit: the trees split on value indexes, so finding a split is a
//! count per value, not a sort.
//!
//! A batch is chosen one pick at a time, as a "believer": each pick joins the training set with
//! a time the forest thinks it could take, and the forest is refitted before the next pick.
//! That spreads a batch over places the forest has not yet covered (a bound alone would fill a
//! batch of 16 with near twins of its favourite), and lets each pick build on the last as a
//! sequential search would. Measured over 1,000 seeds on the convolution space at 1 % of it,
//! batches of 4 went from 1.473 to 1.410 of the optimum (median), batches of 16 from 1.502 to
//! 1.483, for one refit per pick instead of one per batch (docs/experiments/2026-11-26-believer-batches.md).
//!
//! The believed time is pessimistic: the trees' mean plus one spread, not the mean. A pick the
//! forest is unsure of then makes its neighbourhood look worse, not merely known, so the next
//! picks leave it more readily. Over 3,000 seeds at 1 % with batches of 16 that took the median
//! from 1.473 to 1.442, and at 5 % runs within 2 % of the optimum from 94 % to 97 %; an
//! optimistic liar (mean less a spread) did worse, 1.547, and two spreads no better, 1.464.
//!
//! Slots refilled one by one, as the Scheduler refills them while the others are still timed,
//! are chosen the same way: the candidates in flight are believed first. And the forest starts
//! once its initial design is proposed and 8 of it measured, rather than refilling at random
//! until all of it is back. On the convolution space with 16 in flight and each freed slot
//! refilled (200 seeds), that took the median at 1 % of the space from 1.502 to 1.453 of the
//! optimum and at 2 % from 1.158 to 1.129. Asked for whole batches, nothing is in flight and
//! nothing changes.
//!
//! The draw turns look around the best measured: among the candidates whose every parameter
//! is at most one value from the best's (in the order of each parameter's values), two or more
//! of them moved, and anywhere once none of those is open. Kernels' good configurations lie
//! next to each other that way (a tile half as deep, with twice the pipeline stages and half the
//! rows per thread), and such joint moves are what trees, splitting on one parameter at a time,
//! learn last. On the K-heavy H200 GEMM at 5 %, where a quarter of the runs had stopped at a
//! local minimum three parameters from the optimum's tile, the share of runs within 2 % of the
//! optimum went from 75 % to 81 % (1,000 runs; KernelTuner's hybrid_vndx, whose walk takes such
//! moves, 84 % of 300), no other cell of the ten recorded spaces at 1–10 % moving beyond noise
//! (docs/experiments/2026-11-29-second-basin.md). Once the best has not improved for a while,
//! the draws look two parameters from it instead ([`Forest::stalled`]): what dedispersion needs.
//!
//! The last proposals of a budget, those no proposal will be chosen knowing ([`Forest::last`]),
//! exploit: each goes to the candidate one parameter from the best measured that the trees
//! expect fastest (the expected fastest anywhere once none is left there). Exploring pays only
//! in what later proposals learn from it. One parameter away is where the trees, which split on
//! one parameter at a time, predict best; further away their mean is least trustworthy. On the
//! three GPU GEMM spaces at 1 % of each, 16 in flight and refilled as the Scheduler refills them,
//! the median went from 1.0749 / 1.0583 / 1.0571 of the optimum to 1.0530 / 1.0337 / 1.0488
//! (1,000 seeds), and on convolution at 2 % from 1.128 to 1.074 (docs/experiments/).
//!
//! It has no more than a twelfth of its budget out at once, at least 4 ([`Strategy::in_flight`]),
//! however many slots are free. Every proposal made while others are out is made without their
//! outcomes: with 16 out, a budget of 37 is a blind first 16 and barely two informed rounds. On
//! the three GPU GEMM spaces, 16 in flight left the forest behind KernelTuner's best
//! (sequential) strategy at 1 % and 2 % of each space, and 4 at 1 % and 6 at 2 % put it ahead
//! or level in all six cells (1,000 seeds; docs/experiments/2026-11-27-in-flight-limit.md). Slots it
//! leaves go to the session's other shapes; Ax limits its Bayesian steps' parallelism the same
//! way. A spec's `in_flight` overrides it, for a lone shape that must finish sooner.
//!
//! Why a forest and not a Gaussian process: the parameters are discrete, often categorical
//! (a flag, a loop order), and the times jump at some values (a tile that no longer fits in
//! shared memory); trees take both as they are, where a GP needs a kernel designed for them.
//! Failed candidates are learnt as the worst time seen, so the forest steers away from them.

mod pool;
mod tree;

use std::collections::HashMap;

use super::{Prior, Random, Rng, Space, Strategy};
use tree::{Training, Tree};

/// Valid candidates measured at random before the forest is trusted: one in 25 of the space,
/// at least 6 and at most 16, so that a small space's budget is not spent at random.
fn initial(size: usize) -> usize {
    (size / 25).clamp(6, 16).min(size)
}
/// Candidates of the initial design taken from a prior's fastest: a quarter of it, at least
/// one. On the GEMM spaces at 1 %, half of it (8) cost a prior from a shape whose best lies
/// elsewhere 1.031 → 1.092 of the optimum against a cold start, where 4, 2 or none cost
/// nothing; with a prior that ranks alike (another GPU, a shape of the same best tile), 2 and 4
/// found the optimum in every run (docs/experiments/2026-11-28-warm-starts.md).
fn seeded(size: usize) -> usize {
    (initial(size) / 4).max(1)
}
/// Valid measurements the forest needs before it is fitted at all, when proposals in flight
/// complete the initial design (see [`Forest::propose`]'s random phase).
const FIRST_FIT: usize = 8;
/// Trees in the forest.
const TREES: usize = 16;
/// The budget, at least, in rounds of the candidates the forest has out at once
/// ([`Strategy::in_flight`]).
const ROUNDS: usize = 12;
/// Candidates out at once whatever the budget: a smaller budget is a quick look, not a
/// sequential search.
const MIN_IN_FLIGHT: usize = 4;
/// Measurements without a new best after which the draw turns look two parameters away from
/// the best (see [`Forest::stalled`]).
const PATIENCE: usize = 48;

/// The forest-guided search (see the module's documentation).
pub struct Forest {
    /// Each candidate as the trees see it, [`Forest::row`]: its value indexes, one per
    /// parameter, then, with a prior, its earlier standing ([`Prior::bins`]). One vector of
    /// rows of `sizes.len()`, so that predicting a pool walks memory in order.
    features: Vec<u16>,
    /// How many values each feature has.
    sizes: Vec<usize>,
    /// How many of the features are the space's parameters.
    params: usize,
    rng: Rng,
    proposed: Vec<bool>,
    /// Candidates not proposed yet.
    unproposed: usize,
    /// Random candidates not proposed yet, in order (the initial design and the fallback).
    random: Random,
    /// The prior's fastest candidates, the fastest first: the start of the initial design.
    seeded: Vec<usize>,
    /// Measured candidates and their log times; failures are `None` until a fit.
    measured: Vec<(usize, Option<f64>)>,
    /// Which candidates have been observed.
    observed: Vec<bool>,
    /// Proposed and not yet observed.
    pending: Vec<usize>,
    /// What the forest believed of each pending candidate it chose (see [`Forest::propose`]),
    /// its log time.
    believed: HashMap<usize, f64>,
    /// The best candidate measured and its log time.
    best: Option<(usize, f64)>,
    /// Measurements since the best last improved.
    since_best: usize,
    /// How many candidates were proposed so far (the batches' exploration turns).
    proposals: usize,
    /// How many the search may still propose, as last told ([`Strategy::budget_left`]);
    /// `usize::MAX` when it was never told.
    left: usize,
    /// Where each candidate is, by its value indexes: built the first time the space is larger
    /// than a pool ([`Forest::pool`]), to look up the best's neighbours.
    index: Option<super::index::Index>,
}

impl Forest {
    pub fn new(space: &Space, seed: u64) -> Self {
        Forest::warm(space, seed, None)
    }

    /// A forest that starts from an earlier tuning's results (see [`Prior`]): its initial
    /// design begins with a quarter of its size of the prior's fastest candidates
    /// ([`seeded`]), and its trees see each candidate's earlier standing.
    pub fn warm(space: &Space, seed: u64, prior: Option<&Prior>) -> Self {
        let size = space.candidates.len();
        let prior = prior.filter(|p| !p.is_empty());
        let (features, sizes) = match prior {
            None => (space.candidates.concat(), space.sizes.clone()),
            Some(p) => {
                let bins = p.bins(size);
                let features = space
                    .candidates
                    .iter()
                    .zip(bins)
                    .flat_map(|(c, b)| c.iter().copied().chain([b]))
                    .collect();
                let sizes = space.sizes.iter().copied().chain([Prior::BINS]).collect();
                (features, sizes)
            }
        };
        Forest {
            features,
            sizes,
            params: space.sizes.len(),
            rng: Rng::new(seed ^ 0xF0_4E57),
            proposed: vec![false; size],
            unproposed: size,
            random: Random::new(space, seed),
            seeded: prior.map_or_else(Vec::new, |p| p.best(seeded(size))),
            measured: Vec::new(),
            observed: vec![false; size],
            pending: Vec::new(),
            believed: HashMap::new(),
            best: None,
            since_best: 0,
            proposals: 0,
            left: usize::MAX,
            index: None,
        }
    }

    /// A candidate as the trees see it (see `features`).
    fn row(&self, c: usize) -> &[u16] {
        let width = self.sizes.len();
        &self.features[c * width..(c + 1) * width]
    }

    /// A candidate's value indexes, one per parameter.
    fn values(&self, c: usize) -> &[u16] {
        &self.row(c)[..self.params]
    }

    /// Marks `c` proposed.
    fn take(&mut self, c: usize) {
        self.proposed[c] = true;
        self.unproposed -= 1;
        // One observed already was proposed before a restart (see `Search::resume`).
        if !self.observed[c] {
            self.pending.push(c);
        }
    }

    /// The next candidate of the initial design: the prior's fastest first, then at random.
    fn initial_unproposed(&mut self) -> Option<usize> {
        while !self.seeded.is_empty() {
            let c = self.seeded.remove(0);
            if !self.proposed[c] {
                return Some(c);
            }
        }
        loop {
            let c = *self.random.propose(1).first()?;
            if !self.proposed[c] {
                return Some(c);
            }
        }
    }

    /// The best candidate's value indexes, once the best has not improved for [`PATIENCE`]
    /// measurements: then the draw turns choose among the candidates two parameters away from
    /// it (any two values) instead of around it (any number of parameters, one value each).
    ///
    /// Why two: the trees split on one parameter at a time, so the candidates one parameter
    /// away are the ones they model best, and their bound and draws reach them anyway; what
    /// they learn last is two parameters that only pay together (a block's width and height).
    /// On the dedispersion space at 5 %, most runs used to settle on the second-best
    /// configuration, whose block is 8 × 96; the optimum's is 4 × 64 with another tile, and
    /// the candidates of that block measure worse on average than those of 8 × 96, so the
    /// forest left them unmeasured. Looking two parameters away from the best once stalled
    /// found the optimum in 64 runs of 100 instead of about 32. On convolution it costs a
    /// little reliability at 5 % (runs within 2 % of the optimum: 97 % to 94 %) and moves
    /// nothing else beyond noise (docs/experiments/2026-11-27-stalled-best-two-parameters.md).
    /// A patience of 24 found the optimum as often (67 in 100) at a larger cost on convolution.
    /// With the draws around the best before it stalls, dropping this rule costs dedispersion
    /// its exact optimum at 10 % (median 1.0006 against 1.0000), and adding the two-away
    /// candidates to the draws from the start costs the H200 GEMM what the box gained.
    fn stalled(&self) -> Option<&[u16]> {
        let (best, _) = self.best?;
        (self.since_best >= PATIENCE).then(|| self.values(best))
    }

    /// Whether a batch of `n`, asked for while `in_flight` candidates are out, takes the last
    /// proposals of the budget: those whose outcomes no later proposal will know. Asked for
    /// whole batches, that is the last batch; with slots refilled one at a time, the last
    /// `in_flight + 1`, since every proposal left is made before this one's outcome is back.
    fn last(&self, n: usize, in_flight: usize) -> bool {
        self.left <= n + in_flight
    }

    /// The training set: candidates (positions in the space) and log times, failures at the
    /// worst time seen.
    fn training(&self) -> (Vec<usize>, Vec<f64>) {
        let worst = self
            .measured
            .iter()
            .filter_map(|m| m.1)
            .fold(f64::MIN, f64::max);
        let xs = self.measured.iter().map(|(c, _)| *c).collect();
        let ys = self
            .measured
            .iter()
            .map(|(_, t)| t.unwrap_or(worst))
            .collect();
        (xs, ys)
    }
}

impl Forest {
    /// A forest fitted to the candidates `xs` and their log times `ys` (each tree on its own
    /// bootstrap sample), as it sees the `open` candidates.
    fn model(&mut self, xs: &[usize], ys: &[f64], open: &[usize]) -> Model {
        let xs: Vec<&[u16]> = xs.iter().map(|c| self.row(*c)).collect();
        let mut training = Training::new(&xs, ys, &self.sizes);
        let trees: Vec<Tree> = (0..TREES)
            .map(|_| Tree::fit(&mut training, &mut self.rng))
            .collect();
        let rows: Vec<&[u16]> = open.iter().map(|c| self.row(*c)).collect();
        let predictions: Vec<Vec<f64>> = trees
            .iter()
            .map(|t| {
                let mut p = Vec::new();
                t.predict_all(&rows, &mut p);
                p
            })
            .collect();
        let (mean, spread) = (0..open.len())
            .map(|i| {
                let (sum, sq) = predictions
                    .iter()
                    .fold((0.0, 0.0), |(s, q), p| (s + p[i], q + p[i] * p[i]));
                let mean = sum / TREES as f64;
                (mean, (sq / TREES as f64 - mean * mean).max(0.0).sqrt())
            })
            .unzip();
        Model {
            predictions,
            mean,
            spread,
        }
    }
}

/// What a fitted forest predicts for each open candidate (the log of its time).
struct Model {
    /// Each tree's prediction, per candidate.
    predictions: Vec<Vec<f64>>,
    /// The trees' mean and their spread (standard deviation), per candidate.
    mean: Vec<f64>,
    spread: Vec<f64>,
}

impl Strategy for Forest {
    fn propose(&mut self, n: usize) -> Vec<usize> {
        let valid = self.measured.iter().filter(|m| m.1.is_some()).count();
        let in_flight = self.pending.clone();
        let mut out = Vec::with_capacity(n);
        // The initial design is random, until it has been measured; or, when slots are refilled
        // while others are still timed, until it has been proposed and a first part of it
        // measured. Asked for whole batches, nothing is in flight and the two are the same.
        let first = initial(self.proposed.len());
        if valid < first.min(FIRST_FIT) || valid + in_flight.len() < first {
            while out.len() < n {
                let Some(c) = self.initial_unproposed() else {
                    break;
                };
                self.take(c);
                out.push(c);
            }
            self.proposals += out.len();
            return out;
        }
        let (mut xs, mut ys) = self.training();
        // Candidates in flight are believed as a batch's picks are (below): as the forest
        // fitted to what was measured expects of them, one spread slower. Otherwise a slot
        // refilled while 15 others are timed would go to a near twin of one of them.
        // What it believed of them when it chose them is kept; only those chosen otherwise (the
        // initial design) need a fit of their own.
        let unbelieved: Vec<usize> = in_flight
            .iter()
            .copied()
            .filter(|c| !self.believed.contains_key(c))
            .collect();
        if !unbelieved.is_empty() {
            let Model { mean, spread, .. } = self.model(&xs, &ys, &unbelieved);
            for (i, c) in unbelieved.iter().enumerate() {
                self.believed.insert(*c, mean[i] + spread[i]);
            }
        }
        for c in &in_flight {
            xs.push(*c);
            ys.push(self.believed[c]);
        }
        let open = self.pool();
        let mut taken = vec![false; open.len()];
        let last = self.last(n, in_flight.len());
        while out.len() < n && out.len() < open.len() {
            let Model {
                predictions,
                mean,
                spread,
            } = self.model(&xs, &ys, &open);
            let turn = self.proposals + out.len();
            // Even turns: the bound, its weight of the spread 0, 2/3, 4/3, 2 in turn. Odd turns:
            // one tree's best, among the candidates around the best measured, or two parameters
            // from it once it has stalled, while any is open. Ties (trees predict by leaves) go
            // to the better mean. The last proposals: the mean alone, one parameter from the
            // best measured while any is open.
            let bound_turn = turn.is_multiple_of(2);
            let score: Vec<f64> = if last {
                mean.clone()
            } else if bound_turn {
                let kappa = (turn / 2 % 4) as f64 * 2.0 / 3.0;
                (0..open.len())
                    .map(|i| mean[i] - kappa * spread[i])
                    .collect()
            } else {
                predictions[self.rng.below(TREES)].clone()
            };
            let better = |a: &usize, b: &usize| {
                score[*a]
                    .total_cmp(&score[*b])
                    .then(mean[*a].total_cmp(&mean[*b]))
            };
            let (centre, near): (_, Near) = match self.best {
                Some((b, _)) if last => (Some(self.values(b)), one_from),
                Some(_) if bound_turn => (None, around),
                Some((b, _)) => match self.stalled() {
                    Some(stalled) => (Some(stalled), two_from),
                    None => (Some(self.values(b)), around),
                },
                None => (None, around),
            };
            let pick = centre
                .and_then(|centre| {
                    (0..open.len())
                        .filter(|i| !taken[*i] && near(self.values(open[*i]), centre))
                        .min_by(better)
                })
                .or_else(|| (0..open.len()).filter(|i| !taken[*i]).min_by(better))
                .expect("an open candidate is left");
            taken[pick] = true;
            self.take(open[pick]);
            out.push(open[pick]);
            // The believer: the pick is taken to measure what the forest expects of it less
            // kindly, one spread slower, and the next pick of the batch comes from a forest
            // refitted with that.
            xs.push(open[pick]);
            ys.push(mean[pick] + spread[pick]);
            self.believed.insert(open[pick], mean[pick] + spread[pick]);
        }
        self.proposals += out.len();
        out
    }

    fn budget_left(&mut self, left: usize) {
        self.left = left;
    }

    /// A twelfth of the budget, at least `MIN_IN_FLIGHT`: the search then goes through its
    /// budget in about twelve rounds of what it has out at once, each chosen knowing the ones
    /// before, however many slots are free (see [`Search::in_flight`](super::Search::in_flight)).
    fn in_flight(&self, budget: usize) -> usize {
        (budget / ROUNDS).max(MIN_IN_FLIGHT)
    }

    fn observe(&mut self, candidate: usize, time: Option<f64>) {
        let log = time.filter(|t| t.is_finite() && *t > 0.0).map(f64::ln);
        self.measured.push((candidate, log));
        if let Some(seen) = self.observed.get_mut(candidate) {
            *seen = true;
        }
        if let Some(i) = self.pending.iter().position(|c| *c == candidate) {
            self.pending.remove(i);
        }
        self.believed.remove(&candidate);
        match log {
            Some(l) if self.best.is_none_or(|(_, b)| l < b) => {
                self.best = Some((candidate, l));
                self.since_best = 0;
            }
            _ => self.since_best += 1,
        }
    }
}

/// Which candidates a pick looks among, near a centre: [`one_from`], [`two_from`] or [`around`].
type Near = fn(&[u16], &[u16]) -> bool;

/// Whether `a` is one parameter from `b`.
fn one_from(a: &[u16], b: &[u16]) -> bool {
    distance(a, b) == 1
}

/// Whether `a` is two parameters from `b`.
fn two_from(a: &[u16], b: &[u16]) -> bool {
    distance(a, b) == 2
}

/// Whether `a` is around `b`: every parameter at most one value from `b`'s, two or more moved.
fn around(a: &[u16], b: &[u16]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(*y) <= 1) && distance(a, b) >= 2
}

/// In how many parameters two candidates differ.
fn distance(a: &[u16], b: &[u16]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three parameters of six values each, every combination valid.
    fn space() -> Space {
        let mut candidates = Vec::new();
        for a in 0..6u16 {
            for b in 0..6u16 {
                for c in 0..6u16 {
                    candidates.push(vec![a, b, c]);
                }
            }
        }
        Space {
            sizes: vec![6, 6, 6],
            candidates,
        }
    }

    /// Proposes `n` candidates, all from the initial random design, and observes the first as
    /// the best and the others slower, the further from it the slower.
    fn measured(n: usize, seed: u64) -> (Forest, Vec<u16>) {
        let space = space();
        let mut forest = Forest::new(&space, seed);
        let batch = forest.propose(n);
        assert_eq!(batch.len(), n, "the initial design takes a whole batch");
        let best = space.candidates[batch[0]].clone();
        for c in batch {
            let time = 1.0 + distance(&space.candidates[c], &best) as f64;
            forest.observe(c, Some(time));
        }
        (forest, best)
    }

    #[test]
    fn once_stalled_the_draws_look_two_parameters_from_the_best() {
        for seed in 1..=5 {
            // The best first, then PATIENCE measurements that do not improve on it. The first
            // turn after the initial design of 1 + PATIENCE is odd: a draw.
            let (mut forest, best) = measured(1 + PATIENCE, seed);
            assert!(forest.stalled().is_some(), "seed {seed}: stalled");
            let draw = forest.propose(1)[0];
            assert_eq!(
                distance(forest.values(draw), &best),
                2,
                "seed {seed}: the draw of a stalled search is two parameters from the best"
            );
        }
    }

    #[test]
    fn a_search_that_still_improves_is_not_stalled() {
        let (forest, _) = measured(PATIENCE, 1);
        assert!(
            forest.stalled().is_none(),
            "one measurement short of PATIENCE"
        );
        let (mut forest, _) = measured(1 + PATIENCE, 1);
        let next = forest.propose(1)[0];
        forest.observe(next, Some(0.5));
        assert!(forest.stalled().is_none(), "a new best resets the count");
    }

    #[test]
    fn the_draws_look_around_the_best_until_it_stalls() {
        for seed in 1..=5 {
            // An initial design of 9: the next turn, the 10th, is odd, a draw. The times grow
            // with the distance from the best, so the trees favour the candidates one
            // parameter from it, which are not around it.
            let (mut forest, best) = measured(9, seed);
            let draw = forest.propose(1)[0];
            let drawn = forest.values(draw);
            assert!(
                around(drawn, &best),
                "seed {seed}: the draw {drawn:?} is not around the best {best:?}"
            );
        }
    }

    #[test]
    fn around_is_within_one_value_of_each_parameter_two_or_more_moved() {
        assert!(around(&[1, 2, 3], &[2, 3, 3]));
        assert!(around(&[1, 2, 3], &[0, 1, 2]));
        assert!(!around(&[1, 2, 3], &[2, 2, 3]), "one moved: a neighbour");
        assert!(!around(&[1, 2, 3], &[3, 3, 3]), "two values away");
        assert!(!around(&[1, 2, 3], &[1, 2, 3]), "itself");
    }
}
