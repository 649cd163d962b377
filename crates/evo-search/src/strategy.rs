//! The strategies: what to evaluate next, given the space, the history and a seed.

use std::collections::BTreeSet;

use evo_core::{Genome, GenomeHash, Space};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::history::{History, Record};
use crate::insights::Insights;
use crate::params::{SearchParams, StrategyKind};

/// How a proposal was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// One of the config's seed genomes.
    Seed,
    /// Drawn uniformly among valid genomes.
    Random,
    /// One elite with one or more knobs moved.
    Mutation,
    /// Each knob taken from one of two elites.
    Crossover,
    /// The next genome in enumeration order.
    Exhaustive,
}

/// A genome to evaluate, with where it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub genome: Genome,
    /// The elites it was bred from: one for a mutation, two for a crossover, none
    /// otherwise.
    pub parents: Vec<GenomeHash>,
    pub origin: Origin,
}

/// A search strategy. `propose` is a pure function of its arguments and the strategy's
/// parameters: the same space, history, generation and seeds give the same proposals, on
/// any machine. Every proposal is valid in `space`, absent from `history`, and distinct
/// from the others; fewer than `population` come back when the space is (nearly)
/// exhausted, none when it is.
pub trait Strategy: Send + Sync {
    fn name(&self) -> &'static str;
    fn params(&self) -> &SearchParams;
    fn propose(
        &self,
        space: &Space,
        history: &History,
        generation: u32,
        seeds: &[Genome],
    ) -> Vec<Proposal>;
}

/// The strategy of a kind.
pub fn build(kind: StrategyKind, params: SearchParams) -> Box<dyn Strategy> {
    match kind {
        StrategyKind::Evolution => Box::new(Evolution::new(params)),
        StrategyKind::Random => Box::new(Random::new(params)),
        StrategyKind::Exhaustive => Box::new(Exhaustive::new(params)),
        StrategyKind::Surrogate => Box::new(crate::surrogate::Surrogate::new(params)),
    }
}

/// The RNG of one generation: ChaCha8 keyed by the run's seed, on the stream numbered by
/// the generation. Deriving it instead of carrying it from generation to generation is
/// what lets a resumed run continue exactly without storing RNG state.
pub fn generation_rng(seed: u64, generation: u32) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(u64::from(generation));
    rng
}

/// Rejection-sampling attempts per draw before a call enumerates the valid genomes.
const SAMPLE_ATTEMPTS: usize = 20_000;
/// Consecutive draws of already-taken genomes after which random filling concludes that
/// the space is nearly exhausted.
const RANDOM_MISSES: usize = 256;
/// Spaces up to this many raw genomes are enumerated to find the last unseen ones when
/// random draws keep hitting seen genomes, so Random and Evolution can exhaust them.
const ENUMERATION_LIMIT: u128 = 1 << 20;
/// Knob sets a mutation tries, and value draws per knob set, before giving up on a parent.
const MUTATION_KNOB_SETS: usize = 4;
const MUTATION_VALUE_DRAWS: usize = 4;
/// Parents a mutation slot tries before it becomes a random slot.
const MUTATION_PARENTS: usize = 4;
/// Masks a crossover tries per pair, and pairs per crossover slot before it becomes a
/// mutation slot.
const CROSSOVER_MASKS: usize = 8;
const CROSSOVER_PAIRS: usize = 8;

/// The proposals of one call under construction: checks validity and novelty against the
/// history and the proposals already made.
pub(crate) struct Batch<'a> {
    space: &'a Space,
    history: &'a History,
    taken: BTreeSet<GenomeHash>,
    pub(crate) proposals: Vec<Proposal>,
    /// Raw indices of the valid genomes, once this call has had to enumerate them.
    valid_indices: Option<Vec<u128>>,
}

impl<'a> Batch<'a> {
    pub(crate) fn new(space: &'a Space, history: &'a History) -> Self {
        Batch {
            space,
            history,
            taken: BTreeSet::new(),
            proposals: Vec::new(),
            valid_indices: None,
        }
    }

