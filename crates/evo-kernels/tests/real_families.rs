//! The families shipped in templates/: they load, every valid genome renders, and every
//! value of every knob gives different source.

use std::collections::BTreeSet;
use std::path::PathBuf;

use evo_core::{Genome, Target, Vars};
use evo_kernels::{problem, Family, Specializations};

fn templates() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

fn gemm_specs() -> Specializations {
    let shape = |dtype: &str| -> Vars {
        [
            ("M", 64.into()),
            ("N", 64.into()),
            ("K", 64.into()),
            ("DTYPE", dtype.into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    };
    Specializations::new(
        problem("gemm").unwrap(),
        Target::from_arch("sm_90a").unwrap(),
        &[shape("f16"), shape("bf16")],
    )
    .unwrap()
}

#[test]
fn every_valid_gemm_genome_renders_for_every_specialization() {
    let f = Family::load(&templates(), "gemm", "gemm_mma").unwrap();
    let specs = gemm_specs();
    let space = f.space(specs.contexts()).unwrap();
    let mut sources = BTreeSet::new();
    let mut count = 0;
    for g in space.iter_valid() {
        for spec in 0..specs.specs.len() {
            let src = f.render(&space, &g, spec).unwrap();
            assert!(src.contains("extern \"C\""), "{}", g.canonical());
            // Strip the header line, which names the genome: the code itself must differ.
            sources.insert(src.split_once('\n').unwrap().1.to_string());
        }
        count += 1;
    }
    assert!(count >= 100, "only {count} valid genomes");
    assert_eq!(
        sources.len(),
        2 * count,
        "two genomes rendered to identical code"
    );
}

#[test]
fn every_value_of_every_knob_changes_the_code() {
    let f = Family::load(&templates(), "gemm", "gemm_mma").unwrap();
    let specs = gemm_specs();
    let space = f.space(specs.contexts()).unwrap();
    let base: Genome = space.iter_valid().next().unwrap();
    for knob in space.knobs() {
        // Move this knob alone through all its values (the neighbours need not satisfy
        // the constraints: rendering does not check them).
        let mut bodies = BTreeSet::new();
        for v in &knob.values {
            let mut g = base.clone();
            g.set(knob.name.clone(), v.clone());
            let vars = space.vars(&g, 0).unwrap();
            bodies.insert(f.render_vars(&vars).unwrap());
        }
        assert_eq!(
            bodies.len(),
            knob.values.len(),
            "knob {} from {}",
            knob.name,
            base.canonical()
        );
    }
}
