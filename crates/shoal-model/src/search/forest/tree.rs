//! The regression trees of the forest: grown on value indexes, so finding a split is a count per
//! value, not a sort.

use super::super::Rng;

/// A node with fewer measurements than this is a leaf.
const MIN_SPLIT: usize = 4;
/// Rows a tree is grown on, at most: its bootstrap sample is this many draws once more are
/// measured, so that a fit, done for every pick, costs the same at any budget. Budgets under
/// it (every budget of a few percent of a space of 10⁴) are not changed by it.
const MAX_SAMPLE: usize = 1_024;
/// Gains closer than this, relative to the larger, are a tie: they come from the same split
/// of the rows summed in another order (two parameters that part them alike), and a tie goes
/// to the parameter tried first, which is drawn at random.
const TIE: f64 = 1e-9;

/// A regression tree over value indexes: a node splits on `x[feature] <= threshold`.
///
/// Predicting the forest's pool is half of a search's time, so a tree predicts many candidates
/// at once ([`Tree::predict_all`]): each step of a walk picks a child by indexing with the
/// comparison, not by branching on it (whose outcome no predictor can guess), and
/// [`LANES`] walks go side by side, so that the processor overlaps their loads. A leaf is its
/// own two children, so every walk can take as many steps as the deepest of them.
pub(super) struct Tree {
    nodes: Vec<Node>,
    /// Each node's mean log time, read at the leaves.
    values: Vec<f64>,
    /// The most splits from the root to a leaf.
    depth: usize,
}

#[derive(Clone, Copy)]
struct Node {
    feature: u16,
    threshold: u16,
    /// The left child (`x[feature] <= threshold`) and the right one; a leaf's are itself.
    children: [u32; 2],
}

/// Walks through a tree side by side in [`Tree::predict_all`].
const LANES: usize = 8;

/// A node's rows counted by value, every feature's values one after another (see
/// [`Training::offsets`]): how many rows take each value and the sum of their log times. A
/// split is read off it, and a child's is its parent's less its sibling's.
struct Histogram {
    sums: Vec<f64>,
    counts: Vec<u32>,
}

impl Histogram {
    /// Takes the rows counted in `part`, a part of these rows, out of these.
    fn remove(&mut self, part: &Histogram) {
        for (s, t) in self.sums.iter_mut().zip(&part.sums) {
            *s -= t;
        }
        for (c, t) in self.counts.iter_mut().zip(&part.counts) {
            *c -= t;
        }
    }
}

/// A training set by columns: each feature's values over the rows, so that a count walks one
/// contiguous column, and the buffers a fit reuses at every node.
pub(super) struct Training<'a> {
    /// `columns[f][row]`: feature `f` of a row.
    columns: Vec<Vec<u16>>,
    ys: &'a [f64],
    sizes: &'a [usize],
    /// The features that take more than one value (only they can split).
    varying: Vec<usize>,
    /// Where feature `f`'s values start in a [`Histogram`].
    offsets: Vec<usize>,
    /// Histograms no node holds now, kept for the next.
    spare: Vec<Histogram>,
    /// The log times of a node's rows, gathered once for every feature's count.
    node_ys: Vec<f64>,
}

impl<'a> Training<'a> {
    /// The rows `xs` (each a candidate's features) and their log times `ys`.
    pub(super) fn new(xs: &[&[u16]], ys: &'a [f64], sizes: &'a [usize]) -> Training<'a> {
        let columns = (0..sizes.len())
            .map(|f| xs.iter().map(|x| x[f]).collect())
            .collect();
        let offsets = sizes
            .iter()
            .scan(0, |at, size| {
                let start = *at;
                *at += size;
                Some(start)
            })
            .collect();
        Training {
            columns,
            ys,
            sizes,
            varying: (0..sizes.len()).filter(|f| sizes[*f] > 1).collect(),
            offsets,
            spare: Vec::new(),
            node_ys: Vec::with_capacity(ys.len().min(MAX_SAMPLE)),
        }
    }

    /// The histogram of `rows`, counted.
    fn count(&mut self, rows: &[usize]) -> Histogram {
        let width = self.sizes.iter().sum();
        let mut h = self.spare.pop().unwrap_or_else(|| Histogram {
            sums: vec![0.0; width],
            counts: vec![0; width],
        });
        h.sums.fill(0.0);
        h.counts.fill(0);
        let ys = self.ys;
        self.node_ys.clear();
        self.node_ys.extend(rows.iter().map(|r| ys[*r]));
        for f in &self.varying {
            let at = self.offsets[*f];
            let size = self.sizes[*f];
            let (sums, counts) = (&mut h.sums[at..at + size], &mut h.counts[at..at + size]);
            let column = &self.columns[*f];
            for (r, y) in rows.iter().zip(&self.node_ys) {
                let v = column[*r] as usize;
                sums[v] += y;
                counts[v] += 1;
            }
        }
        h
    }
}

