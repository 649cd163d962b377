//! Surrogate-assisted evolution: children bred from the elites (and some random genomes)
//! are ranked by a cost model fitted to the run's own measurements, and only the most
//! promising are evaluated.
//!
//! Each generation, from the [`History`] alone:
//!
//! 1. the model: a random forest ([`crate::forest`]) of ln(fitness) over knob features
//!    ([`Encoder`]: an ordinal knob is its position in its list, so a tree can split
//!    "BLOCK_N ≥ 64"; a categorical knob one indicator per value). A failed genome counts
//!    as the worst measured, so the model steers away from regions that fail.
//! 2. the candidates: every one-knob neighbour of each elite, mutations and uniform
//!    crossovers of elites (evolution's operators), and uniformly random genomes, all
//!    valid and unseen.
//! 3. the picks, one at a time: the candidate with the highest upper confidence bound
//!    (trees' mean + [`KAPPA`] × their spread); then the pick joins the training data
//!    with its predicted value as if measured and the forest is refitted ("kriging
//!    believer"), so the next pick goes where the model is still unsure instead of next
//!    to the first. Picks come out best first, the order they are evaluated in.
//!
//! Generation 0, or any generation before a genome has a fitness, is seeds plus random
//! genomes. The RNG is [`generation_rng`]`(seed, g)` and the history is read in hash
//! order, so proposals depend only on the seed and the stored results (resume and
//! several hosts work as for [`crate::Evolution`]).

use std::collections::BTreeSet;

use evo_core::{Genome, GenomeHash, Space};
use rand::Rng;

use crate::forest::{Forest, ForestParams};
use crate::history::{History, Outcome, Record};
use crate::insights::Insights;
use crate::params::SearchParams;
use crate::strategy::{
    crossover, generation_rng, mutate, mutation_weights, Batch, Origin, Proposal, Strategy,
};

/// Weight of the trees' spread in the upper confidence bound (mean + KAPPA × std of
/// ln fitness). Measured on the recorded H200 landscape: 0.5 and 1 did alike, 2 and 3
/// explored too much (see docs/search_quality.md).
pub const KAPPA: f64 = 1.0;
/// Bred children (one mutation and one crossover each) drawn per slot into the pool.
const CHILDREN_PER_SLOT: usize = 20;
/// Random genomes per slot in the pool: the model's way to look far from the elites.
const RANDOM_PER_SLOT: usize = 12;

/// The forest the strategy fits: 32 trees, half the features per split.
pub fn forest_params() -> ForestParams {
    ForestParams {
        feature_fraction: 0.5,
        ..ForestParams::default()
    }
}

/// Surrogate-assisted evolution; see the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct Surrogate {
    pub params: SearchParams,
}

impl Surrogate {
    pub fn new(params: SearchParams) -> Self {
        Surrogate { params }
    }
}

/// Turns genomes of a space into feature rows for the model: an ordinal knob is its
/// position in its value list; a categorical knob with two values one 0/1 feature, with
/// more one indicator per value (so no order is invented between them).
pub struct Encoder<'a> {
    space: &'a Space,
}

impl<'a> Encoder<'a> {
    pub fn new(space: &'a Space) -> Self {
        Encoder { space }
    }

    /// The row of a genome that [`Space::check_genome`] accepts.
    pub fn encode(&self, genome: &Genome) -> Vec<f64> {
        let mut row = Vec::new();
        for knob in self.space.knobs() {
            let pos = knob
                .values
                .iter()
                .position(|v| Some(v) == genome.get(&knob.name))
                .unwrap_or(0);
            let n = knob.values.len();
            if self.space.is_ordinal(&knob.name) || n == 2 {
                row.push(pos as f64);
            } else if n > 2 {
                row.extend((0..n).map(|i| f64::from(u8::from(i == pos))));
            }
        }
        row
    }
}

impl Strategy for Surrogate {
    fn name(&self) -> &'static str {
        "surrogate"
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

