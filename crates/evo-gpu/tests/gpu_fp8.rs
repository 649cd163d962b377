//! On a GPU: the FP8 attention family's shipped quantizer (`sdpa_fp8_quantize`) matches the
//! host rule (evo-kernels' fp8 module, the `float8` crate) bit for bit, zero slices, large and
//! tiny magnitudes included; and a knob-covering set of sdpa_fwd_fp8_mma genomes matches the
//! float64 reference on the dequantized inputs within the problem's tolerance, on a ragged
//! shape with an all-zero head. Skips (with the reason printed) where there is no GPU.

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use evo_core::{Target, Value, Vars};
use evo_gpu::{device, CompileRequest, Compiler};
use evo_kernels::harness::InputKind;
use evo_kernels::{fp8, problem, Family, Specializations};
use half::f16;

fn gpu() -> Option<(Arc<CudaContext>, String)> {
    match device::probe() {
        Ok(info) if !info.devices.is_empty() => {
            let d = &info.devices[0];
            if d.compute_capability < (8, 9) {
                println!(
                    "skipping: e4m3 mma.sync needs sm_89+, the GPU is {:?}",
                    d.compute_capability
                );
                return None;
            }
            let arch = Target::arch_for_capability(d.compute_capability.0, d.compute_capability.1);
            Some((CudaContext::new(0).expect("context on GPU 0"), arch))
        }
        Ok(_) => {
            println!("skipping: the driver sees no GPU");
            None
        }
        Err(e) => {
            println!("skipping: no GPU ({e})");
            None
        }
    }
}

fn templates() -> PathBuf {
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    PathBuf::from(manifest).join("../../templates")
}