    /// A valid genome drawn uniformly, or `None` if the space has none. Like
    /// [`Space::sample`], but the choice between rejection sampling and enumeration
    /// depends only on this call's draws: `Space::sample` skips rejection once its
    /// process-wide cache is filled, so its draws depend on what ran before in the
    /// process, and a resumed run would not repeat the original.
    fn sample(&mut self, rng: &mut impl Rng) -> Option<Genome> {
        let raw = self.space.raw_size();
        if raw == 0 {
            return None;
        }
        if self.valid_indices.is_none() {
            for _ in 0..SAMPLE_ATTEMPTS {
                let g = self.space.genome_at(rng.random_range(0..raw));
                if self.space.rejection(&g).is_none() {
                    return Some(g);
                }
            }
        }
        // Valid genomes are rare: enumerate them (once per call) and pick among them.
        let space = self.space;
        let valid = self.valid_indices.get_or_insert_with(|| {
            (0..raw)
                .filter(|&i| space.rejection(&space.genome_at(i)).is_none())
                .collect()
        });
        if valid.is_empty() {
            None
        } else {
            Some(space.genome_at(valid[rng.random_range(0..valid.len())]))
        }
    }

    fn is_new(&self, hash: &GenomeHash) -> bool {
        !self.history.contains(hash) && !self.taken.contains(hash)
    }

    /// Whether `genome` could be proposed now: valid and new.
    pub(crate) fn admissible(&self, genome: &Genome) -> bool {
        self.is_new(&genome.hash()) && self.space.is_valid(genome)
    }

    /// Adds the proposal if admissible.
    pub(crate) fn push(
        &mut self,
        genome: Genome,
        parents: Vec<GenomeHash>,
        origin: Origin,
    ) -> bool {
        if !self.admissible(&genome) {
            return false;
        }
        self.taken.insert(genome.hash());
        self.proposals.push(Proposal {
            genome,
            parents,
            origin,
        });
        true
    }

    pub(crate) fn len(&self) -> usize {
        self.proposals.len()
    }

    /// The seeds not yet seen, in the order given, up to `limit` in all. Invalid seeds
    /// are skipped: the orchestrator reports them when it loads the config.
    pub(crate) fn add_seeds(&mut self, seeds: &[Genome], limit: usize) {
        for seed in seeds {
            if self.len() >= limit {
                break;
            }
            self.push(seed.clone(), Vec::new(), Origin::Seed);
        }
    }

    /// Adds up to `count` uniformly random valid new genomes.
    pub(crate) fn add_random(&mut self, count: usize, rng: &mut impl Rng) {
        let target = self.len() + count;
        let mut misses = 0;
        while self.len() < target && misses < RANDOM_MISSES {
            let Some(g) = self.sample(rng) else {
                return;
            };
            if self.push(g, Vec::new(), Origin::Random) {
                misses = 0;
            } else {
                misses += 1;
            }
        }
        if self.len() < target && self.space.raw_size() <= ENUMERATION_LIMIT {
            // Draws keep hitting taken genomes: pick among the remaining ones directly,
            // which is still uniform over the valid genomes not yet taken.
            let mut rest: Vec<Genome> = self
                .space
                .iter_valid()
                .filter(|g| self.is_new(&g.hash()))
                .collect();
            let n = (target - self.len()).min(rest.len());
            let (picked, _) = rest.partial_shuffle(rng, n);
            for g in picked.iter() {
                self.push(g.clone(), Vec::new(), Origin::Random);
            }
        }
    }
}

/// Picks an index with probability proportional to `weights` (all non-negative, not all
/// zero). A linear scan over one uniform draw, so the result depends only on the RNG
/// stream, never on a library's sampling algorithm.
fn pick_weighted(weights: &[f64], rng: &mut impl Rng) -> usize {
    let total: f64 = weights.iter().sum();
    let mut x = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    // Rounding left x just above the last weight: take the last non-zero one.
    weights.iter().rposition(|w| *w > 0.0).unwrap_or(0)
}

/// Mutation's value probabilities for each knob of the space (space order), from the
/// insights: see [`Insights::value_weights`].
pub fn mutation_weights(space: &Space, insights: &Insights, insight_weight: f64) -> Vec<Vec<f64>> {
    space
        .knobs()
        .iter()
        .map(|k| {
            insights
                .value_weights(&k.name, insight_weight)
                .unwrap_or_else(|| vec![1.0; k.values.len()])
        })
        .collect()
}

