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

/// From some valid genome among every `step`-th, each value of each knob renders different
/// code (several bases, since some knobs only matter with others: PRODUCER_WARPS with
/// WARP_SPEC = "on").
fn assert_every_knob_value_changes_the_code(f: &Family, space: &evo_core::Space, step: usize) {
    for knob in space.knobs() {
        let distinct = space.iter_valid().step_by(step).any(|base| {
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
            "{}: no base where every value of {} gives different code",
            f.name, knob.name
        );
    }
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
    assert_every_knob_value_changes_the_code(&f, &space, 97);
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
    assert_every_knob_value_changes_the_code(&f, &space, 7);
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
    // Bound to the plain call's ABI, as the worker binds every call's own.
    let e2e_abi = problem("sdpa_fwd_fp8_e2e").unwrap().args(&shape);
    let args: Vec<Vec<ArgSlot>> = e2e
        .launch_args(&vars, &shape)
        .unwrap()
        .iter()
        .map(|a| evo_kernels::bind_abi(a, &e2e_abi).unwrap())
        .collect();
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
    // (CONSUMER_WG, BLOCK_N, STAGES, WARP_SPEC, SETMAXNREG, PRODUCER_REGS, LOADER, OVERLAP,
    // PINGPONG, SWIZZLE_BYTES, RESCALE, WG_SPLIT, SCHEDULER), three consumers at most: 3 x 4 x 3 x 2 x 2 x 3 x 2 x 2 x 2 x
    // 3 x 2 x 2 x 2 raw, less the rings that do not fit 227 KiB at head dim 128, the register bound (O, S and
    // with OVERLAP the in-flight P, plus 32, within the setmaxnreg target or the launch's share),
    // SETMAXNREG without a producer and two or three consumers, PRODUCER_REGS pinned without
    // SETMAXNREG and at least 56 for the cp.async producer, TMA without a producer, ping-pong
    // without a producer, OVERLAP and two or three consumers, and the keys split without two or
    // three TMA-fed consumers, without ping-pong or with STAGES not a multiple of CONSUMER_WG:
    // 606 genomes of each RESCALE with rows, 120 with keys, all with SCHEDULER grid; and 588
    // persistent ones (TMA-fed rows genomes only: the grid ones with WARP_SPEC, LOADER tma and
    // WG_SPLIT rows, less those whose ring, Q tile and O staging tile (O_STAGE: 48 registers of
    // slack) exceed 227 KiB at head dim 128). EXP2_POLY eighth and quarter add two copies of the
    // 1194 of them with one or two consumers and 64 registers of slack: 4428. SPECULATIVE_EXP on
    // adds a copy of the 1965 with RESCALE lazy and a producer warpgroup. PSUM has the one value
    // f32 (mma measured slower, removed). CONSUMER_WG 4 adds 18: BLOCK_N 64 without a producer
    // warpgroup (512 threads, 128 registers each), every STAGES, SWIZZLE_BYTES and RESCALE; with
    // a producer (112 registers a consumer) four fit head dim 64 only. KEY_CTAS 2 and 4 (a cluster
    // of two or four CTAs per query block) each add a copy of the 3033 grid genomes with a TMA
    // producer whose shared memory still fits beside the other ranks' slice partials (per
    // warpgroup owning rows, one per other rank: HEAD_DIM / KEY_CTAS columns and the row
    // statistics) and that, splitting the keys, have 40 registers of slack (three consumers
    // without setmaxnreg and with less spilled at head dim 128): 2259 and 2169.
    assert_eq!(count, 10839);
    assert_eq!(
        sources.len(),
        count,
        "two genomes rendered to identical code"
    );
    assert_every_knob_value_changes_the_code(&f, &space, 1);
}

/// SCHEDULER of the Hopper family: a grid genome launches (query blocks x KEY_CTAS, heads,
/// batch), a KEY_CTAS 2 kernel compiled as clusters of two CTAs along x; a persistent one
/// min(132, work items) CTAs in x, a work item being one query block, or causal a pair of them;
/// the kernel learns which (PERSISTENT, ITEM_BLOCKS) from its render, and only TMA-fed genomes
/// whose warpgroups own rows are persistent.
/// sdpa_fwd_wgmma reads q, k and v through 4-D tensor maps (head_dim, seq, heads, batch) over
/// each call's own strides: nothing is declared contiguous, and a model's (batch, seq, heads,
/// dim) views bind to maps that step over them in place.
#[test]
fn wgmma_tensor_maps_take_each_calls_strides() {
    use evo_kernels::harness::{ArgSlot, Call, Layout};
    let f = Family::load(&templates(), "sdpa_fwd", "sdpa_fwd_wgmma").unwrap();
    assert!(f.contiguous.is_empty(), "{:?}", f.contiguous);
    let space = f.space(sdpa_specs().contexts()).unwrap();
    let g = space
        .iter_valid()
        .find(|g| g.canonical().contains("LOADER=tma"))
        .unwrap();
    let vars = space.vars(&g, 0).unwrap();
    let sdpa = evo_kernels::problem("sdpa_fwd").unwrap();
    let (b, h, s, d) = (
        2usize,
        3usize,
        100usize,
        vars["HEAD_DIM"].as_int().unwrap() as usize,
    );
    let shape = sdpa
        .complete_shape(
            &[("BATCH", b), ("HEADS", h), ("SEQ_Q", s), ("SEQ_KV", s)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), (v as i64).into()))
                .chain(["HEAD_DIM", "DTYPE", "CAUSAL"].map(|k| (k.to_string(), vars[k].clone())))
                .collect(),
        )
        .unwrap();
    let args = f.launch_args(&vars, &shape).unwrap();
    // (batch, seq, heads, dim) storage seen as (batch, heads, seq, dim).
    let bshd = Layout::new(
        vec![b, h, s, d],
        vec![s * h * d, d, h * d, 1],
        b * s * h * d,
    )
    .unwrap();
    let mut call: Call = sdpa.default_call(&shape);
    for l in &mut call.layouts[..3] {
        *l = bshd.clone();
    }
    let bound = evo_kernels::bind_abi(&args[0], &sdpa.call_args(&shape, &call)).unwrap();
    let maps: Vec<_> = bound
        .iter()
        .filter_map(|a| match a {
            ArgSlot::TensorMap(m) => Some(*m),
            _ => None,
        })
        .collect();
    assert_eq!(maps.len(), 3);
    for m in maps {
        assert!(m.is_bound());
        assert_eq!(m.rank, 4);
        assert_eq!(m.dims[..4], [d as u64, s as u64, h as u64, b as u64]);
        let e = m.elem.size() as u64;
        assert_eq!(
            m.strides_bytes[..3],
            [(h * d) as u64 * e, d as u64 * e, (s * h * d) as u64 * e]
        );
    }
}

