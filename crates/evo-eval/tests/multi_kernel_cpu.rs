//! Without a GPU: the shipped multi-kernel families (sdpa_fwd_fp8_e2e_mma,
//! sdpa_fwd_fp8_e2e_split, sdpa_fwd_fp8_e2e_ws, sdpa_fwd_fp8_e2e_ws_cluster and the split-KV
//! attention families) compile with NVRTC, and their per-launch argument lists match the
//! parameters of the kernels they launch in the PTX (the check the evaluator runs before any
//! launch); a list with an argument missing or of the wrong width is rejected with the
//! kernel named.

use std::collections::BTreeMap;
use std::path::PathBuf;

use evo_core::{LaunchDims, Target, Vars};
use evo_eval::static_gate::{check_arguments, ptx_params, PtxParam};
use evo_gpu::{CompileRequest, Compiler};
use evo_kernels::harness::{ArgSlot, TensorSpec};
use evo_kernels::{problem, Family, Specializations};

/// A family of problem sdpa_fwd_fp8_e2e on one shape, its first valid genome compiled for
/// sm_90a: what the static gate sees.
struct Compiled {
    family: Family,
    shape: Vars,
    vars: Vars,
    params: BTreeMap<String, Vec<PtxParam>>,
}

impl Compiled {
    fn new(family: &str, shape: &[(&str, evo_core::Value)]) -> Compiled {
        Self::of_problem("sdpa_fwd_fp8_e2e", family, shape, &[])
    }

    /// `family` of problem `problem_name`, with the first valid genome that sets each of
    /// `knobs` to its value.
    fn of_problem(
        problem_name: &str,
        family: &str,
        shape: &[(&str, evo_core::Value)],
        knobs: &[(&str, evo_core::Value)],
    ) -> Compiled {
        let manifest = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
        let templates = PathBuf::from(manifest).join("../../templates");
        let family = Family::load(&templates, problem_name, family).unwrap();
        let p = problem(problem_name).unwrap();
        let shape: Vars = shape
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let shape = p.complete_shape(&shape).unwrap();
        let specs = Specializations::new(
            p,
            Target::from_arch("sm_90a").unwrap(),
            std::slice::from_ref(&shape),
        )
        .unwrap();
        let space = family.space(specs.contexts()).unwrap();
        let genome = space
            .iter_valid()
            .find(|g| knobs.iter().all(|(k, v)| g.get(k) == Some(v)))
            .unwrap();
        let source = family.render(&space, &genome, 0).unwrap();
        let compiler = Compiler::new("sm_90a", &["-std=c++17".into()], 0, None)
            .expect("NVRTC 13.0 (scripts/install-cuda.sh)");
        let compiled = compiler
            .compile(&CompileRequest {
                name: "e2e.cu".into(),
                source,
            })
            .unwrap();
        assert!(compiled.success, "{}", compiled.log);
        let params = ptx_params(compiled.ptx.as_deref().unwrap());
        let vars = space.vars(&genome, 0).unwrap();
        Compiled {
            family,
            shape,
            vars,
            params,
        }
    }

    fn kernels(&self) -> Vec<String> {
        self.family
            .launches
            .iter()
            .map(|l| l.kernel.clone())
            .collect()
    }

    /// Each kernel's arguments bound to the plain call's ABI (as the worker binds each
    /// trial's own).
    fn args(&self) -> Vec<Vec<ArgSlot>> {
        let abi = self.family.problem.args(&self.shape);
        self.family
            .launch_args(&self.vars, &self.shape)
            .unwrap()
            .iter()
            .map(|l| evo_kernels::bind_abi(l, &abi).unwrap())
            .collect()
    }

    fn dims(&self) -> Vec<(String, LaunchDims)> {
        self.family.launch_dims(&self.vars, &self.shape).unwrap()
    }

    fn scratch(&self) -> Vec<TensorSpec> {
        self.family.scratch_specs(&self.vars, &self.shape).unwrap()
    }
}