/// A child of `parent` with between 1 and `max_knob_moves` knobs moved to another of
/// their values, each new value drawn with `weights` (per knob, in space order; see
/// [`mutation_weights`]), such that `accept(child)` holds. A child that `accept`
/// refuses (invalid, or seen) is repaired by redrawing the moved knobs' values, then by
/// moving other knobs. `None` if nothing acceptable was found.
pub fn mutate(
    space: &Space,
    parent: &Genome,
    weights: &[Vec<f64>],
    max_knob_moves: usize,
    rng: &mut impl Rng,
    accept: impl Fn(&Genome) -> bool,
) -> Option<Genome> {
    let mut movable: Vec<usize> = (0..space.knobs().len())
        .filter(|&k| space.knobs()[k].values.len() > 1)
        .collect();
    if movable.is_empty() {
        return None;
    }
    let max_moves = max_knob_moves.clamp(1, movable.len());
    for _ in 0..MUTATION_KNOB_SETS {
        let moves = rng.random_range(1..=max_moves);
        let (chosen, _) = movable.partial_shuffle(rng, moves);
        let chosen = chosen.to_vec();
        for _ in 0..MUTATION_VALUE_DRAWS {
            let mut child = parent.clone();
            for &k in &chosen {
                let knob = &space.knobs()[k];
                // The parent's value is excluded: a move must change the knob.
                let mut w = weights[k].clone();
                if let Some(i) = knob
                    .values
                    .iter()
                    .position(|v| Some(v) == parent.get(&knob.name))
                {
                    w[i] = 0.0;
                }
                let pick = pick_weighted(&w, rng);
                child.set(knob.name.clone(), knob.values[pick].clone());
            }
            if accept(&child) {
                return Some(child);
            }
        }
    }
    None
}

/// A uniform-crossover child of `a` and `b` (each knob from either parent with
/// probability 1/2) that `accept` takes, trying a few masks. `None` if the parents
/// differ in fewer than two knobs (every child would be a parent) or no mask worked.
pub fn crossover(
    space: &Space,
    a: &Genome,
    b: &Genome,
    rng: &mut impl Rng,
    accept: impl Fn(&Genome) -> bool,
) -> Option<Genome> {
    let differing = space
        .knobs()
        .iter()
        .filter(|k| a.get(&k.name) != b.get(&k.name))
        .count();
    if differing < 2 {
        return None;
    }
    for _ in 0..CROSSOVER_MASKS {
        let child: Genome = space
            .knobs()
            .iter()
            .filter_map(|k| {
                let from = if rng.random_bool(0.5) { a } else { b };
                from.get(&k.name).map(|v| (k.name.clone(), v.clone()))
            })
            .collect();
        if accept(&child) {
            return Some(child);
        }
    }
    None
}

/// Elite-guided evolution (EvoEngineer spirit). Each generation proposes, in order:
///
/// 1. the seed genomes not yet seen (normally all of them, in generation 0);
/// 2. if no genome has a fitness yet (first generation, or everything failed): random
///    valid genomes up to `population`;
/// 3. otherwise children of the top-K elites: uniform crossovers of two distinct
///    elites, mutations (one elite, 1 to `max_knob_moves` knobs moved, new values biased
///    toward those common among elites by `insight_weight`), and uniformly random
///    genomes, in the proportions of the shares. A slot whose operator finds no
///    valid unseen child falls through: crossover to mutation, mutation to random.
///
/// Parents are drawn uniformly among the elites.
#[derive(Clone, Debug, PartialEq)]
pub struct Evolution {
    pub params: SearchParams,
}

impl Evolution {
    pub fn new(params: SearchParams) -> Self {
        Evolution { params }
    }
}

