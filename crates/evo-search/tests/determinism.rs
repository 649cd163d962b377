//! Proposals are a function of (space, history, generation, seeds, parameters): the same
//! seed reproduces a run, a run resumed from stored records continues exactly, and a
//! different seed explores differently.

use evo_core::{Genome, Space};
use evo_search::landscape::{synthetic, Landscape};
use evo_search::{
    build, Evolution, History, Outcome, Proposal, SearchParams, Strategy, StrategyKind,
};

/// What the orchestrator would store per candidate.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    genome: Genome,
    generation: u32,
    outcome: Outcome,
}

/// Runs generations `from..to`, continuing `history`; returns each generation's
/// proposals and the rows it stored.
fn run(
    strategy: &dyn Strategy,
    space: &Space,
    landscape: &Landscape,
    history: &mut History,
    generations: std::ops::Range<u32>,
    seeds: &[Genome],
) -> (Vec<Vec<Proposal>>, Vec<Row>) {
    let mut all = Vec::new();
    let mut rows = Vec::new();
    for generation in generations {
        let proposals = strategy.propose(space, history, generation, seeds);
        history.add_proposals(generation, proposals.iter().map(|p| &p.genome));
        for p in &proposals {
            let outcome = landscape.outcome(&p.genome);
            history.set_outcome(&p.genome.hash(), outcome);
            rows.push(Row {
                genome: p.genome.clone(),
                generation,
                outcome,
            });
        }
        all.push(proposals);
    }
    (all, rows)
}

fn params(seed: u64) -> SearchParams {
    SearchParams {
        population: 16,
        seed,
        ..SearchParams::default()
    }
}

fn seeds() -> Vec<Genome> {
    vec![Genome::parse("BLOCK_M=64,BLOCK_N=64,NUM_WARPS=2,STAGES=2,SWIZZLE=none,UNROLL=1").unwrap()]
}

#[test]
fn same_seed_same_run_and_resume_continues_exactly() {
    let (space, landscape) = synthetic();
    for kind in [
        StrategyKind::Surrogate,
        StrategyKind::Evolution,
        StrategyKind::Random,
    ] {
        let strategy = build(kind, params(42));
        let (first, rows) = run(
            strategy.as_ref(),
            &space,
            &landscape,
            &mut History::new(),
            0..10,
            &seeds(),
        );
        let (second, _) = run(
            strategy.as_ref(),
            &space,
            &landscape,
            &mut History::new(),
            0..10,
            &seeds(),
        );
        assert_eq!(first, second, "{kind}: same seed, same proposals");
        assert!(first.iter().all(|g| g.len() == 16));
        if kind != StrategyKind::Random {
            // Breeding really happened, so the check covers more than random draws.
            let bred = first[5..]
                .iter()
                .flatten()
                .filter(|p| !p.parents.is_empty())
                .count();
            assert!(bred > 40, "only {bred} bred proposals");
        }

        // Resume: a fresh process rebuilds the history from the stored rows of
        // generations 0..5, in whatever order the database returns them, and goes on
        // with a fresh strategy object.
        let mut rebuilt = History::new();
        for row in rows.iter().filter(|r| r.generation < 5).rev() {
            rebuilt.insert(row.genome.clone(), row.generation, row.outcome);
        }
        let resumed_strategy = build(kind, params(42));
        let (resumed, _) = run(
            resumed_strategy.as_ref(),
            &space,
            &landscape,
            &mut rebuilt,
            5..10,
            &seeds(),
        );
        assert_eq!(resumed, first[5..], "{kind}: resumed run diverged");
    }
}

#[test]
fn a_different_seed_gives_different_proposals() {
    let (space, landscape) = synthetic();
    let genomes = |seed| {
        let (gens, _) = run(
            &Evolution::new(params(seed)),
            &space,
            &landscape,
            &mut History::new(),
            0..3,
            &[],
        );
        gens.into_iter()
            .map(|g| g.into_iter().map(|p| p.genome).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let (a, b) = (genomes(1), genomes(2));
    for generation in 0..3 {
        assert_ne!(a[generation], b[generation], "generation {generation}");
    }
}

/// In a space where valid genomes are rare, `Space::sample` switches to a process-wide
/// cache after its first enumeration, which changes which genomes later draws give. The
/// strategies must not inherit that: a process that sampled the space before (as `evo
/// space` does) and a fresh one must propose the same genomes.
#[test]
fn rare_valid_spaces_propose_the_same_whatever_ran_before() {
    use evo_core::{Expr, Knob, Value};
    use rand::SeedableRng;
    let make = || {
        Space::new(
            (0..5)
                .map(|i| Knob {
                    name: format!("K{i}"),
                    values: (0..10).map(Value::Int).collect(),
                })
                .collect(),
            vec![],
            // 6 valid genomes in 100,000.
            vec![(
                "rare".into(),
                Expr::parse("K0 + K1 + K2 + K3 + K4 >= 44").unwrap(),
            )],
            vec![],
        )
        .unwrap()
    };
    let fresh = make();
    let warmed = make();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    for _ in 0..3 {
        warmed.sample(&mut rng).unwrap();
    }
    for seed in 0..3 {
        let strategy = build(
            StrategyKind::Random,
            SearchParams {
                population: 2,
                seed,
                ..SearchParams::default()
            },
        );
        let a = strategy.propose(&fresh, &History::new(), 0, &[]);
        let b = strategy.propose(&warmed, &History::new(), 0, &[]);
        assert_eq!(a, b, "seed {seed}");
        assert_eq!(a.len(), 2);
    }
}