#[test]
fn fp8_e2e_argument_lists_match_the_ptx() {
    let c = Compiled::new(
        "sdpa_fwd_fp8_e2e_mma",
        &[
            ("BATCH", 2.into()),
            ("HEADS", 3.into()),
            ("SEQ_Q", 77.into()),
            ("SEQ_KV", 100.into()),
            ("HEAD_DIM", 64.into()),
            ("CAUSAL", true.into()),
            ("DTYPE", "bf16".into()),
        ],
    );
    assert_eq!(c.params["sdpa_fp8_quantize"].len(), 4);
    assert_eq!(c.params["sdpa_fwd_fp8"].len(), 24);
    let (kernels, args) = (c.kernels(), c.args());
    check_arguments(&c.params, &kernels, &args).unwrap();
    // One argument short on the attention kernel.
    let mut short = args.clone();
    short[3].pop();
    let e = check_arguments(&c.params, &kernels, &short).unwrap_err();
    assert!(
        e.contains("launch 4 (`sdpa_fwd_fp8`)") && e.contains("takes 24"),
        "{e}"
    );
    // A 32-bit length where the quantizer takes a long long.
    let mut narrow = args.clone();
    narrow[1][3] = ArgSlot::I32(7);
    let e = check_arguments(&c.params, &kernels, &narrow).unwrap_err();
    assert!(e.contains("launch 2 (`sdpa_fp8_quantize`)"), "{e}");
    // The softmax scale must be a float where the kernel takes one.
    let mut int_scale = args;
    *int_scale[3].last_mut().unwrap() = ArgSlot::I32(1);
    assert!(check_arguments(&c.params, &kernels, &int_scale).is_err());
}

/// The two-pass quantizer family (sdpa_fwd_fp8_e2e_split): seven launches whose argument
/// lists match the PTX of the kernels they name, on a ragged bf16 shape (slices of 77 x 128
/// and 1000 x 128 elements: several chunks per slice, the last one partial).
#[test]
fn fp8_e2e_split_argument_lists_match_the_ptx() {
    let c = Compiled::new(
        "sdpa_fwd_fp8_e2e_split",
        &[
            ("BATCH", 2.into()),
            ("HEADS", 3.into()),
            ("SEQ_Q", 77.into()),
            ("SEQ_KV", 1000.into()),
            ("HEAD_DIM", 128.into()),
            ("CAUSAL", false.into()),
            ("DTYPE", "bf16".into()),
        ],
    );
    assert_eq!(c.params["sdpa_fp8_amax"].len(), 4);
    assert_eq!(c.params["sdpa_fp8_quantize_chunks"].len(), 6);
    let kernels = c.kernels();
    assert_eq!(kernels.len(), 7);
    check_arguments(&c.params, &kernels, &c.args()).unwrap();
    // Chunks per slice: 77 * 128 = 9856 elements -> 2 chunks of 8192; 1000 * 128 -> 16.
    let dims = c.dims();
    assert_eq!(dims[0].1.grid, [2, 6, 1]);
    assert_eq!(dims[1].1.grid, [2, 6, 1]);
    assert_eq!(dims[2].1.grid, [16, 6, 1]);
    let amax: Vec<(String, usize)> = c
        .scratch()
        .into_iter()
        .filter(|t| t.name.ends_with("_amax"))
        .map(|t| (t.name, t.len))
        .collect();
    assert_eq!(
        amax,
        [
            ("q_amax".to_string(), 12),
            ("k_amax".to_string(), 96),
            ("v_amax".to_string(), 96)
        ]
    );
}

/// The end-to-end ws family (sdpa_fwd_fp8_e2e_ws): the split quantizer's six launches, then
/// the warp-specialized QGMMA kernel with sdpa_fwd_fp8's ABI plus three 128-byte tensor maps,
/// those maps over the e4m3 scratch codes; every list matches the PTX, and every map passes the
/// driver's rules (byte tiles, one swizzle span per box row) at both head dims on ragged shapes.
#[test]
fn fp8_e2e_ws_argument_lists_match_the_ptx() {
    use evo_eval::worker::tensor_map_spec;
    use evo_kernels::harness::{ElemType, MappedBuffer};
    for d in [64i64, 128] {
        let c = Compiled::new(
            "sdpa_fwd_fp8_e2e_ws",
            &[
                ("BATCH", 2.into()),
                ("HEADS", 3.into()),
                ("SEQ_Q", 77.into()),
                ("SEQ_KV", 1000.into()),
                ("HEAD_DIM", d.into()),
                ("CAUSAL", true.into()),
                ("DTYPE", "bf16".into()),
            ],
        );
        assert_eq!(c.params["sdpa_fwd_fp8"].len(), 27);
        let kernels = c.kernels();
        assert_eq!(kernels.len(), 7);
        assert_eq!(kernels[6], "sdpa_fwd_fp8");
        let args = c.args();
        check_arguments(&c.params, &kernels, &args).unwrap();
        let maps: Vec<_> = args[6]
            .iter()
            .filter_map(|a| match a {
                ArgSlot::TensorMap(m) => Some(*m),
                _ => None,
            })
            .collect();
        assert_eq!(
            maps.iter().map(|m| (m.of, m.buffer)).collect::<Vec<_>>(),
            [
                (MappedBuffer::Scratch, 0),
                (MappedBuffer::Scratch, 1),
                (MappedBuffer::Scratch, 2)
            ]
        );
        let scratch = c.scratch();
        for m in &maps {
            assert_eq!(m.elem, ElemType::E4m3);
            // The map covers its scratch buffer exactly: (HEAD_DIM, seq, batch * heads).
            let covered: u64 = m.dims[..m.rank as usize].iter().product();
            assert_eq!(covered as usize, scratch[m.buffer].len);
            assert_eq!(m.swizzle_bytes as i64, d);
            let spec = tensor_map_spec(m, 0x10000).unwrap();
            assert_eq!(spec.validate(), Ok(()), "{spec:?}");
        }
        // Without the last map the attention kernel's list is short.
        let mut short = args.clone();
        short[6].pop();
        let e = check_arguments(&c.params, &kernels, &short).unwrap_err();
        assert!(e.contains("`sdpa_fwd_fp8`"), "{e}");
    }
}