impl Strategy for Evolution {
    fn name(&self) -> &'static str {
        "evolution"
    }

    fn params(&self) -> &SearchParams {
        &self.params
    }

    fn propose(
        &self,
        space: &Space,
        history: &History,
        generation: u32,
        seeds: &[Genome],
    ) -> Vec<Proposal> {
        let p = &self.params;
        let mut rng = generation_rng(p.seed, generation);
        let mut batch = Batch::new(space, history);
        batch.add_seeds(seeds, p.population);
        let slots = p.population - batch.len();
        // Elites from an older config may not fit this space; they cannot breed here.
        let elites: Vec<&Record> = history
            .elites(p.elites)
            .into_iter()
            .filter(|r| space.check_genome(&r.genome).is_ok())
            .collect();
        if elites.is_empty() {
            batch.add_random(slots, &mut rng);
            return batch.proposals;
        }

        let insights = Insights::compute(space, history, p.elites);
        let weights = mutation_weights(space, &insights, p.insight_weight);
        let (mut mutations, crossovers, mut randoms) = p.split(slots);
        if elites.len() >= 2 {
            for _ in 0..crossovers {
                let child = (0..CROSSOVER_PAIRS).find_map(|_| {
                    let i = rng.random_range(0..elites.len());
                    let j = (i + rng.random_range(1..elites.len())) % elites.len();
                    let (a, b) = (elites[i], elites[j]);
                    crossover(space, &a.genome, &b.genome, &mut rng, |g| {
                        batch.admissible(g)
                    })
                    .map(|c| (c, vec![a.hash.clone(), b.hash.clone()]))
                });
                match child {
                    Some((c, parents)) => {
                        batch.push(c, parents, Origin::Crossover);
                    }
                    None => mutations += 1,
                }
            }
        } else {
            mutations += crossovers;
        }
        for _ in 0..mutations {
            let child = (0..MUTATION_PARENTS).find_map(|_| {
                let parent = elites[rng.random_range(0..elites.len())];
                mutate(
                    space,
                    &parent.genome,
                    &weights,
                    p.max_knob_moves,
                    &mut rng,
                    |g| batch.admissible(g),
                )
                .map(|c| (c, parent.hash.clone()))
            });
            match child {
                Some((c, parent)) => {
                    batch.push(c, vec![parent], Origin::Mutation);
                }
                None => randoms += 1,
            }
        }
        batch.add_random(randoms, &mut rng);
        batch.proposals
    }
}

/// Uniformly random valid unseen genomes (after the unseen seeds, like [`Evolution`]):
/// the baseline evolution must beat.
#[derive(Clone, Debug, PartialEq)]
pub struct Random {
    pub params: SearchParams,
}

impl Random {
    pub fn new(params: SearchParams) -> Self {
        Random { params }
    }
}

impl Strategy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn params(&self) -> &SearchParams {
        &self.params
    }

    fn propose(
        &self,
        space: &Space,
        history: &History,
        generation: u32,
        seeds: &[Genome],
    ) -> Vec<Proposal> {
        let mut rng = generation_rng(self.params.seed, generation);
        let mut batch = Batch::new(space, history);
        batch.add_seeds(seeds, self.params.population);
        batch.add_random(self.params.population - batch.len(), &mut rng);
        batch.proposals
    }
}

/// Every valid genome once, in [`Space::iter_valid`] order, `population` per generation,
/// skipping those already seen; ignores seeds (it reaches them anyway) and the seed.
/// Each call scans the space from the start, so it suits spaces small enough to
/// enumerate, which are the only ones it can finish.
#[derive(Clone, Debug, PartialEq)]
pub struct Exhaustive {
    pub params: SearchParams,
}

impl Exhaustive {
    pub fn new(params: SearchParams) -> Self {
        Exhaustive { params }
    }
}

impl Strategy for Exhaustive {
    fn name(&self) -> &'static str {
        "exhaustive"
    }

    fn params(&self) -> &SearchParams {
        &self.params
    }

    fn propose(
        &self,
        space: &Space,
        history: &History,
        _generation: u32,
        _seeds: &[Genome],
    ) -> Vec<Proposal> {
        space
            .iter_valid()
            .filter(|g| !history.contains(&g.hash()))
            .take(self.params.population)
            .map(|genome| Proposal {
                genome,
                parents: Vec::new(),
                origin: Origin::Exhaustive,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_picks_follow_the_weights_and_skip_zeros() {
        let mut rng = generation_rng(1, 0);
        let mut counts = [0usize; 4];
        for _ in 0..40_000 {
            counts[pick_weighted(&[1.0, 0.0, 3.0, 0.0], &mut rng)] += 1;
        }
        assert_eq!((counts[1], counts[3]), (0, 0));
        let ratio = counts[2] as f64 / counts[0] as f64;
        assert!((2.8..3.2).contains(&ratio), "{counts:?}");
    }

    #[test]
    fn generation_rngs_differ_by_seed_and_generation_and_repeat() {
        let draw = |s, g| generation_rng(s, g).random::<u64>();
        assert_eq!(draw(5, 3), draw(5, 3));
        assert_ne!(draw(5, 3), draw(5, 4));
        assert_ne!(draw(5, 3), draw(6, 3));
    }

    #[test]
    fn origin_serializes_in_snake_case() {
        let json = serde_json::to_string(&[Origin::Seed, Origin::Exhaustive]).unwrap();
        assert_eq!(json, r#"["seed","exhaustive"]"#);
    }
}
