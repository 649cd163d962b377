//! On a GPU: a variant made of several kernels, each with its own arguments and a scratch
//! buffer between them, through the worker (`evo_eval::worker::serve`, the code behind
//! `evo worker`). A gemm computed in two steps (kernel 1: scratch = 2·A in float32;
//! kernel 2: C = (scratch / 2)·Bᵀ) must pass every correctness check; the same variant
//! whose first kernel writes only half of the scratch must be rejected (the second kernel
//! reads the NaN poison), and so must a second kernel that takes a NaN in scratch as "not
//! written" and recomputes the value (it passes a NaN poison: the stale-output trials
//! poison scratch with large finite values); a third kernel that spins for a fixed number of
//! cycles must add its time to the variant's (the timing graph holds the whole sequence).
//! Skips (with the reason printed) where there is no GPU.

use std::io::Cursor;

use evo_core::{LaunchDims, Target, Vars};
use evo_eval::protocol::{
    CorrectnessPlan, Cubin, Job, JobResult, Request, Response, ShapeJob, TimingPlan,
};
use evo_eval::Status;
use evo_gpu::{device, CompileRequest, Compiler};
use evo_kernels::harness::{ArgSlot, ElemType, TensorSpec};

const SOURCE: &str = r#"
#include <cuda_fp16.h>
extern "C" __global__ void twice(const __half* a, float* s, int n, int written) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < written; i += gridDim.x * blockDim.x)
        s[i] = 2.0f * __half2float(a[i]);
}
extern "C" __global__ void gemm_from_scratch(const float* s, const __half* b, __half* c,
        int M, int N, int K, int lda, int ldb, int ldc) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
    if (n >= N || m >= M) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += 0.5f * s[m * lda + k] * __half2float(b[n * ldb + k]);
    c[m * ldc + n] = __float2half(acc);
}
// gemm_from_scratch, but a NaN in scratch counts as "not written": 2·A recomputed from a.
extern "C" __global__ void gemm_from_scratch_or_a(const float* s, const __half* a, const __half* b,
        __half* c, int M, int N, int K, int lda, int ldb, int ldc) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
    if (n >= N || m >= M) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        float x = s[m * lda + k];
        if (x != x) x = 2.0f * __half2float(a[m * lda + k]);
        acc += 0.5f * x * __half2float(b[n * ldb + k]);
    }
    c[m * ldc + n] = __float2half(acc);
}
extern "C" __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {}
}
"#;

