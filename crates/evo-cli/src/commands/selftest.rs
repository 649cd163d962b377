//! `evo selftest`: checks that the evaluator itself can be trusted on this GPU.
//!
//! 1. Each problem's GPU reference kernel against the float64 CPU reference, on edge
//!    shapes and every input kind.
//! 2. Timing of kernels of known cost: a kernel that spins for a set time on the GPU's
//!    global timer must measure that long.
//! 3. Fault isolation: a kernel that faults and one that never returns, through real
//!    worker processes, must come back `crashed` and `timed_out`, and a correct kernel
//!    evaluated afterwards must pass.

use std::process::ExitCode;

use anyhow::Result;
use evo_core::config::{CorrectnessConfig, StaticConfig, TimeoutConfig};
use evo_core::{LaunchDims, Target, Value, Vars};
use evo_eval::pipeline::{Candidate, CandidateShape, Evaluator, GateSettings};
use evo_eval::protocol::TimingPlan;
use evo_eval::timing;
use evo_eval::worker::measure;
use evo_eval::Status;
use evo_gpu::runtime::{Gpu, KernelArg};
use evo_gpu::{CompileCache, CompileRequest, Compiler};
use evo_kernels::harness::InputKind;
use evo_kernels::{handwritten, Problem, VarKind};
use serde::Serialize;

use crate::output::{exit_code, outln, print_json, table};
use crate::setup;

#[derive(Serialize)]
struct CheckRow {
    group: &'static str,
    name: String,
    passed: bool,
    detail: String,
}

const SPIN: &str = r#"
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
extern "C" __global__ void copy(const float4* __restrict__ in, float4* __restrict__ out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) out[i] = in[i];
}
"#;

const PLANTED_CORRECT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/planted/gemm/j_correct.cu"
));
const PLANTED_CRASH: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/planted/gemm/a2_write_far_out_of_bounds.cu"
));
const PLANTED_HANG: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/planted/gemm/c_never_returns.cu"
));
const PLANTED_UNWRITTEN: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/planted/gemm/e_leaves_output_unwritten.cu"
));

/// Every combination of a problem's specialization values, with every shape variable 64
/// except batch and heads (2): those only repeat the same work (64 x 64 of them made the
/// float64 CPU reference of attention take minutes) and reach no other code path.
fn base_shapes(p: &dyn Problem) -> Vec<Vars> {
    let mut shapes: Vec<Vars> = vec![p
        .shape_vars()
        .iter()
        .map(|v| {
            let n = if matches!(v.name, "BATCH" | "HEADS") {
                2
            } else {
                64
            };
            (v.name.to_string(), Value::Int(n))
        })
        .collect()];
    for d in p.spec_vars() {
        let values: Vec<Value> = match d.kind {
            VarKind::Choice(c) => c.iter().map(|s| Value::Str(s.to_string())).collect(),
            VarKind::IntChoice(c) => c.iter().map(|i| Value::Int(*i)).collect(),
            VarKind::Bool => vec![Value::Bool(false), Value::Bool(true)],
            VarKind::Int { .. } => vec![d.probe_value()],
        };
        shapes = shapes
            .into_iter()
            .flat_map(|s| {
                values.iter().map(move |v| {
                    let mut s = s.clone();
                    s.insert(d.name.to_string(), v.clone());
                    s
                })
            })
            .collect();
    }
    shapes
}

