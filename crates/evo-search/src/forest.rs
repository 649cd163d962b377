//! A small random forest of regression trees: the cost model of the [`Surrogate`]
//! strategy, fitted to a run's own measurements at every generation.
//!
//! Written here rather than taken from a crate because the strategy needs three things
//! together: every random draw from the caller's RNG (so a proposal depends only on the
//! seed and the stored results), the spread of the trees' predictions (the model's
//! uncertainty, which the acquisition function weighs), and a few milliseconds on a few
//! hundred points. Trees are CART with squared error: each split the best threshold
//! over a random subset of the features, each tree grown on a bootstrap sample.
//!
//! [`Surrogate`]: crate::surrogate::Surrogate

use rand::seq::SliceRandom;
use rand::Rng;

/// How the trees grow.
#[derive(Clone, Debug, PartialEq)]
pub struct ForestParams {
    pub trees: usize,
    /// Features considered per split, as a fraction of all (at least one).
    pub feature_fraction: f64,
    /// A node with fewer samples is a leaf.
    pub min_samples_split: usize,
    /// No split leaves fewer samples than this on either side.
    pub min_samples_leaf: usize,
    pub max_depth: usize,
}

impl Default for ForestParams {
    fn default() -> Self {
        ForestParams {
            trees: 32,
            feature_fraction: 0.8,
            min_samples_split: 3,
            min_samples_leaf: 1,
            max_depth: 20,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Leaf(f64),
    /// Samples with `x[feature] <= threshold` go to `left`, the others to `right`
    /// (indices into the tree's nodes).
    Split {
        feature: usize,
        threshold: f64,
        left: usize,
        right: usize,
    },
}

#[derive(Clone, Debug, PartialEq)]
struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    fn predict(&self, x: &[f64]) -> f64 {
        let mut i = 0;
        loop {
            match self.nodes[i] {
                Node::Leaf(v) => return v,
                Node::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => i = if x[feature] <= threshold { left } else { right },
            }
        }
    }
}

/// A fitted forest.
#[derive(Clone, Debug, PartialEq)]
pub struct Forest {
    trees: Vec<Tree>,
}

/// One prediction: the mean of the trees and their standard deviation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub mean: f64,
    pub std: f64,
}

impl Forest {
    /// Fits `params.trees` trees to rows `x` (all of one length) and targets `y`. `None`
    /// without data.
    pub fn fit(
        x: &[Vec<f64>],
        y: &[f64],
        params: &ForestParams,
        rng: &mut impl Rng,
    ) -> Option<Forest> {
        assert_eq!(x.len(), y.len(), "one target per row");
        let n = x.len();
        let width = x.first()?.len();
        let per_split =
            ((width as f64 * params.feature_fraction).ceil() as usize).clamp(1, width.max(1));
        // Each feature's distinct values, ascending, and every row's bin among them:
        // splits are found by summing targets per bin, not by sorting at every node.
        let values: Vec<Vec<f64>> = (0..width)
            .map(|f| {
                let mut v: Vec<f64> = x.iter().map(|r| r[f]).collect();
                v.sort_by(f64::total_cmp);
                v.dedup();
                v
            })
            .collect();
        let bins: Vec<Vec<usize>> = x
            .iter()
            .map(|r| {
                (0..width)
                    .map(|f| {
                        values[f]
                            .binary_search_by(|v| v.total_cmp(&r[f]))
                            .expect("a value of the column")
                    })
                    .collect()
            })
            .collect();
        let mut features: Vec<usize> = (0..width).collect();
        let trees = (0..params.trees.max(1))
            .map(|_| {
                let mut sample: Vec<usize> = (0..n).map(|_| rng.random_range(0..n)).collect();
                let mut builder = Builder {
                    bins: &bins,
                    values: &values,
                    y,
                    params,
                    per_split,
                    nodes: Vec::new(),
                };
                builder.grow(&mut sample, 0, &mut features, rng);
                Tree {
                    nodes: builder.nodes,
                }
            })
            .collect();
        Some(Forest { trees })
    }

    pub fn predict(&self, x: &[f64]) -> Prediction {
        let n = self.trees.len() as f64;
        let (mut sum, mut sq) = (0.0, 0.0);
        for t in &self.trees {
            let v = t.predict(x);
            sum += v;
            sq += v * v;
        }
        let mean = sum / n;
        Prediction {
            mean,
            std: (sq / n - mean * mean).max(0.0).sqrt(),
        }
    }
}

struct Builder<'a> {
    /// Row -> feature -> bin (index into `values[feature]`).
    bins: &'a [Vec<usize>],
    values: &'a [Vec<f64>],
    y: &'a [f64],
    params: &'a ForestParams,
    per_split: usize,
    nodes: Vec<Node>,
}

/// The best split of a node found so far.
struct Best {
    score: f64,
    feature: usize,
    /// Rows whose bin is at most this go left.
    bin: usize,
}

