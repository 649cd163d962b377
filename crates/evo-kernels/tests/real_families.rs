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
    fp8_problem_specs("sdpa_fwd_fp8", head_dims)
}

fn fp8_problem_specs(problem_name: &str, head_dims: &[i64]) -> Specializations {
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
        problem(problem_name).unwrap(),
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

/// The end-to-end family takes everything but its launches from the FP8 family (`base`):
/// the same valid genomes render to the same code, so the FP8 family's render and compile
/// coverage holds for it.
#[test]
fn every_valid_fp8_e2e_genome_renders_the_fp8_familys_code() {
    let fp8 = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_mma").unwrap();
    let e2e = Family::load(&templates(), "sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_mma").unwrap();
    assert_eq!(e2e.problem.name(), "sdpa_fwd_fp8_e2e");
    assert_eq!(e2e.knobs, fp8.knobs);
    assert_eq!(e2e.constraints, fp8.constraints);
    assert_eq!(e2e.min_arch, fp8.min_arch);
    let specs8 = fp8_specs(&[64, 128]);
    let specs = fp8_problem_specs("sdpa_fwd_fp8_e2e", &[64, 128]);
    let space8 = fp8.space(specs8.contexts()).unwrap();
    let space = e2e.space(specs.contexts()).unwrap();
    let valid: Vec<_> = space.iter_valid().collect();
    assert_eq!(valid, space8.iter_valid().collect::<Vec<_>>());
    assert!(valid.len() >= 200, "{}", valid.len());
    for g in &valid {
        for spec in 0..specs.specs.len() {
            let a = e2e.render(&space, g, spec).unwrap();
            let b = fp8.render(&space8, g, spec).unwrap();
            assert!(a.starts_with("// evo: family sdpa_fwd_fp8_e2e_mma (problem sdpa_fwd_fp8_e2e)"));
            assert_eq!(
                a.split_once('\n').unwrap().1,
                b.split_once('\n').unwrap().1,
                "{}",
                g.canonical()
            );
        }
    }
}

/// Its launches: the quantizer on q, k and v into scratch, then the attention kernel with
/// exactly sdpa_fwd_fp8's ABI, the inputs replaced by the scratch buffers; scratch sizes
/// follow the shape.
#[test]
fn fp8_e2e_launches_bind_scratch_to_the_fp8_abi() {
    use evo_kernels::harness::{ArgSlot, ElemType};
    let e2e = Family::load(&templates(), "sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_mma").unwrap();
    let specs = fp8_problem_specs("sdpa_fwd_fp8_e2e", &[64]);
    let space = e2e.space(specs.contexts()).unwrap();
    let g = space.iter_valid().next().unwrap();
    let vars = space.vars(&g, 0).unwrap();
    let shape: Vars = [
        ("BATCH", 3.into()),
        ("HEADS", 5.into()),
        ("SEQ_Q", 77.into()),
        ("SEQ_KV", 1000.into()),
        ("HEAD_DIM", 64.into()),
        ("CAUSAL", false.into()),
        ("DTYPE", "f16".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let scratch = e2e.scratch_specs(&vars, &shape).unwrap();
    let got: Vec<(&str, ElemType, usize)> = scratch
        .iter()
        .map(|t| (t.name.as_str(), t.elem, t.len))
        .collect();
    assert_eq!(
        got,
        vec![
            ("q8", ElemType::E4m3, 3 * 5 * 77 * 64),
            ("k8", ElemType::E4m3, 3 * 5 * 1000 * 64),
            ("v8", ElemType::E4m3, 3 * 5 * 1000 * 64),
            ("q_descale", ElemType::F32, 15),
            ("k_descale", ElemType::F32, 15),
            ("v_descale", ElemType::F32, 15),
        ]
    );
    let args = e2e.launch_args(&vars, &shape).unwrap();
    let kernels: Vec<&str> = e2e.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(
        kernels,
        [
            "sdpa_fp8_quantize",
            "sdpa_fp8_quantize",
            "sdpa_fp8_quantize",
            "sdpa_fwd_fp8"
        ]
    );
    for (t, seq) in [77i64, 1000, 1000].into_iter().enumerate() {
        assert_eq!(
            args[t],
            vec![
                ArgSlot::Input(t),
                ArgSlot::Scratch(t),
                ArgSlot::Scratch(t + 3),
                ArgSlot::I64(seq * 64)
            ]
        );
    }
    let fp8_abi: Vec<ArgSlot> = problem("sdpa_fwd_fp8")
        .unwrap()
        .args(&shape)
        .into_iter()
        .map(|a| match a {
            ArgSlot::Input(i) => ArgSlot::Scratch(i),
            other => other,
        })
        .collect();
    assert_eq!(args[3], fp8_abi);
    let dims = e2e.launch_dims(&vars, &shape).unwrap();
    assert_eq!(dims[0].1.grid, [15, 1, 1]);
    assert_eq!(dims[0].1.block, [256, 1, 1]);
    // A single-kernel family keeps the ABI for its kernel and has no scratch.
    let fp8 = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_mma").unwrap();
    assert!(!fp8.is_multi_arg());
    assert!(fp8.launch_args(&vars, &shape).unwrap().is_empty());
    assert!(fp8.scratch_specs(&vars, &shape).unwrap().is_empty());
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
    // (BLOCK_N, CONSUMER_WG, STAGES, WARP_SPEC, SETMAXNREG, LOADER, OVERLAP):
    // 2 x 2 x 3 x 2 x 2 x 2 x 2 raw, less the rings that do not fit 227 KiB at head dim 128,
    // SETMAXNREG without a producer and two consumers, TMA without a producer, and OVERLAP's
    // second S accumulator with BLOCK_N = 128 (register bound): 40 with OVERLAP off, 24 on.
    assert_eq!(count, 64);
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
