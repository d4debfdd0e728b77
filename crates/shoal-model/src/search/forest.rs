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
//! 1.483, for one refit per pick instead of one per batch (BENCHMARKS.md).
//!
//! The believed time is pessimistic: the trees' mean plus one spread, not the mean. A pick the
//! forest is unsure of then makes its neighbourhood look worse, not merely known, so the next
//! picks leave it more readily. Over 3,000 seeds at 1 % with batches of 16 that took the median
//! from 1.473 to 1.442, and at 5 % runs within 2 % of the optimum from 94 % to 97 %; an
//! optimistic liar (mean less a spread) did worse, 1.547, and two spreads no better, 1.464.
//!
//! Why a forest and not a Gaussian process: the parameters are discrete, often categorical
//! (a flag, a loop order), and the times jump at some values (a tile that no longer fits in
//! shared memory); trees take both as they are, where a GP needs a kernel designed for them.
//! Failed candidates are learnt as the worst time seen, so the forest steers away from them.

use super::{Random, Rng, Space, Strategy};

/// Valid candidates measured at random before the forest is trusted: one in 25 of the space,
/// at least 6 and at most 16, so that a small space's budget is not spent at random.
fn initial(size: usize) -> usize {
    (size / 25).clamp(6, 16).min(size)
}
/// Trees in the forest.
const TREES: usize = 16;
/// A node with fewer measurements than this is a leaf.
const MIN_SPLIT: usize = 4;

/// The forest-guided search (see the module's documentation).
pub struct Forest {
    space: Space,
    rng: Rng,
    proposed: Vec<bool>,
    /// Random candidates not proposed yet, in order (the initial design and the fallback).
    random: Random,
    /// Measured candidates and their log times; failures are `None` until a fit.
    measured: Vec<(usize, Option<f64>)>,
    /// How many candidates were proposed so far (the batches' exploration turns).
    proposals: usize,
}

impl Forest {
    pub fn new(space: &Space, seed: u64) -> Self {
        Forest {
            space: space.clone(),
            rng: Rng::new(seed ^ 0xF0_4E57),
            proposed: vec![false; space.candidates.len()],
            random: Random::new(space, seed),
            measured: Vec::new(),
            proposals: 0,
        }
    }

