//! evo-search: the strategies that pick which genomes to evaluate next (elite-guided
//! evolution, random, exhaustive), their mutation and crossover operators and the
//! per-knob statistics of elites. Pure functions of the space, the results so far and a
//! seeded RNG: no I/O, no GPU.
//!
//! Status: only the random strategy's building block exists yet ([`random_batch`]);
//! evolution and the strategy interface arrive with the search issue.

use std::collections::BTreeSet;

use evo_core::{Genome, GenomeHash, Space};
use rand::Rng;

/// Up to `count` distinct valid genomes drawn uniformly, skipping those in `seen`.
/// Stops early when the space seems exhausted (many draws in a row were all seen).
pub fn random_batch(
    space: &Space,
    count: usize,
    seen: &BTreeSet<GenomeHash>,
    rng: &mut impl Rng,
) -> Vec<Genome> {
    let mut out = Vec::new();
    let mut taken: BTreeSet<GenomeHash> = BTreeSet::new();
    let mut misses = 0;
    while out.len() < count && misses < 1000 {
        let Some(g) = space.sample(rng) else { break };
        let h = g.hash();
        if seen.contains(&h) || !taken.insert(h) {
            misses += 1;
            continue;
        }
        misses = 0;
        out.push(g);
    }
    out
}