fn shape(b: i64, h: i64, s: i64, causal: bool) -> Vars {
    [
        ("BATCH", Value::Int(b)),
        ("HEADS", Value::Int(h)),
        ("SEQ_Q", Value::Int(s)),
        ("SEQ_KV", Value::Int(s)),
        ("HEAD_DIM", Value::Int(64)),
        ("CAUSAL", Value::Bool(causal)),
        ("DTYPE", Value::Str("f16".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[test]
fn fp8_family_quantizer_and_attention_on_the_gpu() {
    let Some((ctx, arch)) = gpu() else { return };
    let stream = ctx.default_stream();
    let family = Family::load(&templates(), "sdpa_fwd_fp8", "sdpa_fwd_fp8_mma").unwrap();
    let p = problem("sdpa_fwd_fp8").unwrap();
    let compiler = Compiler::new(&arch, &["-std=c++17".into()], 0, None).unwrap();
    for causal in [false, true] {
        let shapes = vec![shape(1, 4, 77, causal), shape(2, 2, 200, causal)];
        let specs = Specializations::new(p, Target::from_arch(&arch).unwrap(), &shapes).unwrap();
        let space = family.space(specs.contexts()).unwrap();
        let (cover, _) = space.covering_set();
        for (gi, genome) in cover.iter().enumerate() {
            let source = family.render(&space, genome, 0).unwrap();
            let compiled = compiler
                .compile(&CompileRequest {
                    name: "fp8.cu".into(),
                    source,
                })
                .unwrap();
            assert!(compiled.success, "{}", compiled.log);
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(
                    compiled.cubin.clone().unwrap(),
                ))
                .unwrap();

            // The quantizer, once per genome (the same code in every variant): bit for bit.
            if gi == 0 && !causal {
                let quant = module.load_function("sdpa_fp8_quantize").unwrap();
                let (slices, len) = (6usize, 3000usize);
                let mut values: Vec<f32> = (0..slices * len)
                    .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0)
                    .collect();
                for (i, v) in values.iter_mut().enumerate() {
                    match i / len {
                        0 => *v = 0.0,                                                // all-zero slice
                        1 => *v *= 1000.0, // large (fp16 up to ~13500)
                        2 => *v *= 1e-4,   // tiny
                        3 => *v = v.signum() * 448.0 * (1.0 + (i % 3) as f32 / 64.0), // near the top
                        _ => {}
                    }
                }
                let x: Vec<u16> = values.iter().map(|v| f16::from_f32(*v).to_bits()).collect();
                let rounded: Vec<f32> = x.iter().map(|b| f16::from_bits(*b).to_f32()).collect();
                let want = fp8::quantize(&rounded, len);
                let x_d = stream.clone_htod(&x).unwrap();
                let mut codes_d = stream.clone_htod(&vec![0x5au8; slices * len]).unwrap();
                let mut desc_d = stream.clone_htod(&vec![-1f32; slices]).unwrap();
                let len_arg = len as i64;
                let mut l = stream.launch_builder(&quant);
                l.arg(&x_d).arg(&mut codes_d).arg(&mut desc_d).arg(&len_arg);
                unsafe {
                    l.launch(LaunchConfig {
                        grid_dim: (slices as u32, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    })
                }
                .unwrap();
                let codes: Vec<u8> = stream.clone_dtoh(&codes_d).unwrap();
                let desc: Vec<f32> = stream.clone_dtoh(&desc_d).unwrap();
                assert_eq!(
                    desc.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
                    want.descale.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
                    "descales differ from the host rule"
                );
                assert_eq!(desc[0], 1.0, "an all-zero slice must get descale 1");
                let diff = codes.iter().zip(&want.codes).position(|(a, b)| a != b);
                assert_eq!(diff, None, "codes differ from the host rule at {diff:?}");
            }

            let f = module.load_function("sdpa_fwd_fp8").unwrap();
            let vars = space.vars(genome, 0).unwrap();
            for (si, s) in shapes.iter().enumerate() {
                let s = p.complete_shape(s).unwrap();
                for kind in [InputKind::Random, InputKind::Zeros, InputKind::Large] {
                    let call = p.default_call(&s);
                    let host = p.generate(&s, &call, kind, 7 + si as u64);
                    let bufs: Vec<_> = host
                        .iter()
                        .map(|t| stream.clone_htod(&t.bytes).unwrap())
                        .collect();
                    let out_len = p.output(&s).len;
                    let mut o_d = stream.clone_htod(&vec![0x7e00u16; out_len]).unwrap();
                    let dims = family.launch_dims(&vars, &s).unwrap()[0].1;
                    f.set_attribute(
                        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        dims.shared_bytes as i32,
                    )
                    .unwrap();
                    let ints: Vec<i32> = ["BATCH", "HEADS", "SEQ_Q", "SEQ_KV"]
                        .iter()
                        .map(|k| s[*k].as_int().unwrap() as i32)
                        .collect();
                    // The plain call's (batch, head, seq) strides of q, k, v and o (the
                    // layouts after the three descales).
                    let strides: Vec<i64> = [0, 1, 2, 6]
                        .iter()
                        .flat_map(|&t| call.layouts[t].strides[..3].iter().map(|&x| x as i64))
                        .collect();
                    let scale = call.scalars[0];
                    let mut l = stream.launch_builder(&f);
                    l.arg(&bufs[0]).arg(&bufs[1]).arg(&bufs[2]).arg(&mut o_d);
                    l.arg(&bufs[3]).arg(&bufs[4]).arg(&bufs[5]);
                    for i in &ints {
                        l.arg(i);
                    }
                    for st in &strides {
                        l.arg(st);
                    }
                    l.arg(&scale);
                    unsafe {
                        l.launch(LaunchConfig {
                            grid_dim: (dims.grid[0], dims.grid[1], dims.grid[2]),
                            block_dim: (dims.block[0], dims.block[1], dims.block[2]),
                            shared_mem_bytes: dims.shared_bytes,
                        })
                    }
                    .unwrap();
                    let o: Vec<u16> = stream.clone_dtoh(&o_d).unwrap();
                    let want = p.cpu_reference(&s, &call, &host);
                    let tol = p.tolerance(&s);
                    let max_ref = want.iter().fold(0f64, |m, w| m.max(w.abs()));
                    let (mut e2, mut r2, mut bad) = (0f64, 0f64, 0usize);
                    for (g, w) in o.iter().zip(&want) {
                        let g = f16::from_bits(*g).to_f64();
                        let e = (g - w).abs();
                        if !g.is_finite()
                            || e > tol.atol_floor + tol.atol_of_max * max_ref + tol.rtol * w.abs()
                        {
                            bad += 1;
                        }
                        e2 += e * e;
                        r2 += w * w;
                    }
                    let rel = if r2 > 0.0 {
                        (e2 / r2).sqrt()
                    } else {
                        e2.sqrt()
                    };
                    assert!(
                        bad == 0 && rel <= tol.rel_l2,
                        "{} {kind:?} {s:?}: {bad} elements outside tolerance, relative L2 {rel:.3e}",
                        genome.canonical()
                    );
                }
            }
        }
    }
}
