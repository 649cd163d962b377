//! A problem's tensor-map slot becomes the evo-gpu spec the worker encodes: dimensions
//! innermost first, byte strides from the input's element type, the rank's entries only,
//! and the driver's rules checked before any GPU is involved.

use evo_eval::worker::tensor_map_spec;
use evo_gpu::tensor_map::{Swizzle, TensorDtype, TensorMapError};
use evo_kernels::harness::{ElemType, TensorMapSlot};

#[test]
fn matrix_slot_maps_to_a_valid_2d_spec() {
    // (b*h*s, 128) bf16 rows, 64x64 boxes, 128-byte swizzle.
    let slot = TensorMapSlot::matrix(1, ElemType::Bf16, 4 * 8 * 1000, 128, 128, 64, 64, 128);
    let spec = tensor_map_spec(&slot, 0x1000).unwrap();
    assert_eq!(spec.dtype, TensorDtype::Bf16);
    assert_eq!(spec.dims, vec![128, 32000]);
    assert_eq!(spec.strides_bytes, vec![256]);
    assert_eq!(spec.box_dims, vec![64, 64]);
    assert_eq!(spec.swizzle, Swizzle::B128);
    assert_eq!(spec.validate(), Ok(()));
}

#[test]
fn slot_rules_are_checked_on_the_host() {
    // A 128-column box is 256 bytes: wider than the 128-byte swizzle span.
    let slot = TensorMapSlot::matrix(0, ElemType::F16, 100, 128, 128, 64, 128, 128);
    let spec = tensor_map_spec(&slot, 0x1000).unwrap();
    assert_eq!(
        spec.validate(),
        Err(TensorMapError::SwizzleSpan {
            inner: 256,
            span: 128
        })
    );
    // Rows of 100 fp16 elements (200 bytes) cannot be strided by TMA.
    let slot = TensorMapSlot::matrix(0, ElemType::F16, 100, 100, 100, 8, 8, 0);
    let spec = tensor_map_spec(&slot, 0x1000).unwrap();
    assert!(matches!(
        spec.validate(),
        Err(TensorMapError::Stride {
            index: 1,
            value: 200
        })
    ));
    let mut bad = slot;
    bad.swizzle_bytes = 48;
    assert_eq!(
        tensor_map_spec(&bad, 0).unwrap_err(),
        TensorMapError::Swizzle(48)
    );
}

/// sdpa_fwd_wgmma's launch: the sdpa_fwd ABI plus tensor maps over q, k, v. Its argument
/// list matches the compiled kernel's PTX parameters (three 128-byte by-value maps), and
/// every map of it and of its split-KV family passes the driver's rules on the default and a
/// ragged shape, for both head dims, every BLOCK_M / BLOCK_N box and every SWIZZLE_BYTES (the
/// map's swizzle the genome's, the inner box one swizzle span).
#[test]
fn wgmma_family_tensor_maps_match_the_ptx_and_the_driver_rules() {
    use evo_core::{Target, Vars};
    use evo_eval::static_gate::{check_arguments, ptx_params};
    use evo_gpu::{CompileRequest, Compiler};
    use evo_kernels::harness::ArgSlot;
    use evo_kernels::{problem, Family, Specializations};
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let templates = std::path::PathBuf::from(manifest).join("../../templates");
    let family = Family::load(&templates, "sdpa_fwd", "sdpa_fwd_wgmma").unwrap();
    let p = problem("sdpa_fwd").unwrap();
    let shape = |d: i64, sq: i64, skv: i64| -> Vars {
        let v: Vars = [
            ("BATCH", 2.into()),
            ("HEADS", 3.into()),
            ("SEQ_Q", sq.into()),
            ("SEQ_KV", skv.into()),
            ("HEAD_DIM", d.into()),
            ("CAUSAL", true.into()),
            ("DTYPE", "bf16".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        p.complete_shape(&v).unwrap()
    };
    let shapes = vec![shape(64, 77, 130), shape(128, 1000, 1)];
    let specs = Specializations::new(p, Target::from_arch("sm_90a").unwrap(), &shapes).unwrap();
    let space = family.space(specs.contexts()).unwrap();
    let kernels: Vec<String> = family.launches.iter().map(|l| l.kernel.clone()).collect();
    // The attention kernel of both wgmma families reads its maps as the genome's SWIZZLE_BYTES
    // says (a map that disagrees overruns the shared-memory tiles).
    for name in ["sdpa_fwd_wgmma", "sdpa_fwd_wgmma_splitkv"] {
        let family = Family::load(&templates, "sdpa_fwd", name).unwrap();
        let space = family.space(specs.contexts()).unwrap();
        let mut maps = 0;
        let mut swizzles = std::collections::BTreeSet::new();
        for g in space.iter_valid() {
            let Some(evo_core::Value::Int(sw)) = g.get("SWIZZLE_BYTES").cloned() else {
                panic!("{name}: no SWIZZLE_BYTES in {}", g.canonical());
            };
            for (i, s) in shapes.iter().enumerate() {
                let vars = space.vars(&g, i).unwrap();
                let args = family.launch_args(&vars, s).unwrap();
                let extra = if name.ends_with("splitkv") { 5 } else { 3 };
                assert_eq!(args[0].len(), p.args(s).len() + extra, "{}", g.canonical());
                for a in &args[0] {
                    if let ArgSlot::TensorMap(m) = a {
                        let spec = tensor_map_spec(m, 0x10000).unwrap();
                        assert_eq!(spec.validate(), Ok(()), "{}: {spec:?}", g.canonical());
                        assert_eq!(i64::from(m.swizzle_bytes), sw, "{name}: {}", g.canonical());
                        // The inner box is one swizzle span (SWIZZLE_BYTES / 2 elements).
                        assert_eq!(m.box_dims[0] * 2, m.swizzle_bytes, "{}", g.canonical());
                        swizzles.insert(m.swizzle_bytes);
                        maps += 1;
                    }
                }
            }
        }
        assert!(maps >= 3 * 2 * 40, "{name}: {maps}");
        assert_eq!(swizzles.into_iter().collect::<Vec<_>>(), [32, 64, 128]);
    }
    // One genome through NVRTC: the list matches the PTX parameters.
    let g = space
        .iter_valid()
        .find(|g| g.canonical().contains("LOADER=tma"))
        .unwrap();
    let source = family.render(&space, &g, 0).unwrap();
    let compiler = Compiler::new("sm_90a", &["-std=c++17".into()], 0, None)
        .expect("NVRTC 13.0 (scripts/install-cuda.sh)");
    let compiled = compiler
        .compile(&CompileRequest {
            name: "wgmma.cu".into(),
            source,
        })
        .unwrap();
    assert!(compiled.success, "{}", compiled.log);
    let params = ptx_params(compiled.ptx.as_deref().unwrap());
    let vars = space.vars(&g, 0).unwrap();
    let abi = p.args(&shapes[0]);
    let args: Vec<_> = family
        .launch_args(&vars, &shapes[0])
        .unwrap()
        .iter()
        .map(|l| evo_kernels::bind_abi(l, &abi).unwrap())
        .collect();
    check_arguments(&params, &kernels, &args).unwrap();
    let mut no_maps = args.clone();
    no_maps[0].truncate(p.args(&shapes[0]).len());
    assert!(check_arguments(&params, &kernels, &no_maps).is_err());
}