#[test]
fn wgmma_scheduler_launches_and_renders() {
    let f = Family::load(&templates(), "sdpa_fwd", "sdpa_fwd_wgmma").unwrap();
    let specs = sdpa_specs();
    let space = f.space(specs.contexts()).unwrap();
    let (mut grid, mut persistent, mut clusters) = (0, 0, 0);
    for g in space.iter_valid().step_by(7) {
        let pers = g
            .get("SCHEDULER")
            .unwrap()
            .to_string()
            .contains("persistent");
        if pers {
            persistent += 1;
            let c = g.canonical();
            assert!(
                c.contains("LOADER=tma")
                    && c.contains("WARP_SPEC=on")
                    && c.contains("WG_SPLIT=rows"),
                "{c}"
            );
        } else {
            grid += 1;
        }
        // KEY_CTAS: that many CTAs (a cluster, grid x) per query block, grid genomes only.
        let key_ctas = g.get("KEY_CTAS").unwrap().as_int().unwrap();
        if key_ctas > 1 {
            clusters += 1;
            assert!(!pers, "{}", g.canonical());
        }
        // Specialization 0: head dim 64, non-causal; 2: head dim 64, causal (sdpa_specs).
        for (spec, causal) in [(0, false), (2, true)] {
            let vars = space.vars(&g, spec).unwrap();
            let bm = vars["BLOCK_M"].as_int().unwrap();
            let src = f.render(&space, &g, spec).unwrap();
            let pair = pers && causal;
            assert!(
                src.contains(&format!("PERSISTENT = {},", pers as i32)),
                "{}",
                g.canonical()
            );
            assert_eq!(
                src.contains(&format!("__cluster_dims__({key_ctas}, 1, 1)")),
                key_ctas > 1,
                "{}",
                g.canonical()
            );
            assert!(src.contains(&format!(
                "LAUNCH_ITEM_BLOCKS = {},",
                if pair { 2 } else { 1 }
            )));
            for (b, h, sq) in [(4i64, 16i64, 4096i64), (1, 2, 77), (1, 1, 200), (3, 5, 1)] {
                let shape: Vars = [
                    ("BATCH", b.into()),
                    ("HEADS", h.into()),
                    ("SEQ_Q", sq.into()),
                    ("SEQ_KV", 300.into()),
                    ("HEAD_DIM", 64.into()),
                    ("CAUSAL", causal.into()),
                    ("DTYPE", "f16".into()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
                let dims = f.launch_dims(&vars, &shape).unwrap();
                let n_mb = (sq + bm - 1) / bm;
                let want = if pers {
                    let per_head = if pair { (n_mb + 1) / 2 } else { n_mb };
                    [(per_head * h * b).min(132) as u32, 1, 1]
                } else {
                    [(n_mb * key_ctas) as u32, h as u32, b as u32]
                };
                assert_eq!(
                    dims[0].1.grid,
                    want,
                    "{} {b} {h} {sq} causal {causal}",
                    g.canonical()
                );
            }
        }
    }
    assert!(
        grid > 0 && persistent > 0 && clusters > 0,
        "{grid} {persistent} {clusters}"
    );
}

/// Genomes recorded before SCHEDULER, EXP2_POLY, PSUM and KEY_CTAS existed (stored runs,
/// seeds, manifests) name none of them: `[defaults]` SCHEDULER = "grid", EXP2_POLY = "off",
/// PSUM = "f32" and KEY_CTAS = 1 complete them, so they render exactly the source of
/// SCHEDULER=grid,EXP2_POLY=off,PSUM=f32,KEY_CTAS=1 (header included: the completed genome is
/// the genome), in the Hopper family and its split-KV family (which inherits the defaults).
#[test]
fn wgmma_genomes_before_scheduler_render_as_grid() {
    let specs = sdpa_specs();
    for name in ["sdpa_fwd_wgmma", "sdpa_fwd_wgmma_splitkv"] {
        let f = Family::load(&templates(), "sdpa_fwd", name).unwrap();
        let space = f.space(specs.contexts()).unwrap();
        assert_eq!(
            space.defaults().get("SCHEDULER"),
            Some(&"grid".into()),
            "{name}"
        );
        assert_eq!(
            space.defaults().get("EXP2_POLY"),
            Some(&"off".into()),
            "{name}"
        );
        assert_eq!(space.defaults().get("PSUM"), Some(&"f32".into()), "{name}");
        assert_eq!(space.defaults().get("KEY_CTAS"), Some(&1.into()), "{name}");
        let mut checked = 0;
        for g in space
            .iter_valid()
            .filter(|g| {
                g.get("SCHEDULER") == Some(&"grid".into())
                    && g.get("EXP2_POLY") == Some(&"off".into())
                    && g.get("PSUM") == Some(&"f32".into())
                    && g.get("KEY_CTAS") == Some(&1.into())
            })
            .step_by(11)
        {
            let old: Genome = g
                .iter()
                .filter(|(k, _)| {
                    !["SCHEDULER", "EXP2_POLY", "PSUM", "KEY_CTAS"].contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert!(matches!(
                space.check_genome(&old),
                Err(evo_core::SpaceError::MissingKnobs(_))
            ));
            let completed = space.complete(&old).unwrap();
            assert_eq!(completed, g);
            assert_eq!(completed.hash(), g.hash());
            assert!(space.rejection(&completed).is_none());
            for spec in 0..specs.specs.len() {
                assert_eq!(
                    f.render(&space, &old, spec).unwrap(),
                    f.render(&space, &g, spec).unwrap(),
                    "{name} {}",
                    g.canonical()
                );
            }
            checked += 1;
        }
        assert!(checked > 5, "{name}: {checked}");
    }
}

/// The Hopper FP8 family (native e4m3 wgmma): every valid genome renders for every
/// specialization (head dims 64 and 128, causal or not, f16 and bf16 output) to distinct code
/// holding e4m3 wgmma and the end-to-end quantizer, every value of every knob is valid
/// somewhere and changes the code, and the family asks the static gate for QGMMA.
#[test]
fn every_valid_fp8_wgmma_genome_renders_and_every_knob_matters() {
    let f = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_wgmma").unwrap();
    assert_eq!(f.min_arch, 90);
    assert_eq!(f.require_sass, vec!["QGMMA".to_string()]);
    let specs = fp8_specs(&[64, 128]);
    let space = f.space(specs.contexts()).unwrap();
    let mut sources = BTreeSet::new();
    let mut count = 0;
    for g in space.iter_valid() {
        let e4m3 = g.canonical().contains("PV=e4m3");
        for spec in 0..specs.specs.len() {
            let src = f.render(&space, &g, spec).unwrap();
            assert!(src.contains("extern \"C\""), "{}", g.canonical());
            assert!(src.contains("k32.f32.e4m3.e4m3"), "{}", g.canonical());
            assert!(src.contains("sdpa_fp8_quantize"), "{}", g.canonical());
            assert!(src.contains(if e4m3 { "PV_E4M3 = 1" } else { "PV_E4M3 = 0" }));
            if spec == 0 {
                sources.insert(src.split_once('\n').unwrap().1.to_string());
            }
        }
        count += 1;
    }
    // (CONSUMER_WG, BLOCK_N, STAGES, WARP_SPEC, PV) = 2 x 2 x 3 x 2 x 2: every ring fits 227 KiB
    // and every register estimate the bound, at head dim 128 too.
    assert_eq!(count, 48);
    assert_eq!(
        sources.len(),
        count,
        "two genomes rendered to identical code"
    );
    assert_every_knob_value_changes_the_code(&f, &space, 1);
}

/// The Hopper FP8 family on the fp16 family's schedule (sdpa_fwd_fp8_ws, issue 19): every
/// valid genome renders for every specialization (head dims 64 and 128, causal or not, f16 and
/// bf16 output) to distinct code with the genome's tile sizes and the V^T swizzle its BLOCK_N
/// allows, every value of every knob changes the code, the family asks the static gate for
/// QGMMA and passes q, k, v contiguous (its TMA tensor maps ignore strides).
#[test]
fn every_valid_fp8_ws_genome_renders_and_every_knob_matters() {
    let f = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_ws").unwrap();
    assert_eq!(f.min_arch, 90);
    assert_eq!(f.require_sass, vec!["QGMMA".to_string()]);
    assert_eq!(f.contiguous, vec!["q", "k", "v"]);
    let specs = fp8_specs(&[64, 128]);
    let space = f.space(specs.contexts()).unwrap();
    let mut sources = BTreeSet::new();
    let mut count = 0;
    let mut block_ns = BTreeSet::new();
    for g in space.iter_valid() {
        let bn = match g.get("BLOCK_N") {
            Some(evo_core::Value::Int(n)) => *n,
            other => panic!("BLOCK_N {other:?}"),
        };
        block_ns.insert(bn);
        let vt_sw = if bn % 128 == 0 {
            128
        } else if bn % 64 == 0 {
            64
        } else {
            32
        };
        for spec in 0..specs.specs.len() {
            let src = f.render(&space, &g, spec).unwrap();
            assert!(src.contains("extern \"C\""), "{}", g.canonical());
            assert!(
                src.contains(&format!("BLOCK_N = {bn},")),
                "{}",
                g.canonical()
            );
            assert!(
                src.contains(&format!("VT_SW = {vt_sw},")),
                "{}",
                g.canonical()
            );
            assert!(src.contains("struct Qgmma<"), "{}", g.canonical());
            if spec == 0 {
                sources.insert(src.split_once('\n').unwrap().1.to_string());
            }
        }
        count += 1;
    }
    // `evo space` of configs/sdpa_fp8_ws_search.toml: 54432 combinations, 6256 valid (the rings
    // and the register estimate at head dim 128 bound them; 3716 grid genomes, 2540 persistent:
    // the `scheduler` and `producer_regs` constraints leave out what spilled; 1872 at BLOCK_N 96,
    // 1020 with the producer in 24 registers, 2020 with PSUM mma); every BLOCK_N is valid
    // somewhere.
    assert_eq!(count, 6256);
    assert_eq!(block_ns.len(), 7, "{block_ns:?}");
    assert_eq!(
        sources.len(),
        count,
        "two genomes rendered to identical code"
    );
    assert_every_knob_value_changes_the_code(&f, &space, 1);
}

/// The end-to-end ws family (sdpa_fwd_fp8_e2e_ws) is sdpa_fwd_fp8_ws (knobs, derived values,
/// constraints, template, arch, QGMMA) with sdpa_fwd_fp8_e2e_split's quantizer: the same valid
/// genomes render the same code; the six quantizer launches, their scratch and argument lists
/// are the split family's (no opcode required of them); the attention launch is the ws
/// family's, its inputs replaced by the scratch codes and descales and its tensor maps viewing
/// the scratch codes with the same dimensions, boxes and swizzle.
#[test]
fn fp8_e2e_ws_is_the_ws_kernel_after_the_split_quantizer() {
    use evo_kernels::harness::{ArgSlot, MappedBuffer};
    let ws = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_ws").unwrap();
    let split = Family::load(&templates(), "sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_split").unwrap();
    let e2e = Family::load(&templates(), "sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_ws").unwrap();
    assert_eq!(e2e.problem.name(), "sdpa_fwd_fp8_e2e");
    assert_eq!(e2e.knobs, ws.knobs);
    assert_eq!(e2e.derived, ws.derived);
    assert_eq!(e2e.constraints, ws.constraints);
    assert_eq!(
        (e2e.min_arch, &e2e.require_sass),
        (ws.min_arch, &ws.require_sass)
    );
    assert_eq!(e2e.contiguous, ["q", "k", "v"]);
    let specs8 = fp8_specs(&[64, 128]);
    let specs = fp8_problem_specs("sdpa_fwd_fp8_e2e", &[64, 128]);
    let space8 = ws.space(specs8.contexts()).unwrap();
    let space = e2e.space(specs.contexts()).unwrap();
    let valid: Vec<_> = space.iter_valid().collect();
    assert_eq!(valid, space8.iter_valid().collect::<Vec<_>>());
    for g in valid.iter().step_by(13) {
        for spec in 0..specs.specs.len() {
            let a = e2e.render(&space, g, spec).unwrap();
            let b = ws.render(&space8, g, spec).unwrap();
            assert!(a.starts_with("// evo: family sdpa_fwd_fp8_e2e_ws (problem sdpa_fwd_fp8_e2e)"));
            assert_eq!(
                a.split_once('\n').unwrap().1,
                b.split_once('\n').unwrap().1,
                "{}",
                g.canonical()
            );
            assert!(a.contains("sdpa_fp8_quantize_chunks"), "{}", g.canonical());
        }
    }
    assert_every_knob_value_changes_the_code(&e2e, &space, 1);

    // Launches on a ragged shape, bound to each problem's own call.
    let shape: Vars = [
        ("BATCH", 3.into()),
        ("HEADS", 5.into()),
        ("SEQ_Q", 77.into()),
        ("SEQ_KV", 1000.into()),
        ("HEAD_DIM", 128.into()),
        ("CAUSAL", true.into()),
        ("DTYPE", "bf16".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let g = &valid[valid.len() / 2];
    let vars = space.vars(g, 0).unwrap();
    let bound = |f: &Family, problem_name: &str| -> Vec<Vec<ArgSlot>> {
        let abi = problem(problem_name).unwrap().args(&shape);
        f.launch_args(&vars, &shape)
            .unwrap()
            .iter()
            .map(|a| evo_kernels::bind_abi(a, &abi).unwrap())
            .collect()
    };
    let (args, split_args, ws_args) = (
        bound(&e2e, "sdpa_fwd_fp8_e2e"),
        bound(&split, "sdpa_fwd_fp8_e2e"),
        bound(&ws, "sdpa_fwd_fp8"),
    );
    assert_eq!(e2e.launches.len(), 7);
    assert_eq!(e2e.launches[..6], split.launches[..6]);
    assert_eq!(args[..6], split_args[..6]);
    assert_eq!(
        e2e.scratch_specs(&vars, &shape).unwrap(),
        split.scratch_specs(&vars, &shape).unwrap()
    );
    assert_eq!(e2e.launch_require_sass[..6], vec![Some(Vec::new()); 6]);
    assert_eq!(e2e.launch_require_sass[6], None);
    // sdpa_fwd_fp8's inputs (q, k, v, q_descale, k_descale, v_descale) are the first six
    // scratch buffers in that order (q8, k8, v8 and the descales).
    let names: Vec<String> = e2e.scratch.iter().map(|s| s.name.clone()).collect();
    assert_eq!(
        names[..6],
        ["q8", "k8", "v8", "q_descale", "k_descale", "v_descale"]
    );
    let on_scratch: Vec<ArgSlot> = ws_args[0]
        .iter()
        .map(|a| match *a {
            ArgSlot::Input(i) => ArgSlot::Scratch(i),
            ArgSlot::TensorMap(mut m) => {
                assert_eq!(m.of, MappedBuffer::Input);
                m.of = MappedBuffer::Scratch;
                ArgSlot::TensorMap(m)
            }
            other => other,
        })
        .collect();
    // Seven pointers, four sizes, twelve strides, the scale, three tensor maps.
    assert_eq!(on_scratch.len(), 27);
    assert_eq!(args[6], on_scratch);
    assert_eq!(e2e.launches[6], ws.launches[0]);
}

/// The one-pass cluster quantizer family (sdpa_fwd_fp8_e2e_ws_cluster) is sdpa_fwd_fp8_e2e_ws with
/// its six quantizer launches replaced by one: sdpa_fp8_quantize_qkv on q, k and v (inputs, codes,
/// descales, both slice lengths, the elements a CTA keeps on chip), a cluster of QUANT_CLUSTER
/// CTAs per slice of each tensor with twice `hold` bytes of shared memory; the same ws code and
/// attention launch. Its two knobs change the rendered kernel (cluster shape, launch bounds) and
/// the launch (grid, block, what a CTA keeps).
#[test]
fn fp8_e2e_ws_cluster_quantizes_q_k_and_v_in_one_launch() {
    use evo_kernels::harness::ArgSlot;
    let ws = Family::load(&templates(), "sdpa_fwd_fp8_e2e", "sdpa_fwd_fp8_e2e_ws").unwrap();
    let cl = Family::load(
        &templates(),
        "sdpa_fwd_fp8_e2e",
        "sdpa_fwd_fp8_e2e_ws_cluster",
    )
    .unwrap();
    let added: Vec<&str> = cl
        .knobs
        .iter()
        .filter(|k| !ws.knobs.contains(k))
        .map(|k| k.name.as_str())
        .collect();
    assert_eq!(added, ["QUANT_CLUSTER", "QUANT_CTAS_PER_SM"]);
    assert_eq!(cl.knobs.len(), ws.knobs.len() + 2);
    assert_eq!(cl.constraints, ws.constraints);
    assert_eq!(
        (cl.min_arch, &cl.require_sass),
        (ws.min_arch, &ws.require_sass)
    );
    assert_eq!(cl.contiguous, ws.contiguous);
    let specs = fp8_problem_specs("sdpa_fwd_fp8_e2e", &[64, 128]);
    let space = cl.space(specs.contexts()).unwrap();
    // Slices of 77 x 128 and 20000 x 128 elements: parts of ceil(2560000 / cluster) rounded up
    // to 8, more than a CTA keeps (106496 or 34816 elements).
    let shape: Vars = [
        ("BATCH", 3.into()),
        ("HEADS", 5.into()),
        ("SEQ_Q", 77.into()),
        ("SEQ_KV", 20000.into()),
        ("HEAD_DIM", 128.into()),
        ("CAUSAL", false.into()),
        ("DTYPE", "f16".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let abi = problem("sdpa_fwd_fp8_e2e").unwrap().args(&shape);
    let mut schedules = std::collections::BTreeSet::new();
    for g in space.iter_valid().step_by(13).take(40) {
        let vars = space.vars(&g, 0).unwrap();
        let int = |k: &str| vars[k].as_int().unwrap();
        let (cluster, per_sm) = (int("QUANT_CLUSTER"), int("QUANT_CTAS_PER_SM"));
        schedules.insert((cluster, per_sm));
        let (threads, hold) = if per_sm == 1 {
            (512, 106496)
        } else {
            (256, 34816)
        };
        for spec in 0..specs.specs.len() {
            let vars = space.vars(&g, spec).unwrap();
            let a = cl.render_vars(&vars).unwrap();
            let mut ws_vars = vars.clone();
            ws_vars.retain(|k, _| !k.starts_with("QUANT_"));
            let b = ws.render_vars(&ws_vars).unwrap();
            let head = format!(
                "extern \"C\" __global__ void __cluster_dims__({cluster}, 1, 1) __launch_bounds__({threads}, {per_sm})\nsdpa_fp8_quantize_qkv("
            );
            let at = a
                .find(&head)
                .unwrap_or_else(|| panic!("no {head} in the render"));
            let end = at + a[at..].find("\n}\n").unwrap() + 3;
            let without = format!("{}{}", &a[..at], &a[end..]);
            assert_eq!(
                without.split_once('\n').unwrap().1.trim_end(),
                b.split_once('\n').unwrap().1.trim_end()
            );
            assert!(!b.contains("sdpa_fp8_quantize_qkv"));
        }
        let args: Vec<Vec<ArgSlot>> = cl
            .launch_args(&vars, &shape)
            .unwrap()
            .iter()
            .map(|a| evo_kernels::bind_abi(a, &abi).unwrap())
            .collect();
        let ws_args: Vec<Vec<ArgSlot>> = ws
            .launch_args(&vars, &shape)
            .unwrap()
            .iter()
            .map(|a| evo_kernels::bind_abi(a, &abi).unwrap())
            .collect();
        let kernels: Vec<&str> = cl.launches.iter().map(|l| l.kernel.as_str()).collect();
        assert_eq!(kernels, ["sdpa_fp8_quantize_qkv", "sdpa_fwd_fp8"]);
        let part = ((20000 * 128i64 + cluster - 1) / cluster + 7) / 8 * 8;
        let keep = part.min(hold);
        assert_eq!(
            args[0],
            [
                ArgSlot::Input(0),
                ArgSlot::Input(1),
                ArgSlot::Input(2),
                ArgSlot::Scratch(0),
                ArgSlot::Scratch(1),
                ArgSlot::Scratch(2),
                ArgSlot::Scratch(3),
                ArgSlot::Scratch(4),
                ArgSlot::Scratch(5),
                ArgSlot::I64(77 * 128),
                ArgSlot::I64(20000 * 128),
                ArgSlot::I64(keep)
            ]
        );
        let dims = cl.launch_dims(&vars, &shape).unwrap();
        assert_eq!(dims[0].1.grid, [cluster as u32, 45, 1]);
        assert_eq!(dims[0].1.block, [threads, 1, 1]);
        assert_eq!(i64::from(dims[0].1.shared_bytes), 2 * keep);
        assert_eq!(args[1], ws_args[6]);
        assert_eq!(
            cl.scratch_specs(&vars, &shape).unwrap(),
            ws.scratch_specs(&vars, &shape).unwrap()[..6]
        );
    }
    assert_eq!(cl.launches[1], ws.launches[6]);
    assert_eq!(
        schedules.len(),
        4,
        "every quantizer schedule: {schedules:?}"
    );
}

/// The split-KV families (sdpa_fwd_mma_splitkv, sdpa_fwd_wgmma_splitkv) are their base
/// family (knobs, derived values, constraints, template, arch, required opcodes) plus the
/// KV_SPLITS knob (the mma one with EPILOGUE pinned to "direct"), SPLITS redefined as it:
/// every valid genome renders the attention kernel with the split-KV arguments and the
/// combine kernel for every specialization, to distinct code, and every knob matters; the
/// base families render neither.
#[test]
fn split_kv_families_are_their_base_plus_kv_splits() {
    let specs = sdpa_specs();
    for (base_name, name, genomes) in [
        ("sdpa_fwd_mma", "sdpa_fwd_mma_splitkv", 2400),
        ("sdpa_fwd_wgmma", "sdpa_fwd_wgmma_splitkv", 9684),
    ] {
        let base = Family::load(&templates(), "sdpa_fwd", base_name).unwrap();
        let f = Family::load(&templates(), "sdpa_fwd", name).unwrap();
        assert_eq!(f.problem.name(), "sdpa_fwd");
        assert_eq!(f.min_arch, base.min_arch);
        assert_eq!(f.require_sass, base.require_sass);
        assert_eq!(f.constraints, base.constraints);
        let mut knobs = base.knobs.clone();
        for k in &mut knobs {
            if k.name == "EPILOGUE" {
                k.values = vec!["direct".into()];
            }
            // The split-KV grid is one CTA per (query block, head, batch, split).
            if k.name == "SCHEDULER" {
                k.values = vec!["grid".into()];
            }
            // Its KV split is across CTAs already, not a cluster.
            if k.name == "KEY_CTAS" {
                k.values = vec![1.into()];
            }
        }
        knobs.push(evo_core::Knob {
            name: "KV_SPLITS".into(),
            values: vec![2.into(), 4.into(), 8.into()],
        });
        assert_eq!(f.knobs, knobs, "{name}");
        for ((n, e), (bn, be)) in f.derived.iter().zip(&base.derived) {
            assert_eq!(n, bn);
            if n == "SPLITS" {
                assert_eq!((e.source(), be.source()), ("KV_SPLITS", "1"));
            } else {
                assert_eq!(e, be, "{n}");
            }
        }
        assert_eq!(f.derived.len(), base.derived.len());

        let space = f.space(specs.contexts()).unwrap();
        let mut sources = BTreeSet::new();
        let mut count = 0;
        for g in space.iter_valid() {
            let splits = g.get("KV_SPLITS").unwrap().to_string();
            for spec in 0..specs.specs.len() {
                let src = f.render(&space, &g, spec).unwrap();
                assert!(src.contains("sdpa_splitkv_combine("), "{}", g.canonical());
                assert!(src.contains(&format!("KV_SPLITS = {splits},")));
                assert!(src.contains("#define SPLITKV_PARAMS , float* __restrict__ o_part"));
                if spec == 0 {
                    sources.insert(src.split_once('\n').unwrap().1.to_string());
                }
            }
            count += 1;
        }
        assert_eq!(count, genomes, "{name}");
        assert_eq!(sources.len(), count, "{name}: two genomes rendered alike");
        assert_every_knob_value_changes_the_code(&f, &space, 31);

        let base_space = base.space(specs.contexts()).unwrap();
        let g = base_space.iter_valid().next().unwrap();
        let src = base.render(&base_space, &g, 0).unwrap();
        assert!(src.contains("KV_SPLITS = 1,"));
        assert!(!src.contains("sdpa_splitkv_combine("));
        assert!(src.contains("#define SPLITKV_PARAMS\n"));
    }
}

/// Their launches on ragged shapes: the attention kernel on grid (query blocks, heads,
/// batch x KV_SPLITS) with the ABI (sdpa_fwd_wgmma: and its three tensor maps) then the two
/// partial buffers, the combine on one warp per output row with the ABI then the same
/// buffers; float32 scratch of KV_SPLITS partial rows per query row; the combine kernel is
/// exempt from the family's HGMMA rule, the attention kernel is not.
#[test]
fn split_kv_launches_scratch_and_arguments() {
    use evo_kernels::harness::{ArgSlot, ElemType};
    let sdpa = problem("sdpa_fwd").unwrap();
    for name in ["sdpa_fwd_mma_splitkv", "sdpa_fwd_wgmma_splitkv"] {
        let f = Family::load(&templates(), "sdpa_fwd", name).unwrap();
        let specs = sdpa_specs();
        let space = f.space(specs.contexts()).unwrap();
        let sample: Vec<_> = space.iter_valid().step_by(41).collect();
        for (b, h, sq, skv, causal) in [
            (2i64, 3i64, 77i64, 130i64, true),
            (1, 8, 130, 77, false),
            (1, 4, 1, 8192, false),
        ] {
            for g in &sample {
                let vars = space.vars(g, 0).unwrap();
                let shape: Vars = [
                    ("BATCH", b.into()),
                    ("HEADS", h.into()),
                    ("SEQ_Q", sq.into()),
                    ("SEQ_KV", skv.into()),
                    ("HEAD_DIM", 64.into()),
                    ("CAUSAL", causal.into()),
                    ("DTYPE", "f16".into()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
                let s = vars["KV_SPLITS"].as_int().unwrap();
                let bm = vars["BLOCK_M"].as_int().unwrap();
                let scratch = f.scratch_specs(&vars, &shape).unwrap();
                let got: Vec<(&str, ElemType, usize)> = scratch
                    .iter()
                    .map(|t| (t.name.as_str(), t.elem, t.len))
                    .collect();
                let rows = (s * b * h * sq) as usize;
                assert_eq!(
                    got,
                    [
                        ("o_part", ElemType::F32, rows * 64),
                        ("lse_part", ElemType::F32, rows)
                    ]
                );
                let dims = f.launch_dims(&vars, &shape).unwrap();
                assert_eq!(dims.len(), 2);
                assert_eq!(dims[0].0, "sdpa_fwd");
                assert_eq!(
                    dims[0].1.grid,
                    [((sq + bm - 1) / bm) as u32, h as u32, (b * s) as u32]
                );
                assert_eq!(dims[0].1.block[0] as i64, vars["THREADS"].as_int().unwrap());
                assert_eq!(dims[1].0, "sdpa_splitkv_combine");
                assert_eq!(dims[1].1.grid, [((b * h * sq + 3) / 4) as u32, 1, 1]);
                assert_eq!(dims[1].1.block, [128, 1, 1]);
                assert_eq!(dims[1].1.shared_bytes, 0);
                let abi = sdpa.args(&shape);
                let args: Vec<Vec<ArgSlot>> = f
                    .launch_args(&vars, &shape)
                    .unwrap()
                    .iter()
                    .map(|a| evo_kernels::bind_abi(a, &abi).unwrap())
                    .collect();
                let parts = [ArgSlot::Scratch(0), ArgSlot::Scratch(1)];
                assert_eq!(args[1], [abi.clone(), parts.to_vec()].concat());
                let n_maps = if name.contains("wgmma") { 3 } else { 0 };
                assert_eq!(args[0].len(), abi.len() + n_maps + 2);
                assert_eq!(args[0][..abi.len()], abi[..]);
                assert!(args[0][abi.len()..abi.len() + n_maps]
                    .iter()
                    .all(|a| matches!(a, ArgSlot::TensorMap(_))));
                assert_eq!(args[0][abi.len() + n_maps..], parts);
            }
        }
        let rules = f.static_rules(Default::default());
        assert!(rules.sass_required_of("sdpa_splitkv_combine").is_empty());
        assert_eq!(rules.sass_required_of("sdpa_fwd"), f.require_sass);
    }
}