fn references(gpu: &Gpu, compiler: &Compiler, rows: &mut Vec<CheckRow>) -> Result<()> {
    for p in evo_kernels::problems() {
        let bases = base_shapes(*p);
        let mut shapes = bases.clone();
        shapes.extend(p.edge_shapes(&bases));
        if p.reference(&shapes[0], &p.default_call(&shapes[0]))
            .is_none()
        {
            rows.push(CheckRow {
                group: "reference",
                name: p.name().into(),
                passed: true,
                detail: "no GPU reference yet: skipped".into(),
            });
            continue;
        }
        let mut worst = 0f64;
        let mut failures = Vec::new();
        let mut count = 0;
        // One module per distinct reference source (most shapes share one).
        let mut modules = std::collections::HashMap::new();
        for s in &shapes {
            // The plain call and one a caller may make (its own layouts and scale): the
            // reference must follow every stride and scalar the ABI allows.
            for call in [p.default_call(s), p.varied_call(s, 777, &[])] {
                let r = p.reference(s, &call).expect("checked above");
                if !modules.contains_key(r.source) {
                    let compiled = compiler.compile(&CompileRequest {
                        name: format!("{}_reference.cu", p.name()),
                        source: r.source.to_string(),
                    })?;
                    anyhow::ensure!(
                        compiled.success,
                        "reference of {} does not compile:\n{}",
                        p.name(),
                        compiled.log
                    );
                    let module =
                        gpu.load_module(compiled.cubin.as_deref().expect("success has a cubin"))?;
                    modules.insert(r.source, module);
                }
                let f = modules[r.source].function(&r.entry)?;
                for kind in [
                    InputKind::Random,
                    InputKind::Zeros,
                    InputKind::Large,
                    InputKind::OneHot,
                    InputKind::Rows,
                ] {
                    let inputs = p.generate(s, &call, kind, 12345);
                    let bufs = inputs
                        .iter()
                        .zip(&call.layouts)
                        .map(|(t, l)| {
                            let laid = l.scatter(t, &t.elem.nan_bytes());
                            let b = gpu.alloc(laid.bytes.len())?;
                            gpu.upload(&b, &laid.bytes)?;
                            Ok(b)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let out = gpu.alloc(p.output(s).len * 4)?;
                    let ptrs: Vec<u64> = bufs.iter().map(|b| b.ptr()).collect();
                    let args = evo_eval::worker::bind_args(
                        &r.args,
                        &evo_eval::worker::CallPointers {
                            inputs: &ptrs,
                            output: out.ptr(),
                            scratch: &[],
                        },
                    )
                    .map_err(|e| anyhow::anyhow!(e))?;
                    gpu.launch(&f, &r.launch, &args)?;
                    gpu.synchronize()?;
                    let got: Vec<f64> = gpu
                        .download(&out)?
                        .chunks(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                        .collect();
                    let want = p.cpu_reference(s, &call, &inputs);
                    let (mut e2, mut r2) = (0f64, 0f64);
                    let mut finite = true;
                    for (g, w) in got.iter().zip(&want) {
                        finite &= g.is_finite();
                        e2 += (g - w).powi(2);
                        r2 += w * w;
                    }
                    let rel = if r2 > 0.0 {
                        (e2 / r2).sqrt()
                    } else {
                        e2.sqrt()
                    };
                    worst = worst.max(rel);
                    count += 1;
                    // Problems compared bit for bit (fp8_quantize: the GPU rule against the host
                    // rule of evo-kernels' fp8 module) must agree exactly.
                    let bound = if p.tolerance(s).rel_l2 == 0.0 {
                        0.0
                    } else {
                        1e-4
                    };
                    if !finite || rel > bound {
                        failures.push(format!(
                            "{s:?} {kind:?} ({}): rel L2 {rel:.2e}{}",
                            call.describe(&[]),
                            if finite { "" } else { ", not finite" }
                        ));
                    }
                }
            }
        }
        rows.push(CheckRow {
            group: "reference",
            name: p.name().into(),
            passed: failures.is_empty(),
            detail: if failures.is_empty() {
                format!("GPU float32 reference vs CPU float64: {count} (shape, input kind) cases, worst relative L2 {worst:.2e} (bound {})", if p.tolerance(&shapes[0]).rel_l2 == 0.0 { "0: bit for bit" } else { "1e-4" })
            } else {
                failures.join("; ")
            },
        });
    }
    Ok(())
}

fn timing_checks(gpu: &Gpu, compiler: &Compiler, rows: &mut Vec<CheckRow>) -> Result<()> {
    let compiled = compiler.compile(&CompileRequest {
        name: "selftest.cu".into(),
        source: SPIN.into(),
    })?;
    anyhow::ensure!(
        compiled.success,
        "self-test kernels do not compile:\n{}",
        compiled.log
    );
    let module = gpu.load_module(compiled.cubin.as_deref().expect("cubin"))?;
    let spin = module.function("spin")?;
    let plan = TimingPlan::default();
    let one = LaunchDims {
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_bytes: 0,
    };
    for us in [10.0f64, 50.0] {
        let ns = (us * 1e3) as i64;
        // The gate's method: a replay launches each "set" once; enough of them that a
        // replay lasts about `sample_ms`.
        let per_graph = ((plan.sample_ms * 1e3 / us).ceil() as usize).max(1);
        let samples = measure(
            gpu,
            &plan,
            plan.warmup_ms,
            None,
            per_graph,
            |g, _| g.launch(&spin, &one, &[KernelArg::I64(ns)]),
            |_, _| Ok::<(), anyhow::Error>(()),
            |_, _| Ok(()),
        )?;
        let (median, p20, p80) = timing::summary(&samples);
        // A spin of T µs cannot take less than T; launch gaps inside a graph add a little.
        let passed = median >= us && median <= us * 1.05 + 1.5;
        rows.push(CheckRow {
            group: "timing",
            name: format!("spin {us} µs"),
            passed,
            detail: format!(
                "median {median:.3} µs (p20 {p20:.3}, p80 {p80:.3}), {} samples of {per_graph} launches; must be in [{us}, {:.2}]",
                samples.len(),
                us * 1.05 + 1.5
            ),
        });
    }
    // A 512 MiB device-to-device copy: bytes read + written over time must be below
    // any HBM's bandwidth (an undercounted time would show up here).
    let copy = module.function("copy")?;
    let n: i64 = 32 << 20; // float4 elements = 512 MiB
    let (a, b) = (gpu.alloc(n as usize * 16)?, gpu.alloc(n as usize * 16)?);
    gpu.memset_u8(&a, 1)?;
    let dims = LaunchDims {
        grid: [132 * 8, 1, 1],
        block: [256, 1, 1],
        shared_bytes: 0,
    };
    let samples = measure(
        gpu,
        &plan,
        plan.warmup_ms,
        None,
        4,
        |g, _| {
            g.launch(
                &copy,
                &dims,
                &[
                    KernelArg::Ptr(a.ptr()),
                    KernelArg::Ptr(b.ptr()),
                    KernelArg::I64(n),
                ],
            )
        },
        |_, _| Ok::<(), anyhow::Error>(()),
        |_, _| Ok(()),
    )?;
    let (median, _, _) = timing::summary(&samples);
    let gbps = 2.0 * n as f64 * 16.0 / (median * 1e-6) / 1e9;
    rows.push(CheckRow {
        group: "timing",
        name: "copy 512 MiB".into(),
        passed: gbps > 100.0 && gbps < 6000.0,
        detail: format!(
            "{gbps:.0} GB/s read+write (median {median:.1} µs); plausible range 100-6000"
        ),
    });
    Ok(())
}

fn isolation(
    gpu_index: u32,
    target: Target,
    compiler: Compiler,
    rows: &mut Vec<CheckRow>,
) -> Result<()> {
    let problem = evo_kernels::problem("gemm").expect("gemm exists");
    let shape: Vars = [("M", 256), ("N", 256), ("K", 256)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::Int(v)))
        .chain([("DTYPE".to_string(), Value::Str("f16".into()))])
        .collect();
    let evaluator = Evaluator::on_gpus(
        problem,
        compiler,
        &[gpu_index],
        TimeoutConfig {
            job_base_s: 15.0,
            ..TimeoutConfig::default()
        },
        GateSettings {
            target,
            static_rules: StaticConfig::default(),
            correctness: CorrectnessConfig {
                random_trials: 2,
                ..CorrectnessConfig::default()
            },
            timing: None,
        },
    )?;
    let cases = [
        ("faulting kernel", PLANTED_CRASH, Status::Crashed),
        ("kernel that never returns", PLANTED_HANG, Status::TimedOut),
        (
            "kernel leaving output unwritten",
            PLANTED_UNWRITTEN,
            Status::Incorrect,
        ),
        (
            "correct kernel after the faults",
            PLANTED_CORRECT,
            Status::Evaluated,
        ),
    ];
    let rt = setup::runtime()?;
    rt.block_on(async {
        for (i, (name, source, want)) in cases.iter().enumerate() {
            let rule = handwritten::parse_launch(
                problem,
                handwritten::header(source).launch.as_deref().unwrap_or(""),
            )
            .map_err(|e| anyhow::anyhow!("planted kernel header: {e}"))?;
            let c = Candidate {
                label: name.to_string(),
                source: source.to_string(),
                kernels: vec![rule.kernel.clone()],
                contiguous: vec![],
                shapes: vec![CandidateShape {
                    vars: shape.clone(),
                    launches: vec![rule.eval(&shape)?],
                    timed: false,
                    contend_us: None,
                    args: vec![],
                    scratch: vec![],
                }],
            };
            let compiled = evaluator.compile(&c)?;
            let t = std::time::Instant::now();
            let v = evaluator.evaluate(c, compiled, i as u64, 1).await;
            rows.push(CheckRow {
                group: "isolation",
                name: name.to_string(),
                passed: v.status == *want,
                detail: format!(
                    "{} after {:.1} s (expected {}): {}",
                    v.status.name(),
                    t.elapsed().as_secs_f64(),
                    want.name(),
                    v.detail.lines().next().unwrap_or("")
                ),
            });
        }
        let starts = evaluator.pool.starts().await;
        rows.push(CheckRow {
            group: "isolation",
            name: "workers replaced".into(),
            passed: starts[0] >= 3,
            detail: format!(
                "{} worker processes started for {} jobs (one per fault, plus the first)",
                starts[0],
                cases.len()
            ),
        });
        evaluator.pool.shutdown().await;
        anyhow::Ok(())
    })
}

pub fn run(gpu_index: u32, json: bool) -> Result<ExitCode> {
    let (_, info) = setup::gpus(&gpu_index.to_string())?;
    let device = info.devices[gpu_index as usize].clone();
    let arch =
        Target::arch_for_capability(device.compute_capability.0, device.compute_capability.1);
    let mut target = Target::from_arch(&arch)?;
    target.max_smem_per_block = device.max_smem_per_block_optin;
    let cache = Some(CompileCache::new(CompileCache::default_dir()));
    let compiler = Compiler::new(&arch, &["-std=c++17".to_string()], 0, cache)?;
    let mut rows = Vec::new();
    {
        let gpu = Gpu::open(gpu_index as i32)?;
        references(&gpu, &compiler, &mut rows)?;
        timing_checks(&gpu, &compiler, &mut rows)?;
    }
    isolation(gpu_index, target, compiler, &mut rows)?;
    let passed = rows.iter().all(|r| r.passed);
    let printed = if json {
        print_json(&rows)
    } else {
        print_human(&device, &rows, passed)
    };
    let code = if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    exit_code(printed, code)
}

fn print_human(
    device: &evo_gpu::device::DeviceInfo,
    rows: &[CheckRow],
    passed: bool,
) -> Result<()> {
    outln!(
        "device: {} (sm_{}{})",
        device.name,
        device.compute_capability.0,
        device.compute_capability.1
    )?;
    let mut t = table(&["group", "check", "", "detail"]);
    for r in rows {
        t.add_row(vec![
            r.group.to_string(),
            r.name.clone(),
            if r.passed { "ok" } else { "FAILED" }.to_string(),
            r.detail.clone(),
        ]);
    }
    outln!("{t}")?;
    outln!(
        "{}",
        if passed {
            "selftest passed"
        } else {
            "selftest FAILED"
        }
    )?;
    Ok(())
}
