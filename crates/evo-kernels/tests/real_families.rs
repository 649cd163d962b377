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

fn sdpa_specs() -> Specializations {
    let shape = |head_dim: i64, causal: bool, dtype: &str| -> Vars {
        [
            ("BATCH", 1.into()),
            ("HEADS", 2.into()),
            ("SEQ_Q", 77.into()),
            ("SEQ_KV", 77.into()),
            ("HEAD_DIM", head_dim.into()),
            ("CAUSAL", causal.into()),
            ("DTYPE", dtype.into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    };
    let mut shapes = Vec::new();
    for d in [64, 128] {
        for c in [false, true] {
            for t in ["f16", "bf16"] {
                shapes.push(shape(d, c, t));
            }
        }
    }
    Specializations::new(
        problem("sdpa_fwd").unwrap(),
        Target::from_arch("sm_90a").unwrap(),
        &shapes,
    )
    .unwrap()
}

#[test]
fn every_valid_sdpa_genome_renders_for_every_specialization() {
    let f = Family::load(&templates(), "sdpa_fwd", "sdpa_fwd_mma").unwrap();
    let specs = sdpa_specs();
    let space = f.space(specs.contexts()).unwrap();
    let mut count = 0;
    let mut sources = BTreeSet::new();
    for g in space.iter_valid() {
        for spec in 0..specs.specs.len() {
            let src = f.render(&space, &g, spec).unwrap();
            assert!(src.contains("extern \"C\""), "{}", g.canonical());
            if spec == 0 {
                sources.insert(src.split_once('\n').unwrap().1.to_string());
            }
        }
        count += 1;
    }
    assert!(count >= 500, "only {count} valid genomes");
    assert_eq!(
        sources.len(),
        count,
        "two genomes rendered to identical code"
    );
}

#[test]
fn every_value_of_every_sdpa_knob_changes_the_code() {
    let f = Family::load(&templates(), "sdpa_fwd", "sdpa_fwd_mma").unwrap();
    let specs = sdpa_specs();
    let space = f.space(specs.contexts()).unwrap();
    // From several bases, since some knobs only matter with others (PRODUCER_WARPS with
    // WARP_SPEC = "on").
    for knob in space.knobs() {
        let distinct = space.iter_valid().step_by(97).any(|base| {
            let mut bodies = BTreeSet::new();
            for v in &knob.values {
                let mut g = base.clone();
                g.set(knob.name.clone(), v.clone());
                let vars = space.vars(&g, 0).unwrap();
                bodies.insert(f.render_vars(&vars).unwrap());
            }
            bodies.len() == knob.values.len()
        });
        assert!(
            distinct,
            "no base where every value of {} gives different code",
            knob.name
        );
    }
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

fn fp8_specs(head_dims: &[i64]) -> Specializations {
    let mut shapes = Vec::new();
    for &d in head_dims {
        for c in [false, true] {
            for t in ["f16", "bf16"] {
                let v: Vars = [
                    ("BATCH", 1.into()),
                    ("HEADS", 2.into()),
                    ("SEQ_Q", 77.into()),
                    ("SEQ_KV", 77.into()),
                    ("HEAD_DIM", d.into()),
                    ("CAUSAL", c.into()),
                    ("DTYPE", t.into()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
                shapes.push(v);
            }
        }
    }
    Specializations::new(
        problem("sdpa_fwd_fp8").unwrap(),
        Target::from_arch("sm_90a").unwrap(),
        &shapes,
    )
    .unwrap()
}

#[test]
fn every_valid_fp8_sdpa_genome_renders_for_every_specialization() {
    let f = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_mma").unwrap();
    for (dims, at_least) in [(&[64i64, 128][..], 200), (&[64][..], 400)] {
        let specs = fp8_specs(dims);
        let space = f.space(specs.contexts()).unwrap();
        let mut count = 0;
        let mut sources = BTreeSet::new();
        for g in space.iter_valid() {
            for spec in 0..specs.specs.len() {
                let src = f.render(&space, &g, spec).unwrap();
                assert!(src.contains("extern \"C\""), "{}", g.canonical());
                assert!(src.contains("sdpa_fp8_quantize"), "{}", g.canonical());
                if spec == 0 {
                    sources.insert(src.split_once('\n').unwrap().1.to_string());
                }
            }
            count += 1;
        }
        assert!(count >= at_least, "only {count} valid genomes for {dims:?}");
        assert_eq!(
            sources.len(),
            count,
            "two genomes rendered to identical code"
        );
        // Head dim 64 alone admits every value of every knob.
        if dims == [64] {
            for knob in space.knobs() {
                for v in &knob.values {
                    assert!(
                        space.iter_valid().any(|g| g.get(&knob.name) == Some(v)),
                        "{} = {v} is never valid",
                        knob.name
                    );
                }
            }
        }
    }
}

#[test]
fn every_value_of_every_fp8_sdpa_knob_changes_the_code() {
    let f = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_mma").unwrap();
    let specs = fp8_specs(&[64, 128]);
    let space = f.space(specs.contexts()).unwrap();
    for knob in space.knobs() {
        let distinct = space.iter_valid().step_by(7).any(|base| {
            let mut bodies = BTreeSet::new();
            for v in &knob.values {
                let mut g = base.clone();
                g.set(knob.name.clone(), v.clone());
                let vars = space.vars(&g, 0).unwrap();
                bodies.insert(f.render_vars(&vars).unwrap());
            }
            bodies.len() == knob.values.len()
        });
        assert!(
            distinct,
            "no base where every value of {} gives different code",
            knob.name
        );
    }
}

/// The Hopper family (sm_90a only): every valid genome renders for every specialization
/// (head dims 64 and 128, causal or not, f16 and bf16) to distinct code, every value of
/// every knob changes the code, and the family asks the static gate for HGMMA.
#[test]
fn every_valid_wgmma_sdpa_genome_renders_and_every_knob_matters() {
    let f = Family::load(&templates(), "sdpa_fwd", "sdpa_fwd_wgmma").unwrap();
    assert_eq!(f.min_arch, 90);
    assert_eq!(f.require_sass, vec!["HGMMA".to_string()]);
    let specs = sdpa_specs();
    let space = f.space(specs.contexts()).unwrap();
    let mut sources = BTreeSet::new();
    let mut count = 0;
    for g in space.iter_valid() {
        for spec in 0..specs.specs.len() {
            let src = f.render(&space, &g, spec).unwrap();
            assert!(src.contains("extern \"C\""), "{}", g.canonical());
            assert!(src.contains("wgmma.mma_async"), "{}", g.canonical());
            if spec == 0 {
                sources.insert(src.split_once('\n').unwrap().1.to_string());
            }
        }
        count += 1;
    }
    // (BLOCK_N, CONSUMER_WG, STAGES, WARP_SPEC, SETMAXNREG): 2 x 2 x 3 x 2 x 2 raw, less the
    // rings that do not fit 227 KiB at head dim 128 and SETMAXNREG without a producer and
    // two consumers.
    assert_eq!(count, 25);
    assert_eq!(
        sources.len(),
        count,
        "two genomes rendered to identical code"
    );
    for knob in space.knobs() {
        let distinct = space.iter_valid().any(|base| {
            let mut bodies = BTreeSet::new();
            for v in &knob.values {
                let mut g = base.clone();
                g.set(knob.name.clone(), v.clone());
                let vars = space.vars(&g, 0).unwrap();
                bodies.insert(f.render_vars(&vars).unwrap());
            }
            bodies.len() == knob.values.len()
        });
        assert!(
            distinct,
            "no base where every value of {} differs",
            knob.name
        );
    }
}
