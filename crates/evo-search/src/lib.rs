//! evo-search: decides which genomes a run evaluates next.
//!
//! Four strategies share one interface, [`Strategy`]: [`Surrogate`] (the default:
//! surrogate-assisted evolution, a random-forest cost model fitted to the run's own
//! measurements ranks children bred from the elites), elite-guided [`Evolution`]
//! (mutation and crossover of the top-K genomes, biased by per-knob [`Insights`]), and
//! [`Random`] and [`Exhaustive`] for comparison. [`landscape`] runs a strategy against
//! known fitness values, to measure search quality without a GPU.
//!
//! Everything here is a pure function of the space, the [`History`] of results, the
//! parameters and a seed: no I/O, no GPU, no database, no clock, no state kept between
//! calls. Generation `g` draws from an RNG derived from `(seed, g)` alone
//! ([`generation_rng`]), and a history is keyed by genome hash, so only its contents
//! matter, not the order rows were added in. A run killed and resumed from its database
//! therefore proposes exactly what the uninterrupted run would have.
//!
//! # How the orchestrator drives it
//!
//! For `g = 0, 1, ...`: call [`Strategy::propose`] with the history of generations
//! `< g` complete (every outcome recorded) and the config's seed genomes; store all the
//! proposals at once (they enter the history as [`Outcome::Pending`]); evaluate them;
//! record each outcome. An empty answer means the space is exhausted. On resume,
//! rebuild the history with [`History::insert`] from every stored candidate; if
//! generation `g`'s proposals are already stored, finish evaluating those instead of
//! proposing `g` again (a second call would see them as seen and propose others).
//! Regressed candidates are recorded as `Evaluated` with their fitness (see
//! [`Outcome`]). Determinism holds for the same space, parameters, seeds and
//! `Cargo.lock` (a `rand` upgrade may change the draws, never their validity).

pub mod forest;
pub mod history;
pub mod insights;
pub mod landscape;
pub mod params;
pub mod strategy;
pub mod surrogate;

pub use history::{History, Outcome, Record};
pub use insights::{Insights, KnobInsight, ValueInsight};
pub use params::{SearchParams, StrategyKind};
pub use strategy::{
    build, crossover, generation_rng, mutate, mutation_weights, Evolution, Exhaustive, Origin,
    Proposal, Random, Strategy,
};
pub use surrogate::Surrogate;

use std::collections::BTreeSet;

use evo_core::{Genome, GenomeHash, Space};
use rand::Rng;

/// Up to `count` distinct valid genomes drawn uniformly, skipping those in `seen`.
/// Stops early when the space seems exhausted (many draws in a row were all seen).
///
/// For one-off samples (`evo space`). It draws through [`Space::sample`], whose results
/// depend on what sampled the space before in the process; runs use the strategies,
/// whose draws do not.
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