impl Tree {
    /// A tree grown on a bootstrap sample, each split the best over every parameter that
    /// varies (see [`best_split`]).
    pub(super) fn fit(training: &mut Training<'_>, rng: &mut Rng) -> Tree {
        let n = training.ys.len();
        let mut sample: Vec<usize> = (0..n.min(MAX_SAMPLE)).map(|_| rng.below(n)).collect();
        let mut tree = Tree {
            nodes: Vec::with_capacity(sample.len() / 2 + 1),
            values: Vec::with_capacity(sample.len() / 2 + 1),
            depth: 0,
        };
        tree.grow(training, &mut sample, None, rng, 0);
        tree
    }

    /// Grows the node of `rows`, splitting them in place. `counted` is their histogram when
    /// the parent has it (see [`Histogram`]).
    ///
    /// Only the smaller child's rows are counted; the larger's histogram is the parent's less
    /// the smaller's. Counting was half of a search's time on large spaces, and this counts
    /// each row about once per level it is in the smaller part of, not once per level.
    fn grow(
        &mut self,
        training: &mut Training<'_>,
        rows: &mut [usize],
        counted: Option<Histogram>,
        rng: &mut Rng,
        depth: usize,
    ) -> usize {
        let id = self.nodes.len();
        let ys = training.ys;
        let total = rows.iter().map(|r| ys[*r]).sum::<f64>();
        self.nodes.push(Node {
            feature: 0,
            threshold: u16::MAX,
            children: [id as u32; 2],
        });
        self.values.push(total / rows.len().max(1) as f64);
        self.depth = self.depth.max(depth);
        if rows.len() < MIN_SPLIT {
            training.spare.extend(counted);
            return id;
        }
        let histogram = counted.unwrap_or_else(|| training.count(rows));
        let Some((feature, threshold)) = best_split(training, &histogram, total, rows.len(), rng)
        else {
            training.spare.push(histogram);
            return id;
        };
        let column = &training.columns[feature];
        // In place: the rows that go left first.
        let mut mid = 0;
        for i in 0..rows.len() {
            if column[rows[i]] <= threshold {
                rows.swap(i, mid);
                mid += 1;
            }
        }
        let (l, r) = rows.split_at_mut(mid);
        let (left_counted, right_counted) = if l.len() < MIN_SPLIT && r.len() < MIN_SPLIT {
            training.spare.push(histogram);
            (None, None)
        } else {
            let mut larger = histogram;
            let smaller = training.count(if l.len() <= r.len() { l } else { r });
            larger.remove(&smaller);
            if l.len() <= r.len() {
                (Some(smaller), Some(larger))
            } else {
                (Some(larger), Some(smaller))
            }
        };
        let left = self.grow(training, l, left_counted, rng, depth + 1);
        let right = self.grow(training, r, right_counted, rng, depth + 1);
        self.nodes[id] = Node {
            feature: feature as u16,
            threshold,
            children: [left as u32, right as u32],
        };
        id
    }

    /// The tree's prediction for each candidate of `xs` (its features), into `out`.
    pub(super) fn predict_all(&self, xs: &[&[u16]], out: &mut Vec<f64>) {
        out.clear();
        out.reserve(xs.len());
        for chunk in xs.chunks(LANES) {
            let mut at = [0u32; LANES];
            for _ in 0..self.depth {
                let mut moved = false;
                for (a, x) in at.iter_mut().zip(chunk) {
                    let node = self.nodes[*a as usize];
                    let right = x[node.feature as usize] > node.threshold;
                    let next = node.children[usize::from(right)];
                    moved |= next != *a;
                    *a = next;
                }
                // Every walk at its leaf: most leaves lie well above the deepest.
                if !moved {
                    break;
                }
            }
            out.extend(at[..chunk.len()].iter().map(|a| self.values[*a as usize]));
        }
    }
}

