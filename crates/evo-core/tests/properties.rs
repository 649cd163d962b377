//! Property tests of spaces and genomes over randomly generated spaces.

use evo_core::{Expr, Genome, Knob, Space, Value, Vars};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// A random space: 1-5 integer knobs with 1-5 distinct values, one string knob, and a
/// random linear constraint that keeps some but usually not all genomes.
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sampled_genomes_satisfy_every_constraint(space in arb_space(), seed in any::<u64>()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let valid: Vec<Genome> = space.iter_valid().collect();
        for _ in 0..20 {
            match space.sample(&mut rng) {
                Some(g) => {
                    prop_assert!(space.check_genome(&g).is_ok());
                    prop_assert_eq!(space.rejection(&g), None);
                    prop_assert!(valid.contains(&g));
                }
                None => prop_assert!(valid.is_empty()),
            }
        }
    }

    #[test]
    fn enumeration_yields_exactly_the_valid_genomes(space in arb_space()) {
        let valid: Vec<Genome> = space.iter_valid().collect();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let stats = space.stats(u128::MAX, 0, &mut rng);
        prop_assert_eq!(stats.valid as usize, valid.len());
        for i in 0..space.raw_size() {
            let g = space.genome_at(i);
            prop_assert_eq!(valid.contains(&g), space.rejection(&g).is_none());
        }
    }

    #[test]
    fn canonical_form_round_trips(space in arb_space(), index in any::<u64>()) {
        let g = space.genome_at(index as u128 % space.raw_size());
        let text = g.canonical();
        let back = Genome::parse(&text).unwrap();
        prop_assert_eq!(&back, &g);
        prop_assert_eq!(back.hash(), g.hash());
        prop_assert!(space.check_genome(&back).is_ok());
        // Order of entries in the input does not matter.
        let reversed: Vec<&str> = text.split(',').rev().collect();
        prop_assert_eq!(Genome::parse(&reversed.join(",")).unwrap(), g);
    }

    #[test]
    fn distinct_genomes_have_distinct_hashes(space in arb_space()) {
        let mut seen = std::collections::BTreeMap::new();
        for i in 0..space.raw_size().min(500) {
            let g = space.genome_at(i);
            if let Some(other) = seen.insert(g.hash(), g.clone()) {
                prop_assert_eq!(other, g);
            }
        }
    }
}