    fn random_unproposed(&mut self) -> Option<usize> {
        loop {
            let c = *self.random.propose(1).first()?;
            if !self.proposed[c] {
                return Some(c);
            }
        }
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
        let xs: Vec<&[u16]> = xs
            .iter()
            .map(|c| self.space.candidates[*c].as_slice())
            .collect();
        let trees: Vec<Tree> = (0..TREES)
            .map(|_| Tree::fit(&xs, ys, &self.space.sizes, &mut self.rng))
            .collect();
        let predictions: Vec<Vec<f64>> = trees
            .iter()
            .map(|t| {
                open.iter()
                    .map(|c| t.predict(&self.space.candidates[*c]))
                    .collect()
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
        let mut out = Vec::with_capacity(n);
        if valid < initial(self.space.candidates.len()) {
            while out.len() < n {
                let Some(c) = self.random_unproposed() else {
                    break;
                };
                self.proposed[c] = true;
                out.push(c);
            }
            self.proposals += out.len();
            return out;
        }
        let (mut xs, mut ys) = self.training();
        let open: Vec<usize> = (0..self.space.candidates.len())
            .filter(|c| !self.proposed[*c])
            .collect();
        let mut taken = vec![false; open.len()];
        while out.len() < n && out.len() < open.len() {
            let Model {
                predictions,
                mean,
                spread,
            } = self.model(&xs, &ys, &open);
            let turn = self.proposals + out.len();
            // Even turns: the bound, its weight of the spread 0, 2/3, 4/3, 2 in turn. Odd turns:
            // one tree's best. Ties (trees predict by leaves) go to the better mean.
            let score: Vec<f64> = if turn.is_multiple_of(2) {
                let kappa = (turn / 2 % 4) as f64 * 2.0 / 3.0;
                (0..open.len())
                    .map(|i| mean[i] - kappa * spread[i])
                    .collect()
            } else {
                predictions[self.rng.below(TREES)].clone()
            };
            let pick = (0..open.len())
                .filter(|i| !taken[*i])
                .min_by(|a, b| {
                    score[*a]
                        .total_cmp(&score[*b])
                        .then(mean[*a].total_cmp(&mean[*b]))
                })
                .expect("an open candidate is left");
            taken[pick] = true;
            self.proposed[open[pick]] = true;
            out.push(open[pick]);
            // The believer: the pick is taken to measure what the forest expects of it less
            // kindly, one spread slower, and the next pick of the batch comes from a forest
            // refitted with that.
            xs.push(open[pick]);
            ys.push(mean[pick] + spread[pick]);
        }
        self.proposals += out.len();
        out
    }

    fn observe(&mut self, candidate: usize, time: Option<f64>) {
        let log = time.filter(|t| t.is_finite() && *t > 0.0).map(f64::ln);
        self.measured.push((candidate, log));
    }
}

/// A regression tree over value indexes: a node splits on `x[feature] <= threshold`.
struct Tree {
    nodes: Vec<Node>,
}

enum Node {
    Leaf(f64),
    Split {
        feature: usize,
        threshold: u16,
        left: usize,
        right: usize,
    },
}

impl Tree {
    /// A tree grown on a bootstrap sample, each split the best over every parameter that
    /// varies (see [`best_split`]).
    fn fit(xs: &[&[u16]], ys: &[f64], sizes: &[usize], rng: &mut Rng) -> Tree {
        let sample: Vec<usize> = (0..xs.len()).map(|_| rng.below(xs.len())).collect();
        let mut tree = Tree { nodes: Vec::new() };
        tree.grow(xs, ys, sizes, sample, rng);
        tree
    }

    fn grow(
        &mut self,
        xs: &[&[u16]],
        ys: &[f64],
        sizes: &[usize],
        rows: Vec<usize>,
        rng: &mut Rng,
    ) -> usize {
        let id = self.nodes.len();
        let mean = rows.iter().map(|r| ys[*r]).sum::<f64>() / rows.len().max(1) as f64;
        self.nodes.push(Node::Leaf(mean));
        if rows.len() < MIN_SPLIT {
            return id;
        }
        let Some((feature, threshold)) = best_split(xs, ys, sizes, &rows, rng) else {
            return id;
        };
        let (l, r): (Vec<usize>, Vec<usize>) = rows
            .into_iter()
            .partition(|row| xs[*row][feature] <= threshold);
        let left = self.grow(xs, ys, sizes, l, rng);
        let right = self.grow(xs, ys, sizes, r, rng);
        self.nodes[id] = Node::Split {
            feature,
            threshold,
            left,
            right,
        };
        id
    }

    fn predict(&self, x: &[u16]) -> f64 {
        let mut id = 0;
        loop {
            match self.nodes[id] {
                Node::Leaf(v) => return v,
                Node::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => id = if x[feature] <= threshold { left } else { right },
            }
        }
    }
}

/// The split of `rows` that most lowers the squared error, over every parameter that varies
/// (a parameter with one value cannot split), tried in a random order so that equal gains go
/// to a parameter drawn at random; `None` when no split separates them.
///
/// Every parameter, not a random half as random forests usually draw: the trees then differ
/// only by their bootstrap samples and by those ties. With 16 to 200 measurements, a tree
/// denied the one parameter that matters at a node splits on noise; over 3,000 seeds on the
/// convolution space at 1 % with batches of 16, all of them took the median from 1.442 to
/// 1.430, and at 2 % (1,000 seeds) from 1.111 to 1.074 (BENCHMARKS.md).
fn best_split(
    xs: &[&[u16]],
    ys: &[f64],
    sizes: &[usize],
    rows: &[usize],
    rng: &mut Rng,
) -> Option<(usize, u16)> {
    let (total, count) = (rows.iter().map(|r| ys[*r]).sum::<f64>(), rows.len() as f64);
    let mut best: Option<(f64, usize, u16)> = None;
    let mut varying: Vec<usize> = (0..sizes.len()).filter(|f| sizes[*f] > 1).collect();
    for k in 0..varying.len() {
        // A shuffle as it goes: each try a parameter not tried yet at this node.
        let pick = k + rng.below(varying.len() - k);
        varying.swap(k, pick);
        let f = varying[k];
        let mut sums = vec![0.0; sizes[f]];
        let mut counts = vec![0usize; sizes[f]];
        for r in rows {
            let v = xs[*r][f] as usize;
            sums[v] += ys[*r];
            counts[v] += 1;
        }
        let (mut ls, mut lc) = (0.0, 0usize);
        for v in 0..sizes[f].saturating_sub(1) {
            ls += sums[v];
            lc += counts[v];
            if lc == 0 || lc == rows.len() || counts[v] == 0 {
                continue;
            }
            let rc = count - lc as f64;
            // Maximising the between-group sum of squares minimises the within-group one.
            let gain = ls * ls / lc as f64 + (total - ls) * (total - ls) / rc;
            if best.is_none_or(|b| gain > b.0) {
                best = Some((gain, f, v as u16));
            }
        }
    }
    // A split must improve on the node's own mean.
    best.filter(|b| b.0 > total * total / count + 1e-12)
        .map(|b| (b.1, b.2))
}