/// The one-pass cluster quantizer family (sdpa_fwd_fp8_e2e_ws_cluster): one launch of
/// sdpa_fp8_quantize_qkv (twelve parameters, the compiled cluster in its PTX), then the ws
/// kernel; every list matches the PTX, at both cluster sizes.
#[test]
fn fp8_e2e_ws_cluster_argument_lists_match_the_ptx() {
    for cluster in [8i64, 16] {
        let c = Compiled::of_problem(
            "sdpa_fwd_fp8_e2e",
            "sdpa_fwd_fp8_e2e_ws_cluster",
            &[
                ("BATCH", 2.into()),
                ("HEADS", 3.into()),
                ("SEQ_Q", 77.into()),
                ("SEQ_KV", 1000.into()),
                ("HEAD_DIM", 64.into()),
                ("CAUSAL", false.into()),
                ("DTYPE", "f16".into()),
            ],
            &[("QUANT_CLUSTER", cluster.into())],
        );
        assert_eq!(c.params["sdpa_fp8_quantize_qkv"].len(), 12);
        let kernels = c.kernels();
        assert_eq!(kernels, ["sdpa_fp8_quantize_qkv", "sdpa_fwd_fp8"]);
        let args = c.args();
        check_arguments(&c.params, &kernels, &args).unwrap();
        let mut narrow = args.clone();
        narrow[0][11] = ArgSlot::I32(256);
        let e = check_arguments(&c.params, &kernels, &narrow).unwrap_err();
        assert!(e.contains("`sdpa_fp8_quantize_qkv`"), "{e}");
        assert_eq!(c.dims()[0].1.grid, [cluster as u32, 18, 1]);
    }
}

/// The split-KV attention families (problem sdpa_fwd): the attention kernel takes the ABI
/// (sdpa_fwd_wgmma: plus three 128-byte tensor maps) and two float32 pointers, the combine
/// kernel the ABI and the same two pointers; the launches' argument lists match, on a
/// ragged causal shape (seq_q 77, seq_kv 130); the wgmma genome loads K/V by TMA.
#[test]
fn split_kv_argument_lists_match_the_ptx() {
    for (name, kernel_params, loader) in [
        ("sdpa_fwd_mma_splitkv", 23, None),
        ("sdpa_fwd_wgmma_splitkv", 26, Some("tma")),
    ] {
        let mut knobs = vec![("KV_SPLITS", 4.into())];
        knobs.extend(loader.map(|l| ("LOADER", l.into())));
        let c = Compiled::of_problem(
            "sdpa_fwd",
            name,
            &[
                ("BATCH", 2.into()),
                ("HEADS", 3.into()),
                ("SEQ_Q", 77.into()),
                ("SEQ_KV", 130.into()),
                ("HEAD_DIM", 64.into()),
                ("CAUSAL", true.into()),
                ("DTYPE", "bf16".into()),
            ],
            &knobs,
        );
        assert_eq!(c.vars["KV_SPLITS"], 4.into());
        assert_eq!(c.params["sdpa_fwd"].len(), kernel_params, "{name}");
        assert_eq!(c.params["sdpa_splitkv_combine"].len(), 23, "{name}");
        let kernels = c.kernels();
        assert_eq!(kernels, ["sdpa_fwd", "sdpa_splitkv_combine"]);
        let args = c.args();
        check_arguments(&c.params, &kernels, &args).unwrap();
        // Without the partial buffers the combine kernel's list is short.
        let mut short = args.clone();
        short[1].truncate(21);
        let e = check_arguments(&c.params, &kernels, &short).unwrap_err();
        assert!(e.contains("`sdpa_splitkv_combine`"), "{e}");
        let scratch = c.scratch();
        assert_eq!(scratch[0].len, 4 * 2 * 3 * 77 * 64);
        assert_eq!(scratch[1].len, 4 * 2 * 3 * 77);
        assert_eq!(c.dims()[0].1.grid[2], 8);
    }
}
