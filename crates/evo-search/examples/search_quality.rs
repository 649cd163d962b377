//! Search quality on a synthetic landscape: how many evaluations Evolution and Random
//! need to get within 2% of the exhaustive optimum, over 20 seeds.
//!
//! The landscape is [`evo_search::landscape::synthetic`]: a kernel-family-like space of
//! 3,240 valid genomes (6 knobs, shared-memory and rows-per-warp constraints) with a
//! smooth fitness `2 / (1 + q)`, `q` a positive-definite quadratic form in the knobs'
//! list positions around one optimum, plus failing regions. Two genomes lie within 2%
//! of the optimum. Real landscapes, measured on a GPU, replace it later.
//!
//! Run: `cargo run --release -p evo-search --example search_quality`

use evo_search::landscape::{evaluations_to_reach, quantile, simulate_until, synthetic};
use evo_search::{build, SearchParams, StrategyKind};

const SEEDS: u64 = 20;

fn main() {
    let (space, landscape) = synthetic();
    let optimum = landscape
        .optimum()
        .expect("the landscape has evaluated genomes");
    let target = 0.98 * optimum;
    let budget = landscape.len();
    println!(
        "synthetic landscape: {} valid genomes, optimum {optimum:.3}, target {target:.3} \
         (within 2%), budget {budget} evaluations, {SEEDS} seeds, default parameters",
        landscape.len()
    );
    println!(
        "{:<10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8}",
        "strategy", "min", "p25", "median", "p75", "max", "reached"
    );
    for kind in [StrategyKind::Evolution, StrategyKind::Random] {
        let mut needed: Vec<usize> = Vec::new();
        let mut missed = 0;
        for seed in 0..SEEDS {
            let strategy = build(
                kind,
                SearchParams {
                    seed,
                    ..SearchParams::default()
                },
            );
            let trace = simulate_until(strategy.as_ref(), &space, &landscape, budget, target);
            match evaluations_to_reach(&trace, target) {
                Some(n) => needed.push(n),
                None => missed += 1,
            }
        }
        needed.sort_unstable();
        let q = |p: f64| quantile(&needed, p).map_or("-".into(), |v| format!("{v:.1}"));
        println!(
            "{:<10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>5}/{SEEDS}",
            kind.name(),
            q(0.0),
            q(0.25),
            q(0.5),
            q(0.75),
            q(1.0),
            SEEDS as usize - missed,
        );
    }
}
