//! What each strategy proposes: exhaustive coverage, the shape of mutation and
//! crossover children, seeds and fallbacks, and evolution beating random search.

use std::collections::BTreeSet;

use evo_core::{Genome, GenomeHash, Space};
use evo_search::landscape::{evaluations_to_reach, simulate_until, synthetic, SYNTHETIC_OPTIMUM};
use evo_search::{
    build, Evolution, Exhaustive, History, Origin, Outcome, SearchParams, Strategy, StrategyKind,
};

fn knobs_differing(space: &Space, a: &Genome, b: &Genome) -> usize {
    space
        .knobs()
        .iter()
        .filter(|k| a.get(&k.name) != b.get(&k.name))
        .count()
}

#[test]
fn exhaustive_covers_every_valid_genome_once_then_stops() {
    let (space, _) = synthetic();
    let valid: Vec<Genome> = space.iter_valid().collect();
    let strategy = Exhaustive::new(SearchParams {
        population: 700,
        ..SearchParams::default()
    });
    let mut history = History::new();
    let mut order = Vec::new();
    for generation in 0.. {
        let proposals = strategy.propose(&space, &history, generation, &[]);
        if proposals.is_empty() {
            break;
        }
        assert!(proposals.iter().all(|p| p.origin == Origin::Exhaustive));
        history.add_proposals(generation, proposals.iter().map(|p| &p.genome));
        order.extend(proposals.into_iter().map(|p| p.genome));
    }
    assert_eq!(
        order, valid,
        "every valid genome once, in enumeration order"
    );
    assert!(strategy.propose(&space, &history, 99, &[]).is_empty());
}

/// Runs Evolution a few generations on the synthetic landscape and returns every
/// proposal with the history it was made from.
fn evolve(params: SearchParams, generations: u32) -> (Space, Vec<evo_search::Proposal>, History) {
    let (space, landscape) = synthetic();
    let strategy = Evolution::new(params);
    let mut history = History::new();
    let mut bred = Vec::new();
    for generation in 0..generations {
        let proposals = strategy.propose(&space, &history, generation, &[]);
        for p in &proposals {
            // Parents are elites of the history the proposal was made from.
            for parent in &p.parents {
                let r = history.get(parent).expect("parent in history");
                assert!(r.fitness().is_some(), "parent {parent} has no fitness");
            }
        }
        history.add_proposals(generation, proposals.iter().map(|p| &p.genome));
        for p in &proposals {
            history.set_outcome(&p.genome.hash(), landscape.outcome(&p.genome));
        }
        bred.extend(proposals);
    }
    (space, bred, history)
}

#[test]
fn mutations_move_at_most_max_knob_moves_knobs() {
    for max_knob_moves in [1, 2, 3] {
        let (space, proposals, history) = evolve(
            SearchParams {
                max_knob_moves,
                seed: 7,
                ..SearchParams::default()
            },
            6,
        );
        let mut moved = BTreeSet::new();
        for p in proposals.iter().filter(|p| p.origin == Origin::Mutation) {
            assert_eq!(p.parents.len(), 1);
            let parent = &history.get(&p.parents[0]).unwrap().genome;
            let d = knobs_differing(&space, parent, &p.genome);
            assert!((1..=max_knob_moves).contains(&d), "{d} knobs moved");
            moved.insert(d);
        }
        assert_eq!(moved.len(), max_knob_moves, "every move count occurs");
    }
}

#[test]
fn crossover_children_take_each_knob_from_a_parent() {
    let (space, proposals, history) = evolve(
        SearchParams {
            seed: 3,
            ..SearchParams::default()
        },
        6,
    );
    let children: Vec<_> = proposals
        .iter()
        .filter(|p| p.origin == Origin::Crossover)
        .collect();
    assert!(children.len() > 20, "{} crossovers", children.len());
    for child in children {
        let [a, b] = child.parents.as_slice() else {
            panic!("crossover with {} parents", child.parents.len());
        };
        assert_ne!(a, b);
        let (a, b) = (
            &history.get(a).unwrap().genome,
            &history.get(b).unwrap().genome,
        );
        for k in space.knobs() {
            let v = child.genome.get(&k.name);
            assert!(v == a.get(&k.name) || v == b.get(&k.name), "{}", k.name);
        }
        assert!(&child.genome != a && &child.genome != b);
    }
}