fn arch() -> Option<String> {
    match device::probe() {
        Ok(info) if !info.devices.is_empty() => {
            let d = &info.devices[0];
            Some(Target::arch_for_capability(
                d.compute_capability.0,
                d.compute_capability.1,
            ))
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

/// A family of problem sdpa_fwd_fp8_e2e specialized for one shape on `arch`.
/// `source` compiled for `arch` (NVRTC, C++17); its CUBIN.
fn compile_cubin(arch: &str, name: &str, source: String) -> Vec<u8> {
    let compiler = Compiler::new(arch, &["-std=c++17".into()], 0, None).unwrap();
    let compiled = compiler
        .compile(&CompileRequest {
            name: name.into(),
            source,
        })
        .unwrap();
    assert!(compiled.success, "{}", compiled.log);
    compiled.cubin.unwrap()
}

fn e2e_family(
    name: &str,
    arch: &str,
    shape: &[(&str, i64)],
) -> (
    evo_kernels::Family,
    evo_kernels::Specializations,
    evo_core::Space,
) {
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let templates = std::path::PathBuf::from(manifest).join("../../templates");
    let family = evo_kernels::Family::load(&templates, "sdpa_fwd_fp8_e2e", name).unwrap();
    let p = evo_kernels::problem("sdpa_fwd_fp8_e2e").unwrap();
    let shape = p
        .complete_shape(
            &shape
                .iter()
                .map(|(k, v)| (k.to_string(), (*v).into()))
                .collect(),
        )
        .unwrap();
    let specs = evo_kernels::Specializations::new(
        p,
        Target::from_arch(arch).unwrap(),
        std::slice::from_ref(&shape),
    )
    .unwrap();
    let space = family.space(specs.contexts()).unwrap();
    (family, specs, space)
}

/// The two-step gemm: `twice` writing all of the scratch or half of it, then
/// `gemm_from_scratch` (or, `nan_fallback`, `gemm_from_scratch_or_a`), then optionally `spin`.
fn job(
    id: u64,
    cubin: &[u8],
    shape: &Vars,
    written_half: bool,
    nan_fallback: bool,
    spin: Option<i64>,
) -> Job {
    let (m, n, k) = (77i64, 130i64, 264i64);
    let dims = |grid: [u32; 3], block: u32| LaunchDims {
        grid,
        block: [block, 1, 1],
        shared_bytes: 0,
    };
    let written = if written_half { m * k / 2 } else { m * k };
    let second = if nan_fallback {
        "gemm_from_scratch_or_a"
    } else {
        "gemm_from_scratch"
    };
    let mut kernels = vec!["twice".to_string(), second.to_string()];
    let mut launches = vec![
        dims([8, 1, 1], 256),
        dims([(n as u32).div_ceil(128), m as u32, 1], 128),
    ];
    // The ABI's arguments stay symbolic (each trial binds its own strides); `twice` reads
    // `a` as one contiguous run, so the job declares it contiguous.
    let gemm = evo_kernels::problem("gemm").unwrap();
    let mut abi: Vec<ArgSlot> = (0..gemm.args(shape).len()).map(ArgSlot::Abi).collect();
    if nan_fallback {
        abi.insert(0, ArgSlot::Scratch(0));
    } else {
        abi[0] = ArgSlot::Scratch(0);
    }
    let mut args = vec![
        vec![
            ArgSlot::Input(0),
            ArgSlot::Scratch(0),
            ArgSlot::I32((m * k) as i32),
            ArgSlot::I32(written as i32),
        ],
        abi,
    ];
    if let Some(cycles) = spin {
        kernels.push("spin".into());
        launches.push(dims([1, 1, 1], 32));
        args.push(vec![ArgSlot::I64(cycles)]);
    }
    Job {
        id,
        problem: "gemm".into(),
        label: format!("two-step gemm {id}"),
        cubin: Cubin(cubin.to_vec()),
        kernels,
        shapes: vec![ShapeJob {
            vars: shape.clone(),
            launches,
            timed: true,
            contend_us: None,
            args,
            scratch: vec![TensorSpec {
                name: "a2".into(),
                elem: ElemType::F32,
                len: (m * k) as usize,
            }],
        }],
        correctness: CorrectnessPlan {
            seeds: vec![11, 12],
            adversarial: true,
            repeat_check: true,
            guard_bytes: 4096,
            tolerance: vec![],
            end_to_end: None,
        },
        timing: Some(TimingPlan {
            warmup_ms: 5.0,
            budget_ms: 500.0,
            ..TimingPlan::default()
        }),
        batch_seed: None,
        contiguous: vec!["a".into()],
    }
}

#[test]
fn a_two_kernel_variant_with_scratch_through_the_worker() {
    let Some(arch) = arch() else { return };
    let cubin = compile_cubin(&arch, "two_step.cu", SOURCE.into());
    let shape = evo_kernels::problem("gemm")
        .unwrap()
        .complete_shape(
            &[("M", 77), ("N", 130), ("K", 264)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.into()))
                .collect(),
        )
        .unwrap();
    let spin_cycles = 200_000; // about 100 µs at 2 GHz
    let jobs = [
        job(1, &cubin, &shape, false, false, None),
        job(2, &cubin, &shape, true, false, None),
        job(3, &cubin, &shape, false, false, Some(spin_cycles)),
        job(4, &cubin, &shape, false, true, None),
        job(5, &cubin, &shape, true, true, None),
    ];
    let mut input = String::new();
    for j in &jobs {
        input.push_str(&serde_json::to_string(&Request::Evaluate(Box::new(j.clone()))).unwrap());
        input.push('\n');
    }
    input.push_str(&serde_json::to_string(&Request::Shutdown).unwrap());
    input.push('\n');
    let mut output = Vec::new();
    evo_eval::worker::serve(0, Cursor::new(input), &mut output).unwrap();
    let results: Vec<JobResult> = String::from_utf8(output)
        .unwrap()
        .lines()
        .filter_map(|l| match serde_json::from_str::<Response>(l).unwrap() {
            Response::Result(r) => Some(*r),
            Response::Ready { .. } => None,
        })
        .collect();
    assert_eq!(results.len(), 5);
    for r in &results {
        println!("job {}: {:?} {}", r.id, r.status, r.detail);
    }
    // Correct in two steps: every check passed and the whole call was timed.
    let ok = &results[0];
    assert_eq!(ok.status, Status::Evaluated, "{}", ok.detail);
    assert_eq!(ok.kernels.len(), 2);
    let t = ok.shapes[0].timing.as_ref().expect("timed");
    assert!(t.median_us > 0.0);
    // The second kernel read scratch the first never wrote: the NaN poison shows.
    let planted = &results[1];
    assert_eq!(planted.status, Status::Incorrect, "{}", planted.detail);
    assert!(planted.detail.contains("not finite"), "{}", planted.detail);
    // A third kernel's time is part of the variant's time.
    let with_spin = &results[2];
    assert_eq!(with_spin.status, Status::Evaluated, "{}", with_spin.detail);
    let t3 = with_spin.shapes[0].timing.as_ref().expect("timed");
    println!(
        "two kernels {:.2} us, with a {spin_cycles}-cycle spin {:.2} us",
        t.median_us, t3.median_us
    );
    assert!(
        t3.median_us > t.median_us + 20.0,
        "spin kernel not in the timed sequence: {} vs {} us",
        t3.median_us,
        t.median_us
    );
    // A NaN in scratch taken as "not written": correct when kernel 1 writes it all ...
    assert_eq!(
        results[3].status,
        Status::Evaluated,
        "{}",
        results[3].detail
    );
    // ... and with half of it unwritten it passes every NaN-poisoned trial: the large
    // finite poison of the stale-output trials rejects it.
    let fallback = &results[4];
    assert_eq!(fallback.status, Status::Incorrect, "{}", fallback.detail);
    assert!(
        fallback.detail.contains("stale finite output"),
        "{}",
        fallback.detail
    );
}

/// The kernels the GPU tests here compile, compiled without a GPU (NVRTC), so a GPU run
/// tests the worker and not a typo.
#[test]
fn the_test_kernels_compile() {
    let compiler = Compiler::new("sm_90a", &["-std=c++17".to_string()], 0, None).unwrap();
    let out = compiler
        .compile(&CompileRequest {
            name: "two_step.cu".into(),
            source: SOURCE.into(),
        })
        .unwrap();
    assert!(out.success, "{}", out.log);
    for k in [
        "twice",
        "gemm_from_scratch",
        "gemm_from_scratch_or_a",
        "spin",
    ] {
        assert!(out.kernel(k).is_some(), "no {k}");
    }
}

/// The shipped end-to-end FP8 family through the worker on a small ragged shape: correct
/// in launch order (the error is against attention on the fp16 inputs); with the attention
/// kernel moved first it reads e4m3 codes and descales no quantizer has written yet, and
/// the NaN poison rejects it.
#[test]
fn fp8_end_to_end_family_through_the_worker() {
    let Some(arch) = arch() else { return };
    if !arch.starts_with("sm_9") && !arch.starts_with("sm_10") && !arch.starts_with("sm_89") {
        println!("skipping: {arch} has no e4m3 mma.sync");
        return;
    }
    let (family, specs, space) = e2e_family(
        "sdpa_fwd_fp8_e2e_mma",
        &arch,
        &[
            ("BATCH", 2),
            ("HEADS", 4),
            ("SEQ_Q", 77),
            ("SEQ_KV", 200),
            ("HEAD_DIM", 64),
        ],
    );
    let genome = evo_core::Genome::parse(
        "BLOCK_M=64,BLOCK_N=32,NUM_WARPS=4,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=2,SWIZZLE=xor,V_LAYOUT=transpose,WARP_SPEC=off",
    )
    .unwrap();
    let c =
        &evo_eval::pipeline::family_candidates(&family, &space, &specs, &genome, &[]).unwrap()[0];
    let cubin = compile_cubin(&arch, "e2e.cu", c.source.clone());
    let s = &c.shapes[0];
    let make = |id: u64, order: &[usize]| Job {
        id,
        problem: "sdpa_fwd_fp8_e2e".into(),
        label: format!("e2e order {order:?}"),
        cubin: Cubin(cubin.clone()),
        kernels: order.iter().map(|&i| c.kernels[i].clone()).collect(),
        shapes: vec![ShapeJob {
            vars: s.vars.clone(),
            launches: order.iter().map(|&i| s.launches[i]).collect(),
            timed: true,
            contend_us: None,
            args: order.iter().map(|&i| s.args[i].clone()).collect(),
            scratch: s.scratch.clone(),
        }],
        correctness: CorrectnessPlan {
            seeds: vec![5],
            adversarial: true,
            repeat_check: true,
            guard_bytes: 4096,
            tolerance: vec![],
            end_to_end: None,
        },
        timing: Some(TimingPlan {
            warmup_ms: 5.0,
            budget_ms: 500.0,
            ..TimingPlan::default()
        }),
        batch_seed: None,
        contiguous: c.contiguous.clone(),
    };
    let jobs = [make(1, &[0, 1, 2, 3]), make(2, &[3, 0, 1, 2])];
    let mut input = String::new();
    for j in &jobs {
        input.push_str(&serde_json::to_string(&Request::Evaluate(Box::new(j.clone()))).unwrap());
        input.push('\n');
    }
    let mut output = Vec::new();
    evo_eval::worker::serve(0, Cursor::new(input), &mut output).unwrap();
    let results: Vec<JobResult> = String::from_utf8(output)
        .unwrap()
        .lines()
        .filter_map(|l| match serde_json::from_str::<Response>(l).unwrap() {
            Response::Result(r) => Some(*r),
            Response::Ready { .. } => None,
        })
        .collect();
    for r in &results {
        println!("job {}: {:?} {}", r.id, r.status, r.detail);
    }
    assert_eq!(
        results[0].status,
        Status::Evaluated,
        "{}",
        results[0].detail
    );
    // Four launches, two kernels: one report each.
    let names: Vec<&str> = results[0].kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["sdpa_fp8_quantize", "sdpa_fwd_fp8"]);
    let worst = results[0].shapes[0].worst().unwrap().rel_l2;
    println!(
        "end-to-end rel L2 {worst:.3e}, time {:.2} us",
        results[0].shapes[0].timing.as_ref().unwrap().median_us
    );
    assert!(worst > 1e-3 && worst < 0.25, "{worst}");
    assert_eq!(
        results[1].status,
        Status::Incorrect,
        "{}",
        results[1].detail
    );
    assert!(
        results[1].detail.contains("not finite"),
        "{}",
        results[1].detail
    );
}

/// The two-pass quantizer of sdpa_fwd_fp8_e2e_split (sdpa_fp8_amax, then
/// sdpa_fp8_quantize_chunks) gives the host rule's codes and descales bit for bit, and the
/// same bytes as the one-pass sdpa_fp8_quantize of the same module: on slices of 9856
/// elements (two chunks, the second partial) with the slice maximum in the partial chunk, an
/// all-zero slice, a NaN, and fp16 values up to 60000.
#[test]
fn split_quantizer_is_the_one_pass_rule_bit_for_bit() {
    use evo_gpu::runtime::{Gpu, KernelArg};
    let Some(arch) = arch() else { return };
    if !arch.starts_with("sm_9") && !arch.starts_with("sm_10") && !arch.starts_with("sm_89") {
        println!("skipping: {arch} is below the FP8 family's min_arch");
        return;
    }
    let (slices, slice_len, chunk) = (6usize, 77 * 128usize, 8192usize);
    let (family, _, space) = e2e_family(
        "sdpa_fwd_fp8_e2e_split",
        &arch,
        &[
            ("BATCH", 2),
            ("HEADS", 3),
            ("SEQ_Q", 77),
            ("SEQ_KV", 77),
            ("HEAD_DIM", 128),
        ],
    );
    let genome = space.iter_valid().next().unwrap();
    let source = family.render(&space, &genome, 0).unwrap();
    let cubin = compile_cubin(&arch, "split.cu", source);

    // Inputs (fp16): pseudo-random normal-ish values; slice 1 has its maximum in the last,
    // partial chunk; slice 2 is all zeros; slice 3 holds a NaN; slice 4 reaches 60000.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    };
    let mut values: Vec<f32> = (0..slices * slice_len)
        .map(|_| half::f16::from_f64(next() * 3.0).to_f32())
        .collect();
    values[slice_len + slice_len - 5] = 250.0;
    values[2 * slice_len..3 * slice_len].fill(0.0);
    values[3 * slice_len + 100] = f32::NAN;
    values[4 * slice_len + 7] = -60000.0;
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    let want = evo_kernels::fp8::quantize(&values, slice_len);

    let gpu = Gpu::open(0).unwrap();
    let module = gpu.load_module(&cubin).unwrap();
    let x = gpu.alloc(bytes.len()).unwrap();
    gpu.upload(&x, &bytes).unwrap();
    let chunks = slice_len.div_ceil(chunk);
    let partial = gpu.alloc(slices * chunks * 4).unwrap();
    let run = |split: bool| -> (Vec<u8>, Vec<u8>) {
        let codes = gpu.alloc(slices * slice_len).unwrap();
        let descale = gpu.alloc(slices * 4).unwrap();
        for b in [&codes, &descale, &partial] {
            gpu.memset_u8(b, 0xff).unwrap();
        }
        let n = KernelArg::I64(slice_len as i64);
        let c = KernelArg::I64(chunk as i64);
        let dims = |grid: [u32; 3]| LaunchDims {
            grid,
            block: [256, 1, 1],
            shared_bytes: 0,
        };
        if split {
            let grid = [chunks as u32, slices as u32, 1];
            let amax = module.function("sdpa_fp8_amax").unwrap();
            let args = [KernelArg::Ptr(x.ptr()), KernelArg::Ptr(partial.ptr()), n, c];
            gpu.launch(&amax, &dims(grid), &args).unwrap();
            let quant = module.function("sdpa_fp8_quantize_chunks").unwrap();
            let args = [
                KernelArg::Ptr(x.ptr()),
                KernelArg::Ptr(codes.ptr()),
                KernelArg::Ptr(descale.ptr()),
                KernelArg::Ptr(partial.ptr()),
                n,
                c,
            ];
            gpu.launch(&quant, &dims(grid), &args).unwrap();
        } else {
            let one = module.function("sdpa_fp8_quantize").unwrap();
            let args = [
                KernelArg::Ptr(x.ptr()),
                KernelArg::Ptr(codes.ptr()),
                KernelArg::Ptr(descale.ptr()),
                n,
            ];
            gpu.launch(&one, &dims([slices as u32, 1, 1]), &args)
                .unwrap();
        }
        gpu.synchronize().unwrap();
        (
            gpu.download(&codes).unwrap(),
            gpu.download(&descale).unwrap(),
        )
    };
    // The host rule's code for a NaN need not be CUDA's: that element is compared between
    // the two GPU quantizers only.
    let want_descale: Vec<u8> = want.descale.iter().flat_map(|d| d.to_le_bytes()).collect();
    let mut outputs = Vec::new();
    for split in [true, false] {
        let (codes, descale) = run(split);
        let first = (0..codes.len()).find(|&i| !values[i].is_nan() && codes[i] != want.codes[i]);
        assert_eq!(
            first, None,
            "split {split}: first code differing from the host rule"
        );
        assert_eq!(descale, want_descale, "split {split}: descales");
        outputs.push(codes);
    }
    assert!(outputs[0] == outputs[1], "the two quantizers differ");
    println!(
        "split quantizer: {} codes and {slices} descales equal to the host rule (descales {:?})",
        want.codes.len(),
        want.descale
    );
}

/// The one-pass cluster quantizer of sdpa_fwd_fp8_e2e_ws_cluster (sdpa_fp8_quantize_qkv: q, k and
/// v in one launch, QUANT_CLUSTER CTAs per slice, the maxima through distributed shared memory)
/// gives the host rule's codes and descales bit for bit, and the split quantizer's bytes (the
/// NaN's code included), in f16 and bf16, at every schedule (8 or 16 CTAs per slice, 1 or 3 per
/// SM; 16 is a non-portable cluster the loader allows): with the whole slice kept on chip and
/// with most of it read again (`hold` = 256 elements), on q slices of 9856 elements whose maximum
/// lies in the last CTA's part, k and v slices of 1664 (a part of 104 per CTA at 16: some CTAs
/// hold nothing of a slice shorter than the cluster's parts), an all-zero slice, a NaN, and
/// values up to 60000.
#[test]
fn cluster_quantizer_is_the_one_pass_rule_bit_for_bit() {
    use evo_gpu::runtime::{Gpu, KernelArg};
    let Some(arch) = arch() else { return };
    if !arch.starts_with("sm_9") && !arch.starts_with("sm_10") {
        println!("skipping: {arch} has no thread-block clusters for sdpa_fwd_fp8_e2e_ws_cluster");
        return;
    }
    let (slices, n_q, n_kv, chunk) = (6usize, 77 * 128usize, 13 * 128usize, 8192usize);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    };
    let mut q: Vec<f32> = (0..slices * n_q).map(|_| (next() * 3.0) as f32).collect();
    q[n_q + n_q - 5] = 250.0;
    q[2 * n_q..3 * n_q].fill(0.0);
    q[3 * n_q + 100] = f32::NAN;
    q[4 * n_q + 7] = -60000.0;
    let k: Vec<f32> = (0..slices * n_kv).map(|_| (next() * 0.01) as f32).collect();
    let mut v: Vec<f32> = q[..slices * n_kv].iter().rev().copied().collect();
    v[5 * n_kv + 3] = 1e-3;
    let gpu = Gpu::open(0).unwrap();
    let (family, _, space) = e2e_family(
        "sdpa_fwd_fp8_e2e_ws_cluster",
        &arch,
        &[
            ("BATCH", 2),
            ("HEADS", 3),
            ("SEQ_Q", 77),
            ("SEQ_KV", 13),
            ("HEAD_DIM", 128),
        ],
    );
    let mut checked = 0;
    for dtype in ["f16", "bf16"] {
        // What the GPU reads: the values rounded to the dtype.
        let rounded = |values: &[f32]| -> (Vec<u8>, Vec<f32>) {
            if dtype == "f16" {
                let h: Vec<half::f16> = values.iter().map(|v| half::f16::from_f32(*v)).collect();
                (
                    h.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    h.iter().map(|x| x.to_f32()).collect(),
                )
            } else {
                let h: Vec<half::bf16> = values.iter().map(|v| half::bf16::from_f32(*v)).collect();
                (
                    h.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    h.iter().map(|x| x.to_f32()).collect(),
                )
            }
        };
        let tensors = [(rounded(&q), n_q), (rounded(&k), n_kv), (rounded(&v), n_kv)];
        let inputs: Vec<_> = tensors
            .iter()
            .map(|((bytes, _), _)| {
                let x = gpu.alloc(bytes.len()).unwrap();
                gpu.upload(&x, bytes).unwrap();
                x
            })
            .collect();
        for (cluster, per_sm) in [(8i64, 1i64), (8, 3), (16, 1), (16, 3)] {
            let genome = space
                .iter_valid()
                .find(|g| {
                    g.get("QUANT_CLUSTER") == Some(&cluster.into())
                        && g.get("QUANT_CTAS_PER_SM") == Some(&per_sm.into())
                })
                .unwrap();
            let mut vars = space.vars(&genome, 0).unwrap();
            vars.insert("DTYPE".into(), dtype.into());
            let threads = vars["QUANT_THREADS"].as_int().unwrap() as u32;
            let full_hold = vars["QUANT_HOLD"].as_int().unwrap() as usize;
            let source = family.render_vars(&vars).unwrap();
            let cubin = compile_cubin(&arch, "cluster.cu", source);
            let module = gpu.load_module(&cubin).unwrap();
            let part = n_q.div_ceil(cluster as usize).div_ceil(8) * 8;
            for hold in [full_hold, 256] {
                let keep = part.min(hold);
                let outputs: Vec<_> = tensors
                    .iter()
                    .map(|((_, _), n)| {
                        let codes = gpu.alloc(slices * n).unwrap();
                        let descale = gpu.alloc(slices * 4).unwrap();
                        for b in [&codes, &descale] {
                            gpu.memset_u8(b, 0xff).unwrap();
                        }
                        (codes, descale)
                    })
                    .collect();
                let mut args: Vec<KernelArg> =
                    inputs.iter().map(|x| KernelArg::Ptr(x.ptr())).collect();
                args.extend(outputs.iter().map(|(c, _)| KernelArg::Ptr(c.ptr())));
                args.extend(outputs.iter().map(|(_, d)| KernelArg::Ptr(d.ptr())));
                args.extend([
                    KernelArg::I64(n_q as i64),
                    KernelArg::I64(n_kv as i64),
                    KernelArg::I64(keep as i64),
                ]);
                let f = module.function("sdpa_fp8_quantize_qkv").unwrap();
                f.set_max_dynamic_smem((2 * keep) as u32).unwrap();
                let dims = LaunchDims {
                    grid: [cluster as u32, 3 * slices as u32, 1],
                    block: [threads, 1, 1],
                    shared_bytes: (2 * keep) as u32,
                };
                gpu.launch(&f, &dims, &args).unwrap();
                gpu.synchronize().unwrap();
                for (t, (((_, read), n), (codes, descale))) in
                    tensors.iter().zip(&outputs).enumerate()
                {
                    let want = evo_kernels::fp8::quantize(read, *n);
                    let codes = gpu.download(codes).unwrap();
                    let first =
                        (0..codes.len()).find(|&i| !read[i].is_nan() && codes[i] != want.codes[i]);
                    let what = format!(
                        "{dtype}, cluster {cluster}, {per_sm} per SM, hold {hold}, tensor {t}"
                    );
                    assert_eq!(
                        first, None,
                        "{what}: first code differing from the host rule"
                    );
                    let want_descale: Vec<u8> =
                        want.descale.iter().flat_map(|d| d.to_le_bytes()).collect();
                    assert_eq!(
                        gpu.download(descale).unwrap(),
                        want_descale,
                        "{what}: descales"
                    );
                    // The split quantizer's bytes (NaN's code included) on the same input.
                    let split = split_codes(&gpu, &module, &inputs[t], slices, *n, chunk);
                    assert!(
                        codes == split,
                        "{what}: the cluster and split quantizers differ"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 4 * 2 * 3);
    println!("cluster quantizer: f16 and bf16 codes and descales equal to the host rule at 4 schedules, held and re-read");
}

/// The split quantizer's codes of `slices` slices of `n` elements at `x` (module of an e2e family).
fn split_codes(
    gpu: &evo_gpu::runtime::Gpu,
    module: &evo_gpu::runtime::Module,
    x: &evo_gpu::runtime::DeviceBuffer,
    slices: usize,
    n: usize,
    chunk: usize,
) -> Vec<u8> {
    use evo_gpu::runtime::KernelArg;
    let codes = gpu.alloc(slices * n).unwrap();
    let descale = gpu.alloc(slices * 4).unwrap();
    let chunks = n.div_ceil(chunk);
    let partial = gpu.alloc(slices * chunks * 4).unwrap();
    let (n, c) = (KernelArg::I64(n as i64), KernelArg::I64(chunk as i64));
    let dims = LaunchDims {
        grid: [chunks as u32, slices as u32, 1],
        block: [256, 1, 1],
        shared_bytes: 0,
    };
    let amax = module.function("sdpa_fp8_amax").unwrap();
    gpu.launch(
        &amax,
        &dims,
        &[KernelArg::Ptr(x.ptr()), KernelArg::Ptr(partial.ptr()), n, c],
    )
    .unwrap();
    let quant = module.function("sdpa_fp8_quantize_chunks").unwrap();
    let args = [
        KernelArg::Ptr(x.ptr()),
        KernelArg::Ptr(codes.ptr()),
        KernelArg::Ptr(descale.ptr()),
        KernelArg::Ptr(partial.ptr()),
        n,
        c,
    ];
    gpu.launch(&quant, &dims, &args).unwrap();
    gpu.synchronize().unwrap();
    gpu.download(&codes).unwrap()
}