/// The split of a node's rows (counted in `histogram`, `count` of them, their log times summing
/// to `total`) that most lowers the squared error, over every parameter that varies (a
/// parameter with one value cannot split), tried in a random order so that equal gains go to
/// a parameter drawn at random; `None` when no split separates them.
///
/// Every parameter, not a random half as random forests usually draw: the trees then differ
/// only by their bootstrap samples and by those ties. With 16 to 200 measurements, a tree
/// denied the one parameter that matters at a node splits on noise; over 3,000 seeds on the
/// convolution space at 1 % with batches of 16, all of them took the median from 1.442 to
/// 1.430, and at 2 % (1,000 seeds) from 1.111 to 1.074 (docs/experiments/).
fn best_split(
    training: &mut Training<'_>,
    histogram: &Histogram,
    total: f64,
    count: usize,
    rng: &mut Rng,
) -> Option<(usize, u16)> {
    let mut best: Option<(f64, usize, u16)> = None;
    let varying = training.varying.len();
    for k in 0..varying {
        // A shuffle as it goes: each try a parameter not tried yet at this node.
        let pick = k + rng.below(varying - k);
        training.varying.swap(k, pick);
        let f = training.varying[k];
        let (at, size) = (training.offsets[f], training.sizes[f]);
        let (sums, counts) = (
            &histogram.sums[at..at + size],
            &histogram.counts[at..at + size],
        );
        let (mut ls, mut lc) = (0.0, 0usize);
        for v in 0..size.saturating_sub(1) {
            ls += sums[v];
            lc += counts[v] as usize;
            if lc == 0 || lc == count || counts[v] == 0 {
                continue;
            }
            let rc = (count - lc) as f64;
            // Maximising the between-group sum of squares minimises the within-group one.
            let gain = ls * ls / lc as f64 + (total - ls) * (total - ls) / rc;
            if best.is_none_or(|b| gain > b.0 + TIE * b.0.abs()) {
                best = Some((gain, f, v as u16));
            }
        }
    }
    // A split must improve on the node's own mean.
    let count = count as f64;
    best.filter(|b| b.0 > total * total / count + 1e-12)
        .map(|b| (b.1, b.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 200 rows of three features (sizes 5, 3 and 1) and log times from a small generator.
    fn rows() -> (Vec<Vec<u16>>, Vec<f64>) {
        let mut rng = Rng::new(7);
        let xs: Vec<Vec<u16>> = (0..200)
            .map(|_| vec![rng.below(5) as u16, rng.below(3) as u16, 0])
            .collect();
        let ys = xs
            .iter()
            .map(|x| f64::from(x[0]) * 0.5 - f64::from(x[1]) + rng.below(100) as f64 * 1e-3)
            .collect();
        (xs, ys)
    }

    #[test]
    fn a_childs_histogram_by_subtraction_is_the_one_counted() {
        let (xs, ys) = rows();
        let sizes = [5, 3, 1];
        let refs: Vec<&[u16]> = xs.iter().map(|x| x.as_slice()).collect();
        let mut training = Training::new(&refs, &ys, &sizes);
        let all: Vec<usize> = (0..xs.len()).collect();
        let (part, rest): (Vec<usize>, Vec<usize>) = all.iter().partition(|r| xs[**r][1] == 2);
        let mut larger = training.count(&all);
        let smaller = training.count(&part);
        larger.remove(&smaller);
        let counted = training.count(&rest);
        assert_eq!(larger.counts, counted.counts);
        for (a, b) in larger.sums.iter().zip(&counted.sums) {
            assert!((a - b).abs() < 1e-9, "{a} against {b}");
        }
        // Feature 0's counts over the rest are its rows, every value of it.
        assert_eq!(counted.counts[..5].iter().sum::<u32>() as usize, rest.len());
    }

    #[test]
    fn a_tree_learns_a_step_it_is_shown() {
        // The time steps at feature 0 > 2 and nowhere else: the tree's first split finds it and
        // every prediction is on the right side of the step.
        let xs: Vec<Vec<u16>> = (0..60u16).map(|i| vec![i % 5, i % 3]).collect();
        let ys: Vec<f64> = xs
            .iter()
            .map(|x| if x[0] > 2 { 1.0 } else { 0.0 })
            .collect();
        let sizes = [5, 3];
        let refs: Vec<&[u16]> = xs.iter().map(|x| x.as_slice()).collect();
        let mut training = Training::new(&refs, &ys, &sizes);
        let mut rng = Rng::new(3);
        let tree = Tree::fit(&mut training, &mut rng);
        let mut predicted = Vec::new();
        tree.predict_all(&refs, &mut predicted);
        for (x, p) in xs.iter().zip(&predicted) {
            let expected = if x[0] > 2 { 1.0 } else { 0.0 };
            assert!((p - expected).abs() < 1e-12, "{x:?}: {p}");
        }
    }
}