#[test]
fn seeds_come_first_and_failed_runs_fall_back_to_random() {
    let (space, _) = synthetic();
    let good = Genome::parse(SYNTHETIC_OPTIMUM).unwrap();
    // Violates the rows-per-warp constraint.
    let invalid =
        Genome::parse("BLOCK_M=16,BLOCK_N=64,NUM_WARPS=4,STAGES=3,SWIZZLE=xor,UNROLL=2").unwrap();
    let seen =
        Genome::parse("BLOCK_M=64,BLOCK_N=64,NUM_WARPS=4,STAGES=3,SWIZZLE=xor,UNROLL=2").unwrap();
    let mut history = History::new();
    history.insert(seen.clone(), 0, Outcome::Failed);
    let strategy = Evolution::new(SearchParams {
        population: 8,
        ..SearchParams::default()
    });
    let seeds = [invalid, seen, good.clone(), good.clone()];
    let proposals = strategy.propose(&space, &history, 0, &seeds);
    assert_eq!(proposals.len(), 8);
    assert_eq!(proposals[0].genome, good);
    assert_eq!(proposals[0].origin, Origin::Seed);
    // Nothing has a fitness: the rest is random.
    assert!(proposals[1..].iter().all(|p| p.origin == Origin::Random));

    // Everything failed: still random, never stuck.
    history.add_proposals(0, proposals.iter().map(|p| &p.genome));
    for p in &proposals {
        history.set_outcome(&p.genome.hash(), Outcome::Failed);
    }
    let next = strategy.propose(&space, &history, 1, &seeds);
    assert_eq!(next.len(), 8);
    assert!(next.iter().all(|p| p.origin == Origin::Random));

    // One success: breeding starts (a single elite cannot cross over).
    let first = next[0].genome.clone();
    history.add_proposals(1, next.iter().map(|p| &p.genome));
    history.set_outcome(&first.hash(), Outcome::Evaluated { fitness: 0.7 });
    let bred = strategy.propose(&space, &history, 2, &seeds);
    assert!(bred.iter().any(|p| p.origin == Origin::Mutation));
    assert!(bred.iter().all(|p| p.origin != Origin::Crossover));
    let parent: Vec<GenomeHash> = vec![first.hash()];
    assert!(bred
        .iter()
        .filter(|p| p.origin == Origin::Mutation)
        .all(|p| p.parents == parent));
}

/// The median of a sample (mean of the two middle values for an even count).
fn median(mut v: Vec<usize>) -> f64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    }
}

/// On the synthetic landscape (3,240 valid genomes, one smooth optimum), Evolution with
/// default parameters needs far fewer evaluations than Random to get within 2% of the
/// optimum. Measured over seeds 0..20 (the runs are deterministic, so debug and release
/// agree): Evolution median 100 (range 50-134), Random median 722 (range 61-3024), a
/// factor 7.2. The assertion asks for a factor 3, so parameter tuning does not break it
/// while an evolution no better than random does.
#[test]
fn evolution_beats_random_on_a_smooth_landscape() {
    let (space, landscape) = synthetic();
    let default_population = SearchParams::default().population;
    let needed = |kind| needed_over_seeds(kind, &space, &landscape, default_population);
    let evolution = needed(StrategyKind::Evolution);
    let random = needed(StrategyKind::Random);
    let (e, r) = (median(evolution.clone()), median(random.clone()));
    println!("evaluations to within 2% of the optimum over 20 seeds:");
    println!("  evolution median {e}: {evolution:?}");
    println!("  random    median {r}: {random:?}");
    assert!(e * 3.0 < r, "evolution median {e} vs random {r}");
}

/// Evaluations to within 2% of the optimum of `landscape` for seeds 0..20 (a run that
/// never gets there counts as the whole space plus one).
fn needed_over_seeds(
    kind: StrategyKind,
    space: &Space,
    landscape: &evo_search::landscape::Landscape,
    population: usize,
) -> Vec<usize> {
    let target = 0.98 * landscape.optimum().unwrap();
    let budget = landscape.len();
    (0..20u64)
        .map(|seed| {
            let strategy = build(
                kind,
                SearchParams {
                    seed,
                    population,
                    ..SearchParams::default()
                },
            );
            let trace = simulate_until(strategy.as_ref(), space, landscape, budget, target);
            evaluations_to_reach(&trace, target).unwrap_or(budget + 1)
        })
        .collect()
}

/// The surrogate (the default strategy) needs fewer evaluations than evolution on the
/// synthetic landscape, with its knobs declared ordinal as a family would. Measured
/// over seeds 0..20 at population 16: see the printed medians; the assertion asks only
/// that the surrogate's median be lower and that every run get there.
#[test]
fn surrogate_beats_evolution_on_the_synthetic_landscape() {
    let (space, landscape) = synthetic();
    let space = space
        .with_ordinal(["BLOCK_M", "BLOCK_N", "NUM_WARPS", "STAGES", "UNROLL"].map(String::from))
        .unwrap();
    let surrogate = needed_over_seeds(StrategyKind::Surrogate, &space, &landscape, 16);
    let evolution = needed_over_seeds(StrategyKind::Evolution, &space, &landscape, 16);
    let (s, e) = (median(surrogate.clone()), median(evolution.clone()));
    println!("surrogate median {s}: {surrogate:?}");
    println!("evolution median {e}: {evolution:?}");
    assert!(
        surrogate.iter().all(|n| *n <= landscape.len()),
        "{surrogate:?}"
    );
    assert!(s < e, "surrogate median {s} vs evolution {e}");
}

/// Reversing every value list changes the draws, not the method: the surrogate's median
/// stays within a third of the unreversed one on a random landscape over the same space.
#[test]
fn surrogate_does_not_care_about_value_order() {
    let (space, _) = synthetic();
    let space = space
        .with_ordinal(["BLOCK_M", "BLOCK_N", "NUM_WARPS", "STAGES", "UNROLL"].map(String::from))
        .unwrap();
    let landscape = evo_search::landscape::random_landscape(&space, 3);
    let reversed = space.with_reversed_values();
    let forward = median(needed_over_seeds(
        StrategyKind::Surrogate,
        &space,
        &landscape,
        16,
    ));
    let backward = median(needed_over_seeds(
        StrategyKind::Surrogate,
        &reversed,
        &landscape,
        16,
    ));
    println!("surrogate median {forward}, value lists reversed {backward}");
    assert!(
        (forward - backward).abs() <= forward.max(backward) / 3.0,
        "median {forward} vs reversed {backward}"
    );
}
