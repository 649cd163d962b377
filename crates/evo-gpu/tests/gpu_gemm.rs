//! On a GPU: the compile path targets the device's own architecture, and the shipped
//! gemm family's kernels, compiled by NVRTC and loaded from CUBIN, compute C = A·Bᵀ
//! correctly on ragged shapes, write every output element and nothing past it.
//! Skips (with the reason printed) where there is no GPU.

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use evo_core::{Target, Value, Vars};
use evo_gpu::{device, CompileRequest, Compiler};
use evo_kernels::{problem, Family, Specializations};
use half::{bf16, f16};
use rand::{Rng, SeedableRng};

fn gpu() -> Option<(Arc<CudaContext>, String)> {
    match device::probe() {
        Ok(info) if !info.devices.is_empty() => {
            let d = &info.devices[0];
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

const GUARD: usize = 4096;

/// Conversions between f32 and the 16-bit storage of one dtype.
type Codec = (fn(f32) -> u16, fn(u16) -> f32);

#[test]
fn gemm_family_is_correct_on_the_gpu() {
    let Some((ctx, arch)) = gpu() else { return };
    let stream = ctx.default_stream();
    // At run time, so that a nextest archive run elsewhere (--workspace-remap) finds them.
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let templates = PathBuf::from(manifest).join("../../templates");
    let family = Family::load(&templates, "gemm", "gemm_mma").unwrap();
    let compiler = Compiler::new(&arch, &["-std=c++17".into()], 0, None).unwrap();
    assert_eq!(compiler.arch(), arch);
    let shapes: Vec<(i64, i64, i64)> = vec![
        (1, 1, 8),
        (77, 130, 264),
        (1000, 1000, 1000),
        (256, 384, 512),
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let mut checked = 0;
    for dtype in ["f16", "bf16"] {
        let shape_vars: Vec<Vars> = shapes
            .iter()
            .map(|(m, n, k)| {
                [("M", *m), ("N", *n), ("K", *k)]
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), Value::Int(b)))
                    .chain([("DTYPE".to_string(), Value::Str(dtype.into()))])
                    .collect()
            })
            .collect();
        let specs = Specializations::new(
            problem("gemm").unwrap(),
            Target::from_arch(&arch).unwrap(),
            &shape_vars,
        )
        .unwrap();
        let space = family.space(specs.contexts()).unwrap();
        for genome in space.covering_set().0 {
            let source = family.render(&space, &genome, 0).unwrap();
            let compiled = compiler
                .compile(&CompileRequest {
                    name: "gemm.cu".into(),
                    source,
                })
                .unwrap();
            assert!(compiled.success, "{}", compiled.log);
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(
                    compiled.cubin.clone().unwrap(),
                ))
                .unwrap();
            let f = module.load_function("gemm").unwrap();
            let vars = space.vars(&genome, 0).unwrap();
            for (i, &(m, n, k)) in shapes.iter().enumerate() {
                let (mu, nu, ku) = (m as usize, n as usize, k as usize);
                let a_f: Vec<f32> = (0..mu * ku)
                    .map(|_| rng.random_range(-1.0f32..1.0))
                    .collect();
                let b_f: Vec<f32> = (0..nu * ku)
                    .map(|_| rng.random_range(-1.0f32..1.0))
                    .collect();
                let (to_bits, from_bits): Codec = if dtype == "f16" {
                    (
                        |x| f16::from_f32(x).to_bits(),
                        |b| f16::from_bits(b).to_f32(),
                    )
                } else {
                    (
                        |x| bf16::from_f32(x).to_bits(),
                        |b| bf16::from_bits(b).to_f32(),
                    )
                };
                let a: Vec<u16> = a_f.iter().map(|&x| to_bits(x)).collect();
                let b: Vec<u16> = b_f.iter().map(|&x| to_bits(x)).collect();
                // Output poisoned with NaN, plus a guard region past the end.
                let nan = if dtype == "f16" { 0x7e00u16 } else { 0x7fc0u16 };
                let c_init = vec![nan; mu * nu + GUARD];
                let a_d = stream.clone_htod(&a).unwrap();
                let b_d = stream.clone_htod(&b).unwrap();
                let mut c_d = stream.clone_htod(&c_init).unwrap();
                let dims = family.launch_dims(&vars, &shape_vars[i]).unwrap()[0].1;
                f.set_attribute(
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dims.shared_bytes as i32,
                )
                .unwrap();
                let cfg = LaunchConfig {
                    grid_dim: (dims.grid[0], dims.grid[1], dims.grid[2]),
                    block_dim: (dims.block[0], dims.block[1], dims.block[2]),
                    shared_mem_bytes: dims.shared_bytes,
                };
                let (mi, ni, ki) = (m as i32, n as i32, k as i32);
                let mut launch = stream.launch_builder(&f);
                launch
                    .arg(&a_d)
                    .arg(&b_d)
                    .arg(&mut c_d)
                    .arg(&mi)
                    .arg(&ni)
                    .arg(&ki)
                    .arg(&ki)
                    .arg(&ki)
                    .arg(&ni);
                unsafe { launch.launch(cfg) }.unwrap();
                let c: Vec<u16> = stream.clone_dtoh(&c_d).unwrap();
                let (mut err2, mut ref2, mut max_err) = (0f64, 0f64, 0f64);
                for r in 0..mu {
                    for col in 0..nu {
                        let mut acc = 0f64;
                        for l in 0..ku {
                            acc +=
                                from_bits(a[r * ku + l]) as f64 * from_bits(b[col * ku + l]) as f64;
                        }
                        let got = from_bits(c[r * nu + col]) as f64;
                        assert!(
                            got.is_finite(),
                            "{} {dtype} {m}x{n}x{k}: C[{r}][{col}] = {got}",
                            genome.canonical()
                        );
                        err2 += (got - acc).powi(2);
                        ref2 += acc * acc;
                        max_err = max_err.max((got - acc).abs());
                    }
                }
                assert!(
                    c[mu * nu..].iter().all(|&x| x == nan),
                    "{}: write past the end of C",
                    genome.canonical()
                );
                let rel = (err2 / ref2.max(1e-30)).sqrt();
                let tol = if dtype == "f16" { 2e-3 } else { 1e-2 };
                assert!(
                    rel < tol,
                    "{} {dtype} {m}x{n}x{k}: relative L2 error {rel:e} (max abs {max_err:e})",
                    genome.canonical()
                );
                checked += 1;
            }
        }
    }
    println!("checked {checked} (genome, dtype, shape) combinations on {arch}");
}
