//! The regression trees of the forest: grown on value indexes, so finding a split is a count per
//! value, not a sort.

use super::super::Rng;

/// A node with fewer measurements than this is a leaf.
const MIN_SPLIT: usize = 4;
/// Rows a tree is grown on, at most: its bootstrap sample is this many draws once more are
/// measured, so that a fit, done for every pick, costs the same at any budget. Budgets under
/// it (every budget of a few percent of a space of 10⁴) are not changed by it.
const MAX_SAMPLE: usize = 1_024;

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

/// A training set by columns: each feature's values over the rows, so that a split's count
/// walks one contiguous column, and the buffers a fit reuses at every node.
pub(super) struct Training<'a> {
    /// `columns[f][row]`: feature `f` of a row.
    columns: Vec<Vec<u16>>,
    ys: &'a [f64],
    sizes: &'a [usize],
    /// The features that take more than one value (only they can split).
    varying: Vec<usize>,
    sums: Vec<f64>,
    counts: Vec<usize>,
    /// The log times of a node's rows, gathered once for every feature's count.
    node_ys: Vec<f64>,
}

impl<'a> Training<'a> {
    /// The rows `xs` (each a candidate's features) and their log times `ys`.
    pub(super) fn new(xs: &[&[u16]], ys: &'a [f64], sizes: &'a [usize]) -> Training<'a> {
        let columns = (0..sizes.len())
            .map(|f| xs.iter().map(|x| x[f]).collect())
            .collect();
        let widest = sizes.iter().copied().max().unwrap_or(0);
        Training {
            columns,
            ys,
            sizes,
            varying: (0..sizes.len()).filter(|f| sizes[*f] > 1).collect(),
            sums: vec![0.0; widest],
            counts: vec![0; widest],
            node_ys: Vec::with_capacity(ys.len().min(MAX_SAMPLE)),
        }
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
        tree.grow(training, &mut sample, rng, 0);
        tree
    }

    /// Grows the node of `rows`, splitting them in place.
    fn grow(
        &mut self,
        training: &mut Training<'_>,
        rows: &mut [usize],
        rng: &mut Rng,
        depth: usize,
    ) -> usize {
        let id = self.nodes.len();
        let ys = training.ys;
        let mean = rows.iter().map(|r| ys[*r]).sum::<f64>() / rows.len().max(1) as f64;
        self.nodes.push(Node {
            feature: 0,
            threshold: u16::MAX,
            children: [id as u32; 2],
        });
        self.values.push(mean);
        self.depth = self.depth.max(depth);
        if rows.len() < MIN_SPLIT {
            return id;
        }
        let Some((feature, threshold)) = best_split(training, rows, rng) else {
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
        let left = self.grow(training, l, rng, depth + 1);
        let right = self.grow(training, r, rng, depth + 1);
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

/// The split of `rows` that most lowers the squared error, over every parameter that varies
/// (a parameter with one value cannot split), tried in a random order so that equal gains go
/// to a parameter drawn at random; `None` when no split separates them.
///
/// Every parameter, not a random half as random forests usually draw: the trees then differ
/// only by their bootstrap samples and by those ties. With 16 to 200 measurements, a tree
/// denied the one parameter that matters at a node splits on noise; over 3,000 seeds on the
/// convolution space at 1 % with batches of 16, all of them took the median from 1.442 to
/// 1.430, and at 2 % (1,000 seeds) from 1.111 to 1.074 (docs/experiments/).
fn best_split(training: &mut Training<'_>, rows: &[usize], rng: &mut Rng) -> Option<(usize, u16)> {
    let ys = training.ys;
    let mut node_ys = std::mem::take(&mut training.node_ys);
    node_ys.clear();
    node_ys.extend(rows.iter().map(|r| ys[*r]));
    let (total, count) = (node_ys.iter().sum::<f64>(), rows.len() as f64);
    let mut best: Option<(f64, usize, u16)> = None;
    let varying = training.varying.len();
    for k in 0..varying {
        // A shuffle as it goes: each try a parameter not tried yet at this node.
        let pick = k + rng.below(varying - k);
        training.varying.swap(k, pick);
        let f = training.varying[k];
        let size = training.sizes[f];
        let (sums, counts) = (&mut training.sums[..size], &mut training.counts[..size]);
        sums.fill(0.0);
        counts.fill(0);
        let column = &training.columns[f];
        for (r, y) in rows.iter().zip(&node_ys) {
            let v = column[*r] as usize;
            sums[v] += y;
            counts[v] += 1;
        }
        let (mut ls, mut lc) = (0.0, 0usize);
        for v in 0..size.saturating_sub(1) {
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
    training.node_ys = node_ys;
    // A split must improve on the node's own mean.
    best.filter(|b| b.0 > total * total / count + 1e-12)
        .map(|b| (b.1, b.2))
}
