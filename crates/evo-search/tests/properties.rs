//! Invariants of every strategy over randomly generated small spaces and parameters:
//! proposals are valid, never seen before, never repeated within a call, and a short
//! answer means the space is exhausted.

use std::collections::BTreeSet;

use evo_core::{Expr, Genome, Knob, Space, Value, Vars};
use evo_search::{build, History, Origin, Outcome, SearchParams, StrategyKind};
use proptest::prelude::*;

/// A random space: 1-4 integer knobs with 1-5 distinct values, one string knob, and a
/// random linear constraint that keeps some but usually not all genomes (the same
/// generator as evo-core's property tests).
fn arb_space() -> impl Strategy<Value = Space> {
    (
        prop::collection::vec(prop::collection::btree_set(1i64..200, 1..5), 1..5),
        prop::collection::btree_set("[a-z][a-z0-9_]{0,5}", 1..4),
        0i64..400,
        0i64..3,
    )
        .prop_filter_map(
            "string values must not look like other types",
            |(ints, strs, limit, coef)| {
                if strs.iter().any(|s| s == "true" || s == "false") {
                    return None;
                }
                let mut knobs: Vec<Knob> = ints
                    .into_iter()
                    .enumerate()
                    .map(|(i, vals)| Knob {
                        name: format!("K{i}"),
                        values: vals.into_iter().map(Value::Int).collect(),
                    })
                    .collect();
                let n = knobs.len();
                knobs.push(Knob {
                    name: "MODE".into(),
                    values: strs.iter().map(|s| Value::Str(s.clone())).collect(),
                });
                let sum = (0..n)
                    .map(|i| format!("K{i}"))
                    .collect::<Vec<_>>()
                    .join(" + ");
                let first = strs.iter().next().unwrap().clone();
                let constraints = vec![
                    (
                        "sum".to_string(),
                        Expr::parse(&format!("{sum} <= LIMIT")).unwrap(),
                    ),
                    (
                        "mode".to_string(),
                        Expr::parse(&format!("MODE != \"{first}\" || K0 * {coef} <= LIMIT"))
                            .unwrap(),
                    ),
                ];
                let mut ctx = Vars::new();
                ctx.insert("LIMIT".into(), Value::Int(limit));
                Space::new(knobs, vec![], constraints, vec![ctx]).ok()
            },
        )
}

fn arb_params() -> impl Strategy<Value = SearchParams> {
    (
        1usize..12,
        1usize..5,
        0.0f64..1.0,
        0.0f64..1.0,
        0.0f64..0.5,
        1usize..4,
        0.0f64..1.0,
        any::<u64>(),
    )
        .prop_map(
            |(population, elites, m, c, e, moves, insight, seed)| SearchParams {
                population,
                elites,
                mutation_share: m,
                crossover_share: c,
                exploration_share: e,
                max_knob_moves: moves,
                insight_weight: insight,
                seed,
            },
        )
}

/// A deterministic made-up outcome: one genome in five fails, the rest get a fitness
/// from their hash.
fn outcome(g: &Genome) -> Outcome {
    let x = u64::from_str_radix(&g.hash().0[..8], 16).unwrap();
    match x % 5 {
        0 => Outcome::Failed,
        _ => Outcome::Evaluated {
            fitness: 0.5 + (x % 1000) as f64 / 1000.0,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn proposals_are_valid_new_and_distinct(
        space in arb_space(),
        params in arb_params(),
        kind in prop::sample::select(StrategyKind::ALL.to_vec()),
        seed_indices in prop::collection::vec(any::<u64>(), 0..4),
    ) {
        let valid: BTreeSet<Genome> = space.iter_valid().collect();
        // Seeds: arbitrary raw genomes (some invalid), one repeated.
        let mut seeds: Vec<Genome> = seed_indices
            .iter()
            .map(|i| space.genome_at(*i as u128 % space.raw_size()))
            .collect();
        if let Some(first) = seeds.first().cloned() {
            seeds.push(first);
        }
        let strategy = build(kind, params.clone());
        let mut history = History::new();
        for generation in 0..12u32 {
            let proposals = strategy.propose(&space, &history, generation, &seeds);
            prop_assert!(proposals.len() <= params.population);
            let mut this_call = BTreeSet::new();
            for p in &proposals {
                prop_assert!(space.check_genome(&p.genome).is_ok());
                prop_assert_eq!(space.rejection(&p.genome), None);
                prop_assert!(!history.contains(&p.genome.hash()), "seen: {}", p.genome);
                prop_assert!(this_call.insert(p.genome.hash()), "twice: {}", p.genome);
                for parent in &p.parents {
                    prop_assert!(history.get(parent).and_then(|r| r.fitness()).is_some());
                }
                let parents = match p.origin {
                    Origin::Mutation => 1,
                    Origin::Crossover => 2,
                    _ => 0,
                };
                prop_assert_eq!(p.parents.len(), parents);
            }
            history.add_proposals(generation, proposals.iter().map(|p| &p.genome));
            for p in &proposals {
                history.set_outcome(&p.genome.hash(), outcome(&p.genome));
            }
            // These spaces are small enough to enumerate, so a short answer is an
            // exhausted space, not a give-up.
            if proposals.len() < params.population {
                prop_assert!(valid.iter().all(|g| history.contains(&g.hash())));
            }
        }
    }
}