        // Training data: every finished genome of this space, in hash order.
        let finished: Vec<(&Genome, Option<f64>)> = history
            .records()
            .filter(|r| r.outcome != Outcome::Pending && space.check_genome(&r.genome).is_ok())
            .map(|r| (&r.genome, r.fitness().map(f64::ln)))
            .collect();
        let measured: Vec<f64> = finished.iter().filter_map(|(_, y)| *y).collect();
        if measured.is_empty() {
            batch.add_random(slots, &mut rng);
            return batch.proposals;
        }
        let worst = measured.iter().copied().fold(f64::INFINITY, f64::min);
        let encoder = Encoder::new(space);
        let mut x: Vec<Vec<f64>> = finished.iter().map(|(g, _)| encoder.encode(g)).collect();
        let mut y: Vec<f64> = finished.iter().map(|(_, v)| v.unwrap_or(worst)).collect();

        let pool = candidate_pool(space, history, p, slots, &mut rng);
        let rows: Vec<Vec<f64>> = pool.iter().map(|c| encoder.encode(&c.genome)).collect();
        let mut taken = vec![false; pool.len()];
        let params = forest_params();
        for _ in 0..slots.min(pool.len()) {
            let Some(forest) = Forest::fit(&x, &y, &params, &mut rng) else {
                break;
            };
            // The untaken candidate of highest bound; ties to the earlier one.
            let mut pick: Option<(usize, f64, f64)> = None;
            for (i, row) in rows.iter().enumerate() {
                if taken[i] {
                    continue;
                }
                let q = forest.predict(row);
                let bound = q.mean + KAPPA * q.std;
                if pick.is_none_or(|(_, b, _)| bound > b) {
                    pick = Some((i, bound, q.mean));
                }
            }
            let Some((i, _, mean)) = pick else { break };
            taken[i] = true;
            let c = &pool[i];
            batch.push(c.genome.clone(), c.parents.clone(), c.origin);
            x.push(rows[i].clone());
            y.push(mean);
        }
        let rest = p.population - batch.len();
        batch.add_random(rest, &mut rng);
        batch.proposals
    }
}

/// A genome the model may pick, with how it was made.
struct Candidate {
    genome: Genome,
    parents: Vec<GenomeHash>,
    origin: Origin,
}

/// Valid, unseen, distinct candidates for `slots` picks, in a deterministic order.
fn candidate_pool(
    space: &Space,
    history: &History,
    p: &SearchParams,
    slots: usize,
    rng: &mut impl Rng,
) -> Vec<Candidate> {
    let elites: Vec<&Record> = history
        .elites(p.elites)
        .into_iter()
        .filter(|r| space.check_genome(&r.genome).is_ok())
        .collect();
    let mut pool = Vec::new();
    let mut taken: BTreeSet<GenomeHash> = BTreeSet::new();
    let mut add = |genome: Genome, parents: Vec<GenomeHash>, origin: Origin| {
        let h = genome.hash();
        if !history.contains(&h) && space.is_valid(&genome) && taken.insert(h) {
            pool.push(Candidate {
                genome,
                parents,
                origin,
            });
        }
    };
    for e in &elites {
        for knob in space.knobs() {
            for v in knob
                .values
                .iter()
                .filter(|v| Some(*v) != e.genome.get(&knob.name))
            {
                let mut g = e.genome.clone();
                g.set(knob.name.clone(), v.clone());
                add(g, vec![e.hash.clone()], Origin::Mutation);
            }
        }
    }
    let insights = Insights::compute(space, history, p.elites);
    let weights = mutation_weights(space, &insights, p.insight_weight);
    let pick = |rng: &mut dyn rand::RngCore| elites[rng.random_range(0..elites.len())];
    for _ in 0..slots * CHILDREN_PER_SLOT {
        let e = pick(rng);
        if let Some(c) = mutate(
            space,
            &e.genome,
            &weights,
            p.max_knob_moves.max(2),
            rng,
            |_| true,
        ) {
            add(c, vec![e.hash.clone()], Origin::Mutation);
        }
        let (a, b) = (pick(rng), pick(rng));
        if a.hash != b.hash {
            if let Some(c) = crossover(space, &a.genome, &b.genome, rng, |_| true) {
                add(c, vec![a.hash.clone(), b.hash.clone()], Origin::Crossover);
            }
        }
    }
    let mut random = Batch::new(space, history);
    random.add_random(slots * RANDOM_PER_SLOT, rng);
    for prop in random.proposals {
        add(prop.genome, Vec::new(), Origin::Random);
    }
    pool
}