impl Builder<'_> {
    /// Grows the subtree of the samples `idx` (row indices, repeats allowed) and returns
    /// its root's index.
    fn grow(
        &mut self,
        idx: &mut [usize],
        depth: usize,
        features: &mut [usize],
        rng: &mut impl Rng,
    ) -> usize {
        let n = idx.len();
        let mean = idx.iter().map(|&i| self.y[i]).sum::<f64>() / n as f64;
        let at = self.nodes.len();
        self.nodes.push(Node::Leaf(mean));
        let p = self.params;
        if n < p.min_samples_split.max(2)
            || depth >= p.max_depth
            || idx.iter().all(|&i| self.y[i] == self.y[idx[0]])
        {
            return at;
        }
        // The sampled features first; if none of them splits (all constant here), the rest.
        features.shuffle(rng);
        let mut best = self.best_split(idx, &features[..self.per_split]);
        if best.is_none() {
            best = self.best_split(idx, &features[self.per_split..]);
        }
        let Some(best) = best else { return at };
        // Partition in place: left samples first.
        let mut split = 0;
        for k in 0..n {
            if self.bins[idx[k]][best.feature] <= best.bin {
                idx.swap(split, k);
                split += 1;
            }
        }
        let (left, right) = idx.split_at_mut(split);
        let l = self.grow(left, depth + 1, features, rng);
        let r = self.grow(right, depth + 1, features, rng);
        let values = &self.values[best.feature];
        self.nodes[at] = Node::Split {
            feature: best.feature,
            // Halfway to the next value of the column, like a sorted-scan CART.
            threshold: 0.5 * (values[best.bin] + values[best.bin + 1]),
            left: l,
            right: r,
        };
        at
    }

    /// The split of `idx` on one of `features` that most reduces the squared error, if
    /// any leaves `min_samples_leaf` on both sides. Ties go to the earlier feature and
    /// the lower bin, so the tree depends only on the RNG's draws.
    fn best_split(&self, idx: &[usize], features: &[usize]) -> Option<Best> {
        let n = idx.len();
        let leaf = self.params.min_samples_leaf.max(1);
        let total: f64 = idx.iter().map(|&i| self.y[i]).sum();
        let mut best: Option<Best> = None;
        let (mut counts, mut sums): (Vec<usize>, Vec<f64>) = (Vec::new(), Vec::new());
        for &f in features {
            let width = self.values[f].len();
            counts.clear();
            counts.resize(width, 0);
            sums.clear();
            sums.resize(width, 0.0);
            for &i in idx {
                let b = self.bins[i][f];
                counts[b] += 1;
                sums[b] += self.y[i];
            }
            let (mut nl, mut left_sum) = (0usize, 0.0);
            for b in 0..width.saturating_sub(1) {
                nl += counts[b];
                left_sum += sums[b];
                // A split sits after a non-empty bin and leaves rows on both sides.
                if counts[b] == 0 || nl < leaf || n - nl < leaf {
                    continue;
                }
                let right_sum = total - left_sum;
                // Maximizing this minimizes the children's summed squared error.
                let score =
                    left_sum * left_sum / nl as f64 + right_sum * right_sum / (n - nl) as f64;
                if best
                    .as_ref()
                    .is_none_or(|c| score > c.score + 1e-12 * c.score.abs())
                {
                    best = Some(Best {
                        score,
                        feature: f,
                        bin: b,
                    });
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::generation_rng;

    /// y = 3 when x0 > 0.5, else 1; x1 is noise.
    fn step_data(n: usize) -> (Vec<Vec<f64>>, Vec<f64>) {
        let mut rng = generation_rng(7, 0);
        let x: Vec<Vec<f64>> = (0..n)
            .map(|_| vec![rng.random::<f64>(), rng.random::<f64>()])
            .collect();
        let y = x
            .iter()
            .map(|r| if r[0] > 0.5 { 3.0 } else { 1.0 })
            .collect();
        (x, y)
    }

    #[test]
    fn learns_a_step_and_is_sure_where_the_data_agree() {
        let (x, y) = step_data(60);
        let forest =
            Forest::fit(&x, &y, &ForestParams::default(), &mut generation_rng(1, 0)).unwrap();
        let low = forest.predict(&[0.1, 0.5]);
        let high = forest.predict(&[0.9, 0.5]);
        assert!((low.mean - 1.0).abs() < 0.1, "{low:?}");
        assert!((high.mean - 3.0).abs() < 0.1, "{high:?}");
        assert!(low.std < 0.2 && high.std < 0.2, "{low:?} {high:?}");
    }

    #[test]
    fn trees_disagree_between_far_apart_samples() {
        // Two points only: bootstrap samples hold one, the other or both, so the trees
        // disagree everywhere, most between the points.
        let x = vec![vec![0.0], vec![1.0]];
        let y = vec![0.0, 10.0];
        let forest =
            Forest::fit(&x, &y, &ForestParams::default(), &mut generation_rng(1, 0)).unwrap();
        assert!(forest.predict(&[0.5]).std > 1.0);
    }

    #[test]
    fn the_same_rng_gives_the_same_forest_and_another_a_different_one() {
        let (x, y) = step_data(40);
        let p = ForestParams::default();
        let a = Forest::fit(&x, &y, &p, &mut generation_rng(3, 2)).unwrap();
        let b = Forest::fit(&x, &y, &p, &mut generation_rng(3, 2)).unwrap();
        let c = Forest::fit(&x, &y, &p, &mut generation_rng(4, 2)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(Forest::fit(&[], &[], &p, &mut generation_rng(3, 2)).is_none());
    }
}
